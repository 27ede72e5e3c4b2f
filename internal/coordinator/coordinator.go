package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/tenurehq/tenure/internal/principal"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// Log is the durable, ordered record store of one partition: the embedded
// file WAL or, in cluster mode, a table. The coordinator owns it while open.
type Log interface {
	// Append gives entries the next dense LSNs, in order, and returns the
	// last one. It need not wait for durability.
	Append(entries []wal.Entry) (lastLSN uint64, err error)
	// Wait returns once every LSN up to lsn is durable, or with the error
	// that made the log fail.
	Wait(ctx context.Context, lsn uint64) error
	// Replay calls fn for every durable record from LSN from on, in order.
	// fn must not keep e.Payload.
	Replay(from uint64, fn func(lsn uint64, e wal.Entry) error) error
	// LastLSN is the last LSN handed out (0 for an empty log).
	LastLSN() uint64
}

// Coordinator serialises every decision about one partition's tasks:
// request → validate → choose records → append → apply → respond. One mutex
// covers choose, append and apply, so decisions see every earlier record;
// responses wait for durability outside the mutex, which lets concurrent
// requests share one write and one fsync (group commit).
//
// A record is applied to memory as soon as it is appended, before it is
// durable. Nothing observes it early: every response, reads included,
// waits until the log is durable up to the state it saw. If the log fails,
// the coordinator stops serving, because memory may now be ahead of disk;
// it must be reopened from the log.
type Coordinator struct {
	cfg Config
	log Log
	lg  *slog.Logger

	mu      sync.Mutex
	st      *state.State
	failed  error // sticky; set once the log or an apply failed, or on Close
	signals map[state.QueueKey]chan struct{}
	workers *registry
	// compactor deletes log records that a snapshot replaced (nil if the
	// log cannot); snapMu runs one snapshot at a time.
	compactor Compactor
	snapMu    sync.Mutex
	encBuf    []byte
	entries   []wal.Entry
	enc       record.Encoder // encodes the records of write (under mu)
	// granted and completed hold the LeaseGranted records of a Lease and
	// the TaskCompleted records of a CompleteBatch (under mu).
	granted   []state.LeaseGranted
	completed []state.TaskCompleted
	// pending is CompleteBatch's set of the tasks of its unwritten
	// records (under mu).
	pending map[string]struct{}
	// submitScratch is submitBatch's working memory (under mu).
	submitScratch struct {
		dup     []bool
		newAt   []int
		firstOf map[[2]string]int
		ids     map[string]struct{} // the new tasks' ids
		created []state.TaskCreated // the batch's records
	}
	// onApply, when set (by tests), runs after every applied record.
	onApply func(*state.State)
	// crons caches the parsed expression of each schedule; wake tells Run
	// that a held tick may fire (a task finished).
	crons map[state.ScheduleKey]cronEntry
	wake  chan struct{}
	// delivering tells RunDeliveries that a record kept deliveries.
	delivering chan struct{}
	// ids is the randomness of new task and lease ids (under mu).
	ids *idRand
	// reported is the state's HeldBytes as last added to Config.Memory
	// (under mu; memory.go).
	reported int64
	// waits holds the channel each waited task's end closes, and wfWaits
	// the one each waited workflow's end closes (wait.go; under mu).
	waits   map[string]chan struct{}
	wfWaits map[state.WorkflowKey]chan struct{}
}

// Open replays log into a fresh state, then expires every lease already
// past due (time only revokes: docs/design/state-machine.md), and returns a coordinator ready to serve. A log
// whose first records were deleted (replaced by snapshots) needs Recover.
func Open(ctx context.Context, log Log, cfg Config) (*Coordinator, error) {
	return OpenFrom(ctx, log, state.New(), cfg)
}

// OpenFrom is Open starting from st, a state at LSN st.LastLSN() (loaded
// from a snapshot): it replays only the records after it. The coordinator
// takes ownership of st.
func OpenFrom(ctx context.Context, log Log, st *state.State, cfg Config) (*Coordinator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Coordinator{
		cfg:        cfg,
		log:        tailLog{log},
		lg:         cfg.Logger,
		st:         st,
		signals:    make(map[state.QueueKey]chan struct{}),
		workers:    newRegistry(),
		crons:      make(map[state.ScheduleKey]cronEntry),
		wake:       make(chan struct{}, 1),
		delivering: make(chan struct{}, 1),
		ids:        newIDRand(cfg.Rand),
	}
	c.compactor, _ = log.(Compactor)
	start := c.cfg.Clock.Now()
	from := st.LastLSN() + 1
	if err := Replay(log, c.st, from); err != nil {
		if errors.Is(err, wal.ErrCompacted) {
			return nil, fmt.Errorf("coordinator: the state starts at lsn %d but the log no longer holds the records after it "+
				"(they were replaced by snapshots; start from the newest snapshot): %w", st.LastLSN(), err)
		}
		return nil, err
	}
	if got, want := c.st.LastLSN(), log.LastLSN(); got != want {
		return nil, fmt.Errorf("coordinator: replay ended at lsn %d but the log's last lsn is %d", got, want)
	}
	c.lg.Info("replayed log", "from_lsn", from, "records", c.st.LastLSN()+1-from, "last_lsn", c.st.LastLSN(),
		"tasks", c.st.Len(), "held_bytes", c.st.HeldBytes(), "took", c.cfg.Clock.Now().Sub(start))
	c.reportLocked() // nothing else holds c yet
	if f := cfg.Fence; f != nil {
		if err := c.fence(ctx, f); err != nil {
			c.Close() // gives back what it reported to Config.Memory
			return nil, err
		}
	}
	if _, err := c.ExpireDue(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("coordinator: expiring leases after replay: %w", err)
	}
	return c, nil
}

// fence appends and waits for the Fence record of f, before anything else
// is written after replay.
func (c *Coordinator) fence(ctx context.Context, f *Fence) error {
	if err := c.lock(); err != nil {
		return err
	}
	if f.Epoch < c.st.Epoch() {
		c.mu.Unlock()
		return fmt.Errorf("%w: the log is fenced at epoch %d, above this owner's epoch %d", ErrUnavailable, c.st.Epoch(), f.Epoch)
	}
	last, err := c.write(&state.Fence{Epoch: f.Epoch, NodeID: f.NodeID, At: state.TimeOf(c.cfg.Clock.Now())})
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("coordinator: appending the fence of epoch %d: %w", f.Epoch, err)
	}
	if err := c.wait(ctx, last); err != nil {
		return fmt.Errorf("coordinator: appending the fence of epoch %d: %w", f.Epoch, err)
	}
	return nil
}

// Replay applies every record of log from LSN from on to st. A record that
// does not decode or does not apply means the log is corrupt or foreign:
// the error names its LSN.
func Replay(log Log, st *state.State, from uint64) error {
	return log.Replay(from, func(lsn uint64, e wal.Entry) error {
		r, err := record.Decode(record.Type(e.Type), e.Payload)
		if err != nil {
			return fmt.Errorf("coordinator: replay: record at lsn %d: %w", lsn, err)
		}
		if err := st.Apply(lsn, r); err != nil {
			return fmt.Errorf("coordinator: replay refused (corrupt or foreign log): %w", err)
		}
		return nil
	})
}

// Close stops serving. It does not close the log, which belongs to the
// caller; the caller closes it after Close returns.
func (c *Coordinator) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = fmt.Errorf("%w: coordinator closed", ErrUnavailable)
	}
	c.releaseLocked()
	for k, ch := range c.signals {
		close(ch)
		delete(c.signals, k)
	}
	c.stopWaiters()
	// Run returns at once rather than at its next timer, and lets go of
	// the state.
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case c.delivering <- struct{}{}:
	default:
	}
	return nil
}

// Err is the error that stopped the coordinator, or nil while it serves.
func (c *Coordinator) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// lock takes the mutex unless the coordinator has stopped serving.
func (c *Coordinator) lock() error {
	c.mu.Lock()
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		return err
	}
	return nil
}

// write appends recs and applies them to the state; c.mu must be held. The
// records are not durable yet: the caller waits (with wait) before it
// answers anyone.
func (c *Coordinator) write(recs ...state.Record) (uint64, error) {
	if len(recs) == 0 {
		return c.st.LastLSN(), nil
	}
	buf, entries := c.encBuf[:0], c.entries[:0]
	offsets := make([]int, 0, len(recs)+1)
	for _, r := range recs {
		offsets = append(offsets, len(buf))
		typ, out, err := c.enc.Encode(buf, r)
		if err != nil {
			// Inputs are validated before they reach a record: a record
			// that does not encode is a bug, and nothing was written.
			return 0, fmt.Errorf("coordinator: encoding %T: %w", r, err)
		}
		buf = out
		entries = append(entries, wal.Entry{Type: uint16(typ)})
	}
	offsets = append(offsets, len(buf))
	for i := range entries {
		entries[i].Payload = buf[offsets[i]:offsets[i+1]]
	}
	last, err := c.log.Append(entries)
	c.encBuf, c.entries = buf, entries
	if err != nil {
		return 0, c.failLocked(fmt.Errorf("appending to the log: %w", err))
	}
	first := last - uint64(len(recs)) + 1
	if first != c.st.LastLSN()+1 {
		return 0, c.failLocked(fmt.Errorf("log assigned lsn %d, the state expects %d", first, c.st.LastLSN()+1))
	}
	for i, r := range recs {
		if err := c.st.Apply(first+uint64(i), r); err != nil {
			return 0, c.failLocked(fmt.Errorf("applying a validated record: %w", err))
		}
		c.afterApply(r)
		if c.onApply != nil {
			c.onApply(c.st)
		}
	}
	c.reportLocked()
	return last, nil
}

// afterApply tells the observer, updates soft state and wakes long-polls
// after a record.
func (c *Coordinator) afterApply(r state.Record) {
	c.wakeWaiters()
	for _, t := range c.st.Released() {
		c.signal(state.QueueKey{Namespace: t.Namespace, Queue: t.Queue})
	}
	switch r := r.(type) {
	case *state.TasksSubmitted:
		c.created(r.Tasks)
		c.delivered(r.Deliver)
		return
	case *state.TaskCommitted:
		c.created(r.Spawn)
		c.delivered(r.Deliver)
	case *state.TaskCompleted:
		c.created(r.Spawn)
		c.delivered(r.Deliver)
	case *state.TasksDelivered:
		// A workflow waited for may be final now that none of its tasks
		// is being delivered: its waiters look again.
		for k, ch := range c.wfWaits {
			close(ch)
			delete(c.wfWaits, k)
		}
	case *state.QueueResumed:
		c.signal(state.QueueKey{Namespace: r.Namespace, Queue: r.Queue})
		return
	case *state.QueueLimited:
		c.signal(state.QueueKey{Namespace: r.Namespace, Queue: r.Queue})
		return
	}
	t := c.st.Task(r.Task())
	if c.cfg.Observer != nil {
		c.cfg.Observer.Applied(r, t)
	}
	if t == nil {
		return
	}
	if t.State.Terminal() && c.st.Watched(t.ID) {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	switch r := r.(type) {
	case *state.LeaseGranted:
		c.workers.leased(r.WorkerID)
	case *state.TaskCompleted, *state.TaskFailed, *state.TaskSnoozed, *state.LeaseExpired, *state.TaskDead, *state.TaskDeadlineExceeded:
		if n := len(t.Executions); n > 0 && t.CurrentLease() == nil {
			c.workers.released(t.Executions[n-1].WorkerID)
			// The end of a lease frees a slot of a queue with a max
			// concurrency, or of a key (an ordered key's next task):
			// its long-polls may lease now.
			if l, ok := c.st.Limits(state.QueueKey{Namespace: t.Namespace, Queue: t.Queue}); ok && (l.MaxConcurrency > 0 || l.Keys.MaxConcurrency > 0 || l.Keys.Ordered) {
				c.signal(state.QueueKey{Namespace: t.Namespace, Queue: t.Queue})
				return
			}
		}
	}
	if t.Schedulable() {
		c.signal(state.QueueKey{Namespace: t.Namespace, Queue: t.Queue})
	}
}

// created tells the observer of the tasks a record created beside its
// own (a workflow batch, a spawn), and wakes the long-polls of their
// queues.
func (c *Coordinator) created(rs []state.TaskCreated) {
	for i := range rs {
		t := c.st.Task(rs[i].TaskID)
		if t == nil {
			continue
		}
		if c.cfg.Observer != nil {
			c.cfg.Observer.Applied(&rs[i], t)
		}
		if t.State == state.Waiting {
			c.signal(state.QueueKey{Namespace: t.Namespace, Queue: t.Queue})
		}
	}
}

// signal wakes every long-poll waiting on q.
func (c *Coordinator) signal(q state.QueueKey) {
	if ch, ok := c.signals[q]; ok {
		close(ch)
		delete(c.signals, q)
	}
}

// signalFor returns the channel closed at the next signal of q.
// Signal returns a channel that is closed when a task of the queue may
// have become ready (or the coordinator stops): a router that long-polls
// several partitions at once waits on theirs.
func (c *Coordinator) Signal(namespace, queue string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return c.signalFor(state.QueueKey{Namespace: namespace, Queue: queue})
}

func (c *Coordinator) signalFor(q state.QueueKey) <-chan struct{} {
	ch, ok := c.signals[q]
	if !ok {
		ch = make(chan struct{})
		c.signals[q] = ch
	}
	return ch
}

// failLocked stops the coordinator for good; c.mu must be held.
func (c *Coordinator) failLocked(err error) error {
	if c.failed == nil {
		c.failed = fmt.Errorf("%w: %v; this partition stopped serving and must be reopened from its log", ErrUnavailable, err)
		c.lg.Error("coordinator stopped", "err", err)
		for k, ch := range c.signals {
			close(ch)
			delete(c.signals, k)
		}
		c.stopWaiters()
	}
	return c.failed
}

// wait blocks until lsn is durable. A log failure stops the coordinator.
func (c *Coordinator) wait(ctx context.Context, lsn uint64) error {
	err := c.log.Wait(ctx, lsn)
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failLocked(fmt.Errorf("waiting for the log: %w", err))
}

// writeAndWait is write followed, outside the mutex, by wait; c.mu must be
// held and is released.
func (c *Coordinator) writeAndWait(ctx context.Context, recs ...state.Record) error {
	attribute(ctx, recs)
	last, err := c.write(recs...)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.wait(ctx, last)
}

// now is the clock's time as a record timestamp.
func (c *Coordinator) now() state.Time { return state.TimeOf(c.cfg.Clock.Now()) }

// ExpireDue writes what time revokes now: TaskDeadlineExceeded for every
// task past its deadline, then LeaseExpired for every other lease past due
// (each up to MaxExpiriesPerScan), and returns how many records it wrote.
// A lease that ends at its task's deadline is not expired: the task fails.
func (c *Coordinator) ExpireDue(ctx context.Context) (int, error) {
	if err := c.lock(); err != nil {
		return 0, err
	}
	recs := c.revocationsLocked(c.now(), c.cfg.MaxExpiriesPerScan)
	return len(recs), c.writeAndWait(ctx, recs...)
}

// Run expires leases, fails tasks past their deadline and decides the
// ticks of schedules in the background until ctx ends: every
// ExpiryScanInterval, or sooner when the next lease, deadline or tick falls
// due or a held tick may fire.
func (c *Coordinator) Run(ctx context.Context) error {
	for {
		wait := c.cfg.ExpiryScanInterval
		c.mu.Lock()
		now := c.cfg.Clock.Now()
		if next, ok := c.st.NextExpiry(); ok {
			wait = min(wait, max(0, next.Std().Sub(now)))
		}
		if next, ok := c.st.NextDeadline(); ok {
			wait = min(wait, max(0, next.Std().Sub(now)))
		}
		if next, ok := c.st.NextTick(); ok {
			wait = min(wait, max(0, next.Std().Sub(now)))
		}
		c.mu.Unlock()
		t := c.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-c.wake:
			t.Stop()
		case <-t.C():
		}
		_, err := c.ExpireDue(ctx)
		for n := MaxDecisionsPerPass; err == nil && n == MaxDecisionsPerPass; {
			n, err = c.FireDue(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// Stats are counters for metrics and tests.
type Stats struct {
	LastLSN uint64
	Tasks   int
	ByState map[state.TaskState]int
	Workers int
	// HeldBytes is what the state holds in memory, as it accounts it
	// (state.State.HeldBytes).
	HeldBytes int64
}

// Stats returns a consistent view of the counters.
func (c *Coordinator) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{LastLSN: c.st.LastLSN(), Tasks: c.st.Len(), ByState: map[state.TaskState]int{}, Workers: c.workers.len(), HeldBytes: c.st.HeldBytes()}
	for ts := state.Waiting; ts < state.NumStates; ts++ {
		s.ByState[ts] = c.st.Count(ts)
	}
	return s
}

// Export returns the canonical copy of the state (for tests and tools).
func (c *Coordinator) Export() state.Export {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Export()
}

// CheckInvariants runs the state's invariant check (for tests and tools).
func (c *Coordinator) CheckInvariants() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Invariants()
}

// attribute records in recs who asked: the principal ctx carries (the
// token's name, with authentication on), through state.Attribute. Without
// a principal, records keep what they were given (requested_by).
func attribute(ctx context.Context, recs []state.Record) {
	state.Attribute(recs, principal.From(ctx))
}
