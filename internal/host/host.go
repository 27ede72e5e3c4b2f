package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
)

// Log is a partition's log as the host holds it: the coordinator's Log,
// which the host closes when it is done with it.
type Log interface {
	coordinator.Log
	// Close releases the log; for one that did not fail, it first makes
	// everything appended durable.
	Close() error
}

// Storage is one partition's durable state as opened for one run: the log
// the coordinator appends to and the store of its snapshots.
type Storage struct {
	Log       Log
	Snapshots coordinator.SnapshotStore
}

// Config configures a Host.
type Config struct {
	// Name names the partition in logs and answers ("the node",
	// "partition default/emails#3").
	Name string
	// Open opens the partition's storage: at Open, and again for every
	// reopen after a failure (with Reopen).
	Open        func(ctx context.Context) (Storage, error)
	Coordinator coordinator.Config
	Schedule    Schedule
	// Reopen makes the host reopen its storage after the log failed and
	// serve again (embedded mode). Without it the host stops serving for
	// good and calls OnFailure (cluster mode: the partition may have moved
	// to another node, which only its owner can tell).
	Reopen bool
	// RestartBackoff is the first wait before an attempt to reopen
	// (default 1 s), and MaxRestartBackoff the longest (default 15 s). A
	// failure after the log made a record durable is reopened at once;
	// each later attempt that fails to open, or opens and fails again
	// before a record became durable, waits twice as long as the last, so
	// a storage that keeps failing (a full disk) is not reopened, and its
	// log replayed, again and again.
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	// OnFailure, if set, is called once when a host without Reopen stops
	// serving because its log failed. It must not block.
	OnFailure func(err error)
	// Clock drives the snapshot schedule and the reopen backoff (default:
	// the coordinator's clock, else clock.Real).
	Clock  clock.Clock
	Logger *slog.Logger
	// Observer, if set, is told of opens, snapshots and the close
	// (metrics).
	Observer Observer
	// Deliver, if set (cluster mode), has the tasks that this partition's
	// records created for other partitions created there: the host runs
	// the coordinator's RunDeliveries with it while it serves
	// (docs/design/workflows.md, "Cluster mode").
	Deliver coordinator.DeliverFunc
}

// Observer is told what a host did, for metrics. Calls may come
// concurrently, from one host or from several (cluster mode).
type Observer interface {
	// Opened: h serves (at Open, or again after a reopen); loading its
	// newest snapshot and replaying its log took took.
	Opened(h *Host, took time.Duration)
	// Snapshotted: h wrote a snapshot at at, which took took.
	Snapshotted(h *Host, took time.Duration, at time.Time)
	// Purged: h applied the retention period, alone or before a
	// snapshot (also when it failed part way: res says what it did).
	Purged(h *Host, res coordinator.PurgeResult)
	// Closed: h stopped serving for good (Close).
	Closed(h *Host)
}

func (c *Config) withDefaults() error {
	if c.Open == nil {
		return errors.New("host: Config.Open is nil")
	}
	c.Name = cmp.Or(c.Name, "the partition")
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.Coordinator.Logger = cmp.Or(c.Coordinator.Logger, c.Logger)
	c.Clock = cmp.Or(c.Clock, c.Coordinator.Clock, clock.Real)
	c.Coordinator.Clock = cmp.Or(c.Coordinator.Clock, c.Clock)
	if c.RestartBackoff < 0 || c.MaxRestartBackoff < 0 {
		return fmt.Errorf("host: RestartBackoff %v and MaxRestartBackoff %v must not be negative", c.RestartBackoff, c.MaxRestartBackoff)
	}
	c.RestartBackoff = cmp.Or(c.RestartBackoff, DefaultRestartBackoff)
	c.MaxRestartBackoff = cmp.Or(c.MaxRestartBackoff, max(DefaultMaxRestartBackoff, c.RestartBackoff))
	if c.MaxRestartBackoff < c.RestartBackoff {
		return fmt.Errorf("host: MaxRestartBackoff %v is below RestartBackoff %v", c.MaxRestartBackoff, c.RestartBackoff)
	}
	return c.Schedule.withDefaults()
}

// Defaults of Config.
const (
	DefaultRestartBackoff    = time.Second
	DefaultMaxRestartBackoff = 15 * time.Second
)

// durableLog is the optional capability of a Log to tell how far it is
// durable (the file WAL): the host tells a log that failed after doing
// work from one that failed again at once.
type durableLog interface{ DurableLSN() uint64 }

// Host serves one partition. It is safe for concurrent use.
type Host struct {
	cfg Config
	lg  *slog.Logger

	mu        sync.RWMutex
	st        Storage // zero while reopening after the failed one was closed
	c         *coordinator.Coordinator
	reopening bool
	stopped   bool  // the log failed and the host does not reopen
	cause     error // why it reopens or stopped
	closed    bool
	// openedAt is the log's durable LSN once the serving coordinator
	// opened; failures counts the failures and failed reopens since a
	// record last became durable after an open (see RestartBackoff).
	openedAt uint64
	failures int

	// snapMu runs one snapshot or purge at a time. lastSnap is the LSN of
	// the newest snapshot, lastSnapAt when the schedule last started or
	// tried one and lastSnapTook how long the last taken one took,
	// lastPurgeAt when a purge (alone or a snapshot's) last started.
	snapMu       sync.Mutex
	lastSnap     uint64
	lastSnapAt   time.Time
	lastSnapTook time.Duration
	lastPurgeAt  time.Time

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Open opens the storage, recovers the coordinator (newest usable
// snapshot, then the log after it) and starts serving: the expiry loop
// and, unless disabled, the snapshot schedule.
func Open(ctx context.Context, cfg Config) (*Host, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, lg: cfg.Logger}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	if err := h.open(ctx); err != nil {
		h.cancel()
		return nil, err
	}
	if !cfg.Schedule.Disabled {
		h.wg.Go(h.snapshotLoop)
	}
	return h, nil
}

func (h *Host) open(ctx context.Context) error {
	start := h.cfg.Clock.Now()
	st, err := h.cfg.Open(ctx)
	if err != nil {
		return err
	}
	c, err := coordinator.Recover(ctx, st.Log, st.Snapshots, h.cfg.Coordinator)
	if err != nil {
		st.Log.Close()
		return err
	}
	// A loss of records is accepted once, at the start it was meant for: a
	// reopen after a storage failure must not accept another.
	h.cfg.Coordinator.AcceptLostRecords = coordinator.LSNRange{}
	lsns, err := st.Snapshots.List()
	if err != nil {
		c.Close()
		st.Log.Close()
		return fmt.Errorf("host: listing the snapshots of %s: %w", h.cfg.Name, err)
	}
	h.snapMu.Lock()
	h.lastSnap, h.lastSnapAt, h.lastPurgeAt = 0, h.cfg.Clock.Now(), h.cfg.Clock.Now()
	if len(lsns) > 0 {
		h.lastSnap = lsns[len(lsns)-1]
	}
	h.snapMu.Unlock()
	h.mu.Lock()
	h.st, h.c = st, c
	if d, ok := st.Log.(durableLog); ok {
		h.openedAt = d.DurableLSN()
	}
	h.mu.Unlock()
	if h.cfg.Observer != nil {
		h.cfg.Observer.Opened(h, h.cfg.Clock.Now().Sub(start))
	}
	h.wg.Go(func() {
		if err := c.Run(h.ctx); err != nil && h.ctx.Err() == nil {
			h.failed(c)
		}
	})
	if h.cfg.Deliver != nil {
		// It ends with the coordinator (its error is Run's to handle).
		h.wg.Go(func() { _ = c.RunDeliveries(h.ctx, h.cfg.Deliver) })
	}
	return nil
}

// current returns the serving coordinator and its storage, or an
// unavailable error while the host does not serve.
func (h *Host) current() (*coordinator.Coordinator, Storage, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	switch {
	case h.closed:
		return nil, Storage{}, fmt.Errorf("%w: %s is shutting down", coordinator.ErrUnavailable, h.cfg.Name)
	case h.reopening:
		return nil, Storage{}, fmt.Errorf("%w: %s is reopening its log after a storage failure (%v); retry shortly", coordinator.ErrUnavailable, h.cfg.Name, h.cause)
	case h.stopped:
		return nil, Storage{}, h.cause
	}
	return h.c, h.st, nil
}

// Coordinator returns the serving coordinator, or an unavailable error
// while the host does not serve.
func (h *Host) Coordinator() (*coordinator.Coordinator, error) {
	c, _, err := h.current()
	return c, err
}

// Storage returns the storage the host serves from (zero while it does
// not serve).
func (h *Host) Storage() Storage {
	_, st, _ := h.current()
	return st
}

// Err is non-nil while the host does not serve.
func (h *Host) Err() error {
	_, _, err := h.current()
	return err
}

// Do runs fn on the serving coordinator. If fn found the coordinator
// stopped by a failure of its log, the host recovers at once (see
// Config.Reopen).
func (h *Host) Do(fn func(*coordinator.Coordinator) error) error {
	c, _, err := h.current()
	if err != nil {
		return err
	}
	err = fn(c)
	if err != nil && errors.Is(err, coordinator.ErrUnavailable) && c.Err() != nil {
		h.failed(c)
	}
	return err
}

// failed handles the failure of c, once: reopen, or stop and tell the
// owner.
func (h *Host) failed(c *coordinator.Coordinator) {
	h.mu.Lock()
	if h.closed || h.reopening || h.stopped || h.c != c {
		h.mu.Unlock()
		return
	}
	h.cause = c.Err()
	if !h.cfg.Reopen {
		h.stopped = true
		h.mu.Unlock()
		h.lg.Error("stopped serving: the log failed", "partition", h.cfg.Name, "err", h.cause)
		if h.cfg.OnFailure != nil {
			h.cfg.OnFailure(h.cause)
		}
		return
	}
	h.reopening = true
	st := h.st
	// Let go of the failed state now: the reopen builds a new one, and the
	// two need not be in memory at once.
	h.st, h.c = Storage{}, nil
	if d, ok := st.Log.(durableLog); !ok || d.DurableLSN() == h.openedAt {
		h.failures++ // failed again before anything became durable
	} else {
		h.failures = 1
	}
	failures := h.failures
	h.mu.Unlock()
	h.lg.Error("storage failure: reopening the log from what is durable, by itself (no restart needed)", "partition", h.cfg.Name, "err", h.cause)
	h.wg.Go(func() {
		c.Close()
		st.Log.Close() // the log already failed; Close only releases it
		c, st = nil, Storage{}
		for attempt := failures; h.ctx.Err() == nil; attempt++ {
			if attempt > 1 {
				wait := h.restartWait(attempt)
				h.lg.Warn("reopening the log after a wait: it failed again before anything became durable", "partition", h.cfg.Name, "in", wait)
				if clock.Sleep(h.ctx, h.cfg.Clock, wait) != nil {
					return
				}
			}
			// The failed state, as large as the live heap was, is garbage
			// once the requests that met the failure have returned: collect
			// it and give its memory back before a replay builds the next,
			// rather than let the heap grow to hold both. Attempts are
			// rare and spaced; a collection is cheap next to a replay.
			debug.FreeOSMemory()
			err := h.open(h.ctx)
			h.mu.Lock()
			h.failures = attempt
			if err == nil {
				h.reopening = false
				h.mu.Unlock()
				h.lg.Info("serving again after reopening the log", "partition", h.cfg.Name)
				return
			}
			h.cause = err
			h.mu.Unlock()
			h.lg.Error("reopening the log failed; will retry", "partition", h.cfg.Name, "err", err)
		}
	})
}

// restartWait is the wait before the reopen attempt after failures
// failures (failed storage or failed reopens) with nothing made durable
// in between: none after the first, then RestartBackoff, doubling up to
// MaxRestartBackoff.
func (h *Host) restartWait(failures int) time.Duration {
	if failures <= 1 {
		return 0
	}
	d := h.cfg.RestartBackoff
	for i := 2; i < failures && d < h.cfg.MaxRestartBackoff; i++ {
		d *= 2
	}
	return min(d, h.cfg.MaxRestartBackoff)
}

// Snapshot applies the retention period and takes a snapshot now, then
// deletes the log records below the oldest kept snapshot.
func (h *Host) Snapshot(ctx context.Context) (coordinator.SnapshotResult, error) {
	h.snapMu.Lock()
	defer h.snapMu.Unlock()
	return h.snapshotLocked(ctx)
}

// snapshotLocked takes a snapshot; h.snapMu is held.
func (h *Host) snapshotLocked(ctx context.Context) (coordinator.SnapshotResult, error) {
	h.lastSnapAt = h.cfg.Clock.Now()
	h.lastPurgeAt = h.lastSnapAt
	c, st, err := h.current()
	if err != nil {
		return coordinator.SnapshotResult{}, err
	}
	var res coordinator.SnapshotResult
	err = h.Do(func(cur *coordinator.Coordinator) error {
		if cur != c {
			return fmt.Errorf("%w: %s reopened during the snapshot; retry", coordinator.ErrUnavailable, h.cfg.Name)
		}
		var err error
		res, err = c.Snapshot(ctx, coordinator.SnapshotConfig{Store: st.Snapshots, Retention: h.cfg.Schedule.Retention, Keep: h.cfg.Schedule.Keep})
		return err
	})
	if h.cfg.Observer != nil && res.Purge.Took > 0 {
		h.cfg.Observer.Purged(h, res.Purge)
	}
	if res.Path != "" {
		h.lastSnap, h.lastSnapTook = res.LSN, res.Took
		if h.cfg.Observer != nil {
			h.cfg.Observer.Snapshotted(h, res.Took, h.cfg.Clock.Now())
		}
	}
	return res, err
}

// purgeLocked applies the retention period now (coordinator.Purge),
// without a snapshot; h.snapMu is held.
func (h *Host) purgeLocked(ctx context.Context) (coordinator.PurgeResult, error) {
	h.lastPurgeAt = h.cfg.Clock.Now()
	var res coordinator.PurgeResult
	err := h.Do(func(c *coordinator.Coordinator) error {
		var err error
		res, err = c.Purge(ctx, h.cfg.Schedule.Retention)
		return err
	})
	if h.cfg.Observer != nil && (err == nil || res.Records > 0) {
		h.cfg.Observer.Purged(h, res)
	}
	if res.Records > 0 {
		h.lg.Debug("retention purge", "partition", h.cfg.Name, "purged", res.Purged, "records", res.Records,
			"max_pause", res.MaxPause, "took", res.Took)
	}
	return res, err
}

// snapshotLoop takes snapshots, and purges between them, on the schedule
// until the host closes. A failed snapshot is logged and tried again after
// another period (or another Schedule.EveryRecords records), not at every
// check; a failed purge after another PurgeEvery.
func (h *Host) snapshotLoop() {
	sched := h.cfg.Schedule
	for clock.Sleep(h.ctx, h.cfg.Clock, sched.CheckInterval) == nil {
		_, st, err := h.current()
		if err != nil {
			continue
		}
		last := st.Log.LastLSN()
		h.snapMu.Lock()
		now := h.cfg.Clock.Now()
		switch {
		case sched.due(last, h.lastSnap, h.lastSnapAt, h.lastSnapTook, now):
			if _, err := h.snapshotLocked(h.ctx); err != nil && h.ctx.Err() == nil {
				h.lg.Error("background snapshot failed; will try again", "partition", h.cfg.Name, "err", err, "in", sched.Every)
				h.lastSnap = last
			}
		case now.Sub(h.lastPurgeAt) >= sched.PurgeEvery:
			if _, err := h.purgeLocked(h.ctx); err != nil && h.ctx.Err() == nil {
				h.lg.Error("retention purge failed; will try again", "partition", h.cfg.Name, "err", err, "in", sched.PurgeEvery)
			}
		}
		h.snapMu.Unlock()
	}
}

// Close stops the loops, closes the coordinator and then the log (which
// makes durable whatever was appended).
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	c, st := h.c, h.st
	h.mu.Unlock()
	if c != nil {
		c.Close()
	}
	if h.cfg.Observer != nil {
		h.cfg.Observer.Closed(h)
	}
	if st.Log == nil {
		return nil // the failed log was closed by the reopen
	}
	return st.Log.Close()
}
