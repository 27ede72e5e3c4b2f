package election

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
)

// Defaults and limits of Config.
const (
	DefaultLockKey = "coordinator_lock"
	// DefaultTTL and the default RenewInterval (TTL/4) ride out a
	// replicated database holding commits while it evicts a dead server
	// (Galera: about 6 s): the trust window (12 s) exceeds one renewal
	// interval (3.75 s) plus that stall, so a holder whose renewal waits
	// through it keeps the lock (docs/guides/cluster-mode.md).
	DefaultTTL           = 15 * time.Second
	DefaultCheckInterval = 10 * time.Second

	minTTL           = 3 * time.Second // below it TTL/2 renewals leave no room in the trust window
	maxTTL           = time.Hour
	minCheckInterval = 10 * time.Millisecond
	maxCheckInterval = time.Hour

	// expirySlack is how long after a live lock's expiry a standby checks
	// again.
	expirySlack = 20 * time.Millisecond
	// releaseTimeout bounds the release of the lock after Run's context ends.
	releaseTimeout = 2 * time.Second
	// maxStatementTries bounds retries of a statement that hit a deadlock or
	// lock-wait timeout (concurrent upserts on one unique key can deadlock
	// in InnoDB; the server rolled the loser back).
	maxStatementTries = 3
	// maxConfirmReads bounds the confirmation reads after a statement
	// that met the row and left it, while they miss it.
	maxConfirmReads = 5
)

// Errors a holder steps down with (onDemoted's argument wraps one of them,
// a database error, or the context's error).
var (
	// ErrTrustExpired: no renewal was confirmed within the trust window.
	ErrTrustExpired = errors.New("election: no renewal confirmed within the trust window")
	// ErrLost: the renewal's confirmation read shows another owner or an
	// expired lock.
	ErrLost = errors.New("election: the lock is no longer held")
	// ErrOwnerConflict: the epoch moved by more than one renewal, so another
	// process renews the lock under this node's owner id (two nodes with
	// one --node-id).
	ErrOwnerConflict = errors.New("election: another process renews the lock under this owner id")
)

// Config configures an Elector. Zero fields take their defaults.
type Config struct {
	// OwnerID is this node's id (--node-id), 1..255 bytes. Two processes
	// must never share one.
	OwnerID string
	// LockKey names the lock row (default "coordinator_lock").
	LockKey string
	// TTL is the lease one acquisition or renewal grants, in whole seconds,
	// 3 s to 1 h (default 15 s).
	TTL time.Duration
	// RenewInterval is how often the holder renews (default TTL/4); it must
	// be positive and shorter than TrustWindow. A database stall shorter
	// than TrustWindow − RenewInterval does not cost the lock.
	RenewInterval time.Duration
	// CheckInterval is how often a standby reads the lock (default 10 s),
	// 10 ms to 1 h.
	CheckInterval time.Duration
	// Clock measures the trust window and the intervals; nil is the real
	// clock, whose timers and differences use the monotonic clock. It never
	// sets a lock time.
	Clock clock.Clock
	// Logger; nil discards.
	Logger *slog.Logger
}

// TrustWindow is how long a holder acts on a confirmed statement, from the
// moment it sent it: TTL − max(1 s, TTL/5).
func (c Config) TrustWindow() time.Duration {
	return c.TTL - max(time.Second, c.TTL/5)
}

func (c Config) withDefaults() Config {
	c.LockKey = cmp.Or(c.LockKey, DefaultLockKey)
	c.TTL = cmp.Or(c.TTL, DefaultTTL)
	c.RenewInterval = cmp.Or(c.RenewInterval, c.TTL/4)
	c.CheckInterval = cmp.Or(c.CheckInterval, DefaultCheckInterval)
	c.Clock = cmp.Or(c.Clock, clock.Real)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

func (c Config) validate() error {
	if err := cluster.CheckName("election: Config.OwnerID", c.OwnerID); err != nil {
		return err
	}
	if err := cluster.CheckName("election: Config.LockKey", c.LockKey); err != nil {
		return err
	}
	if c.TTL < minTTL || c.TTL > maxTTL || c.TTL%time.Second != 0 {
		return fmt.Errorf("election: Config.TTL is %v; want whole seconds from %v to %v", c.TTL, minTTL, maxTTL)
	}
	if c.RenewInterval <= 0 || c.RenewInterval >= c.TrustWindow() {
		return fmt.Errorf("election: Config.RenewInterval is %v; want more than 0 and less than the trust window %v (TTL − max(1s, TTL/5))",
			c.RenewInterval, c.TrustWindow())
	}
	if c.CheckInterval < minCheckInterval || c.CheckInterval > maxCheckInterval {
		return fmt.Errorf("election: Config.CheckInterval is %v; want %v to %v", c.CheckInterval, minCheckInterval, maxCheckInterval)
	}
	return nil
}

// acquireSQL is the usual lock upsert with corrections (a) and (b) (see
// the package documentation). Arguments: lock key, owner id, lease seconds
// (TTL+1). MySQL assigns ON DUPLICATE KEY UPDATE columns left to right and
// later expressions see earlier assignments; once owner_id is assigned ours
// the later conditions hold too, and if it was not they evaluate exactly as
// the first did, so the three always agree.
const acquireSQL = `INSERT INTO helix_locks (lock_key, owner_id, expires_at, epoch, status)
VALUES (?, ?, TIMESTAMPADD(SECOND, ?, NOW()), 1, 1)
ON DUPLICATE KEY
    UPDATE owner_id   = IF(owner_id = VALUES(owner_id) OR expires_at < NOW(6), VALUES(owner_id), owner_id),
           expires_at = IF(owner_id = VALUES(owner_id) OR expires_at < NOW(6), VALUES(expires_at), expires_at),
           epoch      = IF(owner_id = VALUES(owner_id) OR expires_at < NOW(6), epoch + 1, epoch)`

// readSQL is the confirmation read: the row and the server's time, in one
// statement. It is a locking read, so it reads the newest committed row
// (waiting for a statement under way on it), not a snapshot (see the
// package documentation).
const readSQL = `SELECT owner_id, epoch, expires_at, NOW(6) FROM helix_locks WHERE lock_key = ? AND status = 1 LOCK IN SHARE MODE`

// releaseSQL ends this owner's lease at once (graceful shutdown) so a
// standby need not wait for the TTL. It leaves epoch alone: the next
// acquisition increments it.
const releaseSQL = `UPDATE helix_locks SET expires_at = TIMESTAMPADD(SECOND, -1, NOW())
WHERE lock_key = ? AND status = 1 AND owner_id = ? AND expires_at >= NOW(6)`

// Lock is the lock row as read, with the server's time of the read.
type Lock struct {
	Owner     string
	Epoch     uint64
	ExpiresAt time.Time // database time
	DBNow     time.Time // the database's NOW(6) when the row was read
}

// Live reports whether the lock had not expired when it was read.
func (l Lock) Live() bool { return !l.ExpiresAt.Before(l.DBNow) }

// Remaining is how long the lock had left when it was read, by the
// database's clock (0 once expired).
func (l Lock) Remaining() time.Duration { return max(0, l.ExpiresAt.Sub(l.DBNow)) }

// Elector takes part in the election for one lock on behalf of one node.
type Elector struct {
	db       *sql.DB
	cfg      Config
	leaseArg int64 // seconds the statement adds to NOW(): TTL+1
}

// New returns an Elector for db (opened with cluster.OpenDB, migrated).
func New(db *sql.DB, cfg Config) (*Elector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Elector{db: db, cfg: cfg, leaseArg: int64(cfg.TTL/time.Second) + 1}, nil
}

// Config returns the configuration with defaults filled in.
func (e *Elector) Config() Config { return e.cfg }

// attempt is the outcome of one statement and its confirmation.
type attempt struct {
	held  bool
	lock  Lock // as confirmed; zero if found is false
	found bool
	sent  time.Time // local time the (last try of the) statement was sent
}

// TryAcquire runs the acquisition statement once and confirms it by
// reading the row. held reports whether this node holds the lock now; epoch
// is the lock's epoch as read (this node's if held, the holder's otherwise).
// It never takes a live lock from another owner.
func (e *Elector) TryAcquire(ctx context.Context) (held bool, epoch uint64, err error) {
	a, err := e.try(ctx)
	return a.held, a.lock.Epoch, err
}

func (e *Elector) try(ctx context.Context) (attempt, error) {
	var a attempt
	var changed int64
	for tries := 1; ; tries++ {
		a.sent = e.cfg.Clock.Now()
		res, err := e.db.ExecContext(ctx, acquireSQL, e.cfg.LockKey, e.cfg.OwnerID, e.leaseArg)
		if err != nil {
			if cluster.IsRetryable(err) && tries < maxStatementTries {
				continue
			}
			return attempt{}, fmt.Errorf("election: upserting lock %q: %w", e.cfg.LockKey, err)
		}
		if changed, err = res.RowsAffected(); err != nil {
			return attempt{}, fmt.Errorf("election: upserting lock %q: %w", e.cfg.LockKey, err)
		}
		break
	}
	l, found, err := e.Read(ctx)
	// No row changed means the statement met the row and left it: a read
	// that misses it ran before the commit of the row's writer was
	// visible to it (see the package documentation). Read again.
	for reads := 1; err == nil && !found && changed == 0 && reads < maxConfirmReads; reads++ {
		l, found, err = e.Read(ctx)
	}
	if err != nil {
		return attempt{}, err
	}
	a.lock, a.found = l, found
	// 1 row affected: inserted; 2: updated; 0: the row was left as it was.
	a.held = changed > 0 && found && l.Owner == e.cfg.OwnerID && l.Live()
	return a, nil
}

// Read returns the lock row and the database's time; found is false when
// there is no active row for the lock.
func (e *Elector) Read(ctx context.Context) (l Lock, found bool, err error) {
	err = e.db.QueryRowContext(ctx, readSQL, e.cfg.LockKey).Scan(&l.Owner, &l.Epoch, &l.ExpiresAt, &l.DBNow)
	if errors.Is(err, sql.ErrNoRows) {
		return Lock{}, false, nil
	}
	if err != nil {
		return Lock{}, false, fmt.Errorf("election: reading lock %q: %w", e.cfg.LockKey, err)
	}
	return l, true, nil
}

// Run takes part in the election until ctx ends: a standby until it
// acquires the lock, then the holder until it steps down, then a standby
// again. It calls onElected with the epoch of each acquisition, and
// onDemoted with the reason each time it stops holding. Both run on Run's
// goroutine and must return promptly: onElected starts the coordinator's
// work, onDemoted stops it, and must have stopped it when it returns —
// the trust window keeps a margin of max(1 s, TTL/5) for that.
//
// When ctx ends while holding, Run calls onDemoted(ctx.Err()), then
// releases the lock so a standby can take it without waiting for the TTL.
// Run returns ctx.Err(). Call Run at most once at a time per Elector.
func (e *Elector) Run(ctx context.Context, onElected func(epoch uint64), onDemoted func(reason error)) error {
	lg := e.cfg.Logger.With(slog.String("lock", e.cfg.LockKey), slog.String("owner", e.cfg.OwnerID))
	for {
		a, err := e.standby(ctx, lg)
		if err != nil {
			return err
		}
		lg.Info("election: elected coordinator", slog.Uint64("epoch", a.lock.Epoch))
		onElected(a.lock.Epoch)
		reason := e.lead(ctx, a)
		lg.Warn("election: stepped down", slog.Any("reason", reason))
		onDemoted(reason)
		if ctx.Err() != nil {
			e.release(ctx, lg)
			return ctx.Err()
		}
	}
}

// standby returns once this node holds the lock, or with ctx's error.
func (e *Elector) standby(ctx context.Context, lg *slog.Logger) (attempt, error) {
	for {
		wait := e.cfg.CheckInterval
		l, found, err := e.Read(ctx)
		switch {
		case err != nil:
			lg.Warn("election: standby check failed", slog.Any("err", err))
		case !found || !l.Live() || l.Owner == e.cfg.OwnerID:
			a, err := e.try(ctx)
			if err != nil {
				lg.Warn("election: acquisition failed", slog.Any("err", err))
				break
			}
			if a.held {
				return a, nil
			}
			if a.found && a.lock.Live() {
				wait = min(wait, a.lock.Remaining()+expirySlack)
			}
		default:
			wait = min(wait, l.Remaining()+expirySlack)
		}
		if ctx.Err() != nil {
			return attempt{}, ctx.Err()
		}
		if err := e.sleep(ctx, wait); err != nil {
			return attempt{}, err
		}
	}
}

func (e *Elector) sleep(ctx context.Context, d time.Duration) error {
	return clock.Sleep(ctx, e.cfg.Clock, d)
}

// lead holds the lock acquired by a until it cannot any more, and returns
// why.
func (e *Elector) lead(ctx context.Context, a attempt) error {
	clk := e.cfg.Clock
	epoch := a.lock.Epoch
	trustDeadline := a.sent.Add(e.cfg.TrustWindow())
	trust := clk.NewTimer(trustDeadline.Sub(clk.Now()))
	renew := clk.NewTimer(a.sent.Add(e.cfg.RenewInterval).Sub(clk.Now()))
	defer func() { trust.Stop(); renew.Stop() }()
	trustErr := func() error {
		return fmt.Errorf("%w (%v since the last confirmed statement was sent, epoch %d)", ErrTrustExpired, e.cfg.TrustWindow(), epoch)
	}
	type result struct {
		a   attempt
		err error
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-trust.C():
			return trustErr()
		case <-renew.C():
		}

		// The renewal runs on its own goroutine so that the trust window can
		// end while the statement hangs; the goroutine always ends before
		// this function continues.
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan result, 1)
		go func() {
			a, err := e.try(rctx)
			done <- result{a, err}
		}()
		var r result
		select {
		case r = <-done:
			cancel()
		case <-trust.C():
			cancel()
			<-done
			return trustErr()
		case <-ctx.Done():
			cancel()
			<-done
			return ctx.Err()
		}

		switch {
		case r.err != nil:
			return fmt.Errorf("election: renewal not confirmed: %w", r.err)
		case !r.a.held:
			return fmt.Errorf("%w: after renewing, the row says owner %q, epoch %d, live %v", ErrLost, r.a.lock.Owner, r.a.lock.Epoch, r.a.lock.Live())
		case r.a.lock.Epoch != epoch+1:
			return fmt.Errorf("%w: renewal took epoch %d to %d", ErrOwnerConflict, epoch, r.a.lock.Epoch)
		}
		epoch = r.a.lock.Epoch
		trust.Stop()
		renew.Stop()
		now := clk.Now()
		trust = clk.NewTimer(r.a.sent.Add(e.cfg.TrustWindow()).Sub(now))
		renew = clk.NewTimer(r.a.sent.Add(e.cfg.RenewInterval).Sub(now))
	}
}

// release ends this node's lease early; failing is harmless (the lease
// then runs out by itself).
func (e *Elector) release(ctx context.Context, lg *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, err := e.db.ExecContext(rctx, releaseSQL, e.cfg.LockKey, e.cfg.OwnerID); err != nil {
		lg.Warn("election: releasing the lock failed; it expires by itself", slog.Any("err", err))
	}
}
