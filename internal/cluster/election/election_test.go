package election

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
)

func newElector(t *testing.T, db *sql.DB, cfg Config) *Elector {
	t.Helper()
	e, err := New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func readLock(t *testing.T, db *sql.DB, key string) Lock {
	t.Helper()
	e := newElector(t, db, Config{OwnerID: "reader", LockKey: key})
	l, found, err := e.Read(context.Background())
	if err != nil || !found {
		t.Fatalf("reading lock %q: found %v, %v", key, found, err)
	}
	return l
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{Config{OwnerID: "n1"}, ""},
		{Config{}, "OwnerID is empty"},
		{Config{OwnerID: strings.Repeat("x", 256)}, "OwnerID is 256 bytes"},
		{Config{OwnerID: "n1", TTL: 2 * time.Second}, "Config.TTL"},
		{Config{OwnerID: "n1", TTL: 3500 * time.Millisecond}, "Config.TTL"},
		{Config{OwnerID: "n1", TTL: 10 * time.Second, RenewInterval: 8 * time.Second}, "Config.RenewInterval"},
		{Config{OwnerID: "n1", CheckInterval: time.Millisecond}, "Config.CheckInterval"},
	} {
		_, err := New(nil, tc.cfg)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	c := Config{OwnerID: "n1"}.withDefaults()
	if c.TTL != 15*time.Second || c.RenewInterval != 3750*time.Millisecond || c.CheckInterval != 10*time.Second || c.TrustWindow() != 12*time.Second {
		t.Errorf("defaults: %+v, trust window %v", c, c.TrustWindow())
	}
	if w := (Config{TTL: 3 * time.Second}).TrustWindow(); w != 2*time.Second {
		t.Errorf("trust window for 3s = %v", w)
	}
}

// Acceptance: two nodes racing for a free lock; exactly one wins, every
// time, over at least 100 races.
func TestRaceForFreeLock(t *testing.T) {
	t.Parallel()
	dsn, _ := clustertest.DB(t)
	dbA, dbB := clustertest.Open(t, dsn), clustertest.Open(t, dsn)
	const races = 200
	for i := range races {
		key := fmt.Sprintf("race-%d", i)
		ea := newElector(t, dbA, Config{OwnerID: "node-a", LockKey: key})
		eb := newElector(t, dbB, Config{OwnerID: "node-b", LockKey: key})
		start := make(chan struct{})
		var wg sync.WaitGroup
		var heldA, heldB bool
		var epochA, epochB uint64
		var errA, errB error
		wg.Go(func() { <-start; heldA, epochA, errA = ea.TryAcquire(context.Background()) })
		wg.Go(func() { <-start; heldB, epochB, errB = eb.TryAcquire(context.Background()) })
		close(start)
		wg.Wait()
		if errA != nil || errB != nil {
			t.Fatalf("race %d: errors %v, %v", i, errA, errB)
		}
		if heldA == heldB {
			t.Fatalf("race %d: node-a held=%v, node-b held=%v; want exactly one winner", i, heldA, heldB)
		}
		winner, epoch := "node-a", epochA
		if heldB {
			winner, epoch = "node-b", epochB
		}
		l := readLock(t, dbA, key)
		if l.Owner != winner || l.Epoch != epoch || epoch != 1 || epochA != epochB {
			t.Fatalf("race %d: winner %s at epoch %d (a saw %d, b saw %d), row says %+v", i, winner, epoch, epochA, epochB, l)
		}
	}
}

// Acceptance: a live lock is never taken by another node, whatever the
// clocks of the nodes say (correction (b): no node clock enters the
// statement; correction (a): only an expired lock is taken).
func TestLiveLockNeverTaken(t *testing.T) {
	t.Parallel()
	dsn, db := clustertest.DB(t)
	ctx := context.Background()
	holder := newElector(t, db, Config{OwnerID: "holder", TTL: 10 * time.Second})
	held, epoch, err := holder.TryAcquire(ctx)
	if err != nil || !held {
		t.Fatalf("holder: held %v, %v", held, err)
	}
	for _, skew := range []time.Duration{time.Hour, -time.Hour, 24 * time.Hour * 365} {
		other := newElector(t, clustertest.Open(t, dsn), Config{
			OwnerID: fmt.Sprintf("skewed%v", skew), TTL: 10 * time.Second,
			Clock: clock.NewFake(time.Now().Add(skew)),
		})
		for range 30 {
			held, got, err := other.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if held || got != epoch {
				t.Fatalf("node with a clock %v off took the live lock (held %v, epoch %d, holder's %d)", skew, held, got, epoch)
			}
		}
	}
	l := readLock(t, db, DefaultLockKey)
	if l.Owner != "holder" || l.Epoch != epoch {
		t.Fatalf("lock is %+v; want holder at epoch %d", l, epoch)
	}
	// The holder's renewal still works and increments the epoch.
	if held, e2, err := holder.TryAcquire(ctx); err != nil || !held || e2 != epoch+1 {
		t.Fatalf("holder renewal: held %v epoch %d (want %d), %v", held, e2, epoch+1, err)
	}
}

// naiveSQL is the lock upsert as Helix-style lock tables usually specify
// it, with lock key and owner placeholders and a 10-second timeout: the
// statement the package corrects.
const naiveSQL = `INSERT INTO helix_locks (lock_key, owner_id, expires_at, epoch, status)
    VALUES (?, ?, NOW() + 10, 1, 1)
    ON DUPLICATE KEY
        UPDATE owner_id   = IF(owner_id = VALUES(owner_id) OR expires_at < VALUES(expires_at), VALUES(owner_id), owner_id),
               expires_at = IF(owner_id = VALUES(owner_id) OR expires_at < VALUES(expires_at), VALUES(expires_at), expires_at),
               epoch      = IF(owner_id = VALUES(owner_id) OR expires_at < VALUES(expires_at), epoch + 1, epoch)`

// pinnedConn is a session whose NOW() is fixed at ts (SET timestamp): a
// node whose statement runs at that database time.
func pinnedConn(t *testing.T, db *sql.DB, ts time.Time) *sql.Conn {
	t.Helper()
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.ExecContext(context.Background(), "SET timestamp = ?", float64(ts.UnixMicro())/1e6); err != nil {
		t.Fatal(err)
	}
	return c
}

func ownerOf(t *testing.T, db *sql.DB, key string) (string, uint64) {
	t.Helper()
	var owner string
	var epoch uint64
	if err := db.QueryRow("SELECT owner_id, epoch FROM helix_locks WHERE lock_key = ? AND status = 1", key).Scan(&owner, &epoch); err != nil {
		t.Fatal(err)
	}
	return owner, epoch
}

// Why correction (a): the seed's statement, run as written, lets a second
// node take a lock that is still live whenever its VALUES(expires_at) is
// later than the holder's, here because it tries two seconds after the
// holder's last renewal, with eight seconds of lease left. Our statement,
// at the same database times, leaves the lock alone.
func TestSeedStatementTakesLiveLock(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	ctx := context.Background()
	// Second :05 of a minute, so NOW() + 10 happens to be a valid time
	// (see TestSeedExpiryArithmetic for the other seconds).
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	a, b := pinnedConn(t, db, t0), pinnedConn(t, db, t0.Add(2*time.Second))

	if _, err := a.ExecContext(ctx, naiveSQL, "seed", "node-a"); err != nil {
		t.Fatal(err)
	}
	var live bool
	if err := b.QueryRowContext(ctx, "SELECT expires_at >= NOW(6) FROM helix_locks WHERE lock_key = 'seed'").Scan(&live); err != nil || !live {
		t.Fatalf("node-a's lock should be live at node-b's time: live %v, %v", live, err)
	}
	if _, err := b.ExecContext(ctx, naiveSQL, "seed", "node-b"); err != nil {
		t.Fatal(err)
	}
	if owner, _ := ownerOf(t, db, "seed"); owner != "node-b" {
		t.Fatalf("seed statement: owner %q; this test expects the seed's flaw to let node-b take the live lock", owner)
	}

	// The same race with the corrected statement.
	if _, err := a.ExecContext(ctx, acquireSQL, "fixed", "node-a", 11); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ExecContext(ctx, acquireSQL, "fixed", "node-b", 11); err != nil {
		t.Fatal(err)
	}
	if owner, epoch := ownerOf(t, db, "fixed"); owner != "node-a" || epoch != 1 {
		t.Fatalf("corrected statement: owner %q epoch %d; want node-a at 1", owner, epoch)
	}
	// Once the lease has run out (database time), node-b takes it.
	late := pinnedConn(t, db, t0.Add(13*time.Second))
	if _, err := late.ExecContext(ctx, acquireSQL, "fixed", "node-b", 11); err != nil {
		t.Fatal(err)
	}
	if owner, epoch := ownerOf(t, db, "fixed"); owner != "node-b" || epoch != 2 {
		t.Fatalf("after expiry: owner %q epoch %d; want node-b at 2", owner, epoch)
	}
}

// Why correction (b): with the expiry computed from a node's own clock (as
// an implementation that binds its local time does), a node whose clock is
// an hour ahead takes a live lock under the seed's comparison.
func TestSeedComparisonWithNodeClock(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	ctx := context.Background()
	bound := strings.Replace(naiveSQL, "NOW() + 10", "?", 1)
	now := time.Now().UTC()
	if _, err := db.ExecContext(ctx, bound, "skew", "node-a", now.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, bound, "skew", "node-b", now.Add(time.Hour+10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if owner, _ := ownerOf(t, db, "skew"); owner != "node-b" {
		t.Fatalf("owner %q; the seed's comparison should let the skewed node take the live lock", owner)
	}
}

// The seed's NOW() + <seconds> is arithmetic on a number: at second :55,
// NOW() + 10 is ...0065, not a time. TIMESTAMPADD is what we use.
func TestSeedExpiryArithmetic(t *testing.T) {
	t.Parallel()
	_, db := clustertest.DB(t)
	c := pinnedConn(t, db, time.Date(2030, 1, 2, 3, 4, 55, 0, time.UTC))
	var sum string
	var added time.Time
	if err := c.QueryRowContext(context.Background(), "SELECT NOW() + 10, TIMESTAMPADD(SECOND, 10, NOW())").Scan(&sum, &added); err != nil {
		t.Fatal(err)
	}
	if sum != "20300102030465" || !added.Equal(time.Date(2030, 1, 2, 3, 5, 5, 0, time.UTC)) {
		t.Fatalf("NOW() + 10 = %s, TIMESTAMPADD = %s", sum, added)
	}
	// In strict mode (cluster.OpenDB sets it) the seed's statement fails in
	// the last ten seconds of every minute; without it, it stores a zero date.
	if _, err := c.ExecContext(context.Background(), naiveSQL, "arith", "node-a"); err == nil {
		t.Fatal("the seed's statement stored NOW() + 10 at second :55; want an invalid-value error")
	}
}

// recorder collects Run's callbacks as ordered events.
type recorder struct {
	ch chan string
}

func newRecorder() *recorder { return &recorder{ch: make(chan string, 64)} }

func (r *recorder) elected(epoch uint64) { r.ch <- fmt.Sprintf("elected %d", epoch) }
func (r *recorder) demoted(err error)    { r.ch <- "demoted: " + err.Error() }

func (r *recorder) next(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-r.ch:
		return ev
	case <-time.After(60 * time.Second):
		t.Fatal("no election event within 60s")
		return ""
	}
}

// runElector runs e until the test ends or stop is called; stop returns
// Run's error.
func runElector(t *testing.T, e *Elector, r *recorder) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() { err = e.Run(ctx, r.elected, r.demoted); close(done) }()
	stop = func() error { cancel(); <-done; return err }
	t.Cleanup(func() { stop() })
	return stop
}

// A holder that stops renewing loses the lock once its lease expires (by
// the database's clock), and a standby takes it with a higher epoch.
func TestExpiredLockTakenByStandby(t *testing.T) {
	t.Parallel()
	dsn, db := clustertest.DB(t)
	ctx := context.Background()
	a := newElector(t, db, Config{OwnerID: "node-a", TTL: 3 * time.Second})
	held, epochA, err := a.TryAcquire(ctx)
	if err != nil || !held {
		t.Fatalf("node-a: held %v, %v", held, err)
	}
	// node-a never renews. node-b checks often; it must not win before
	// the lease ends, and must win after.
	b := newElector(t, clustertest.Open(t, dsn), Config{OwnerID: "node-b", TTL: 3 * time.Second, CheckInterval: 100 * time.Millisecond})
	r := newRecorder()
	runElector(t, b, r)
	ev := r.next(t)
	var epochB uint64
	if _, err := fmt.Sscanf(ev, "elected %d", &epochB); err != nil || epochB <= epochA {
		t.Fatalf("node-b: %q; want elected with an epoch above %d", ev, epochA)
	}
	if held, _, err := a.TryAcquire(ctx); err != nil || held {
		t.Fatalf("node-a after losing the lock: held %v, %v", held, err)
	}
}

// A holder that shuts down steps down first, then releases the lock, so a
// standby takes it without waiting for the TTL.
func TestGracefulRelease(t *testing.T) {
	t.Parallel()
	dsn, db := clustertest.DB(t)
	ra, rb := newRecorder(), newRecorder()
	a := newElector(t, db, Config{OwnerID: "node-a", TTL: 10 * time.Second})
	stopA := runElector(t, a, ra)
	if ev := ra.next(t); ev != "elected 1" {
		t.Fatalf("node-a: %q", ev)
	}
	b := newElector(t, clustertest.Open(t, dsn), Config{OwnerID: "node-b", TTL: 10 * time.Second, CheckInterval: 50 * time.Millisecond})
	runElector(t, b, rb)
	if err := stopA(); !errors.Is(err, context.Canceled) {
		t.Fatalf("node-a Run = %v", err)
	}
	if ev := ra.next(t); ev != "demoted: context canceled" {
		t.Fatalf("node-a: %q", ev)
	}
	ev := rb.next(t)
	if !strings.HasPrefix(ev, "elected ") || ev == "elected 1" {
		t.Fatalf("node-b: %q", ev)
	}
}

// elected is node-a elected in a database of the test's own.
type elected struct {
	a        *Elector
	db       *sql.DB // node-a's own pool
	r        *recorder
	clk      *clock.Fake
	observer *sql.DB // another pool on the database
}

// electedHolder starts node-a on its own pool with a fake clock in a
// database of the test's own, and waits until it holds the lock and has
// armed its renewal and trust timers.
func electedHolder(t *testing.T) elected {
	t.Helper()
	dsn, observer := clustertest.DB(t)
	h := elected{db: clustertest.Open(t, dsn), r: newRecorder(), clk: clock.NewFake(time.Unix(1_000_000, 0)), observer: observer}
	h.a = newElector(t, h.db, Config{OwnerID: "node-a", TTL: 10 * time.Second, Clock: h.clk})
	runElector(t, h.a, h.r)
	if ev := h.r.next(t); ev != "elected 1" {
		t.Fatalf("node-a: %q", ev)
	}
	h.clk.WaitForTimers(2) // renewal and trust window
	return h
}

// A holder whose renewal fails steps down at once, while its lease is
// still live in the database: no other node can hold the lock yet.
func TestStepDownWhenRenewalFails(t *testing.T) {
	t.Parallel()
	h := electedHolder(t)
	a, db, r, clk, observer := h.a, h.db, h.r, h.clk, h.observer
	db.Close() // the node loses its database
	clk.Advance(a.Config().RenewInterval)
	ev := r.next(t)
	if !strings.HasPrefix(ev, "demoted: election: renewal not confirmed") {
		t.Fatalf("node-a: %q", ev)
	}
	// Ordering: the step-down happened while the lease was still live, so
	// before the lock could pass to anyone else.
	if l := readLock(t, observer, DefaultLockKey); l.Owner != "node-a" || !l.Live() {
		t.Fatalf("after the step-down the lock is %+v; want node-a's, still live", l)
	}
}

// A holder whose renewal hangs in the database (here: blocked on a row
// lock) steps down when its trust window ends, before its lease does.
func TestStepDownWhenRenewalHangs(t *testing.T) {
	t.Parallel()
	h := electedHolder(t)
	a, r, clk, observer := h.a, h.r, h.clk, h.observer

	blocker, err := observer.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	var id int64
	if err := blocker.QueryRow("SELECT id FROM helix_locks WHERE lock_key = ? FOR UPDATE", DefaultLockKey).Scan(&id); err != nil {
		t.Fatal(err)
	}

	cfg := a.Config()
	clk.Advance(cfg.RenewInterval)                     // the renewal starts and blocks
	clk.Advance(cfg.TrustWindow() - cfg.RenewInterval) // the trust window ends
	ev := r.next(t)
	if !strings.HasPrefix(ev, "demoted: "+ErrTrustExpired.Error()) {
		t.Fatalf("node-a: %q", ev)
	}
	// The renewal is still blocked, so nothing changed the row: the lease
	// node-a gave up on is live, and no one else could hold the lock.
	l := readLock(t, observer, DefaultLockKey)
	if l.Owner != "node-a" || !l.Live() || l.Epoch != 1 {
		t.Fatalf("after the step-down the lock is %+v; want node-a's at epoch 1, still live", l)
	}
}

// The epoch moves by exactly one per renewal; a jump means another process
// renews under our id, and the holder steps down.
func TestStepDownOnOwnerConflict(t *testing.T) {
	t.Parallel()
	h := electedHolder(t)
	a, r, clk, observer := h.a, h.r, h.clk, h.observer
	twin := newElector(t, observer, Config{OwnerID: "node-a", TTL: 10 * time.Second})
	if held, _, err := twin.TryAcquire(context.Background()); err != nil || !held {
		t.Fatalf("twin: %v %v", held, err)
	}
	clk.Advance(a.Config().RenewInterval)
	if ev := r.next(t); !strings.HasPrefix(ev, "demoted: "+ErrOwnerConflict.Error()) {
		t.Fatalf("node-a: %q", ev)
	}
}

// A holder renews on schedule and keeps the lock, with the epoch growing
// by one per renewal.
func TestRenewal(t *testing.T) {
	t.Parallel()
	h := electedHolder(t)
	a, r, clk, observer := h.a, h.r, h.clk, h.observer
	for i := range 5 {
		clk.Advance(a.Config().RenewInterval)
		clk.WaitForTimers(2)
		if l := readLock(t, observer, DefaultLockKey); l.Owner != "node-a" || l.Epoch != uint64(i+2) {
			// The timers are re-armed only after the confirmation.
			t.Fatalf("after renewal %d: %+v", i+1, l)
		}
	}
	select {
	case ev := <-r.ch:
		t.Fatalf("unexpected event %q", ev)
	default:
	}
}
