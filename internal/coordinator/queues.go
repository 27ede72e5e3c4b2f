package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// QueueError is a refusal about a queue: errors.Is matches its Kind
// (ErrNotFound).
type QueueError struct {
	Kind      error
	Namespace string
	Queue     string
	msg       string
}

func (e *QueueError) Error() string { return e.msg }

func (e *QueueError) Unwrap() error { return e.Kind }

// QueueNotFound refuses an action on a queue that no partition knows.
func QueueNotFound(namespace, queue string) error {
	return &QueueError{Kind: ErrNotFound, Namespace: namespace, Queue: queue,
		msg: fmt.Sprintf("queue not found: namespace %q has no queue %q (no task, not paused); check the name: `tenure queues` lists them", namespace, queue)}
}

// Queues returns the statistics of the queues of namespace ("" for every
// namespace), or of the one queue named (with its namespace), as of now. It
// reads counters kept as records are applied: O(queues), whatever the
// number of tasks.
func (c *Coordinator) Queues(ctx context.Context, namespace, queue string) ([]state.QueueStats, error) {
	if err := c.checkID("namespace", namespace, false); err != nil {
		return nil, err
	}
	if err := c.checkID("queue", queue, false); err != nil {
		return nil, err
	}
	var out []state.QueueStats
	err := c.read(ctx, func() error {
		now := c.now()
		if queue != "" {
			if q, ok := c.st.Queue(state.QueueKey{Namespace: namespace, Queue: queue}, now); ok {
				out = append(out, q)
			}
			return nil
		}
		for _, q := range c.st.Queues(now) {
			if namespace == "" || q.Key.Namespace == namespace {
				out = append(out, q)
			}
		}
		return nil
	})
	return out, err
}

// MaxTopKeys bounds the keys TopKeys lists.
const MaxTopKeys = 100

// TopKeys returns up to n keys of a queue with the most waiting tasks,
// then the most leased, with what holds each back (docs/design/keys.md,
// "Seeing it"). It is O(keys of the queue).
func (c *Coordinator) TopKeys(ctx context.Context, namespace, queue string, n int) ([]state.KeyStats, error) {
	if err := c.checkID("namespace", namespace, true); err != nil {
		return nil, err
	}
	if err := c.checkID("queue", queue, true); err != nil {
		return nil, err
	}
	if n < 0 || n > MaxTopKeys {
		return nil, fieldErr("top_keys", "%d is outside 0..%d", n, MaxTopKeys)
	}
	var out []state.KeyStats
	err := c.read(ctx, func() error {
		out = c.st.TopKeys(state.QueueKey{Namespace: namespace, Queue: queue}, c.now(), n)
		return nil
	})
	return out, err
}

// PauseRequest pauses or resumes a queue.
type PauseRequest struct {
	Namespace string // default "default"
	Queue     string
	Actor
	// MustExist refuses a queue this partition does not know with
	// QueueNotFound. Cluster mode checks that some partition knows the
	// queue, then pauses it in every partition it may use.
	MustExist bool
}

// QueuePause returns how a queue is paused, or nil if it is not (a queue
// it does not know is not paused).
func (c *Coordinator) QueuePause(ctx context.Context, namespace, queue string) (*state.Pause, error) {
	var p *state.Pause
	err := c.read(ctx, func() error {
		p = c.st.Paused(state.QueueKey{Namespace: namespace, Queue: queue})
		return nil
	})
	return p, err
}

// Pause pauses a queue (one QueuePaused record): it leases nothing more
// but finalisations of COMMITTED tasks, until Resume. It reports whether
// the queue was running (false: it was paused already, and nothing was
// written).
func (c *Coordinator) Pause(ctx context.Context, req PauseRequest) (changed bool, err error) {
	return c.setPaused(ctx, req, true)
}

// Resume resumes a paused queue (one QueueResumed record). It reports
// whether the queue was paused (false: it was running, and nothing was
// written).
func (c *Coordinator) Resume(ctx context.Context, req PauseRequest) (changed bool, err error) {
	return c.setPaused(ctx, req, false)
}

// checkQueueAction fills in the default namespace of an operator's action
// on a queue and checks its names and actor.
func (c *Coordinator) checkQueueAction(namespace *string, queue string, a Actor) error {
	if *namespace == "" {
		*namespace = DefaultNamespace
	}
	if err := c.cfg.Limits.checkNames(*namespace, queue, ""); err != nil {
		return err
	}
	return c.cfg.Limits.checkActor(a)
}

func (c *Coordinator) setPaused(ctx context.Context, req PauseRequest, pause bool) (bool, error) {
	if err := c.checkQueueAction(&req.Namespace, req.Queue, req.Actor); err != nil {
		return false, err
	}
	if err := c.lock(); err != nil {
		return false, err
	}
	k := state.QueueKey{Namespace: req.Namespace, Queue: req.Queue}
	_, known := c.st.Queue(k, 0)
	if req.MustExist && !known {
		if err := c.writeAndWait(ctx); err != nil {
			return false, err
		}
		return false, QueueNotFound(req.Namespace, req.Queue)
	}
	if (c.st.Paused(k) != nil) == pause {
		return false, c.writeAndWait(ctx) // as it is: answer once that is durable
	}
	var r state.Record = &state.QueueResumed{Namespace: req.Namespace, Queue: req.Queue, By: req.By, Reason: req.Reason, At: c.now()}
	if pause {
		r = &state.QueuePaused{Namespace: req.Namespace, Queue: req.Queue, By: req.By, Reason: req.Reason, At: c.now()}
	}
	return true, c.writeAndWait(ctx, r)
}

// BulkAction is what a bulk request does to each task it selects.
type BulkAction uint8

const (
	// BulkRetry retries FAILED and DEAD tasks (TaskRetried each), except
	// those an attempt committed.
	BulkRetry BulkAction = iota + 1
	// BulkKill kills unfinished tasks (TaskDead each).
	BulkKill
	// BulkPurge deletes finished tasks now (TasksDeleted, up to
	// state.MaxDeletedPerRecord per record).
	BulkPurge
)

func (a BulkAction) String() string {
	switch a {
	case BulkRetry:
		return "retry"
	case BulkKill:
		return "kill"
	case BulkPurge:
		return "purge"
	}
	return fmt.Sprintf("BulkAction(%d)", uint8(a))
}

// BulkFilter selects the tasks of a bulk action. Every field set must
// match; a filter with none set is refused unless All is set.
type BulkFilter struct {
	Namespace     string
	Queue         string
	State         state.TaskState // 0: every state the action applies to
	CreatedBefore time.Time       // zero: any
	// All confirms that a filter with no other field set means every task.
	All bool
}

// BulkRequest asks for one action on every task a filter selects.
type BulkRequest struct {
	Action BulkAction
	Filter BulkFilter
	Actor
}

// BulkResult counts what a bulk action did.
type BulkResult struct {
	// Changed is the number of tasks the action changed.
	Changed int
	// Skipped is the number of tasks the filter selected that the action
	// does not apply to (a COMPLETED task for retry, say).
	Skipped int
}

// bulkTurn bounds the work of one turn of a bulk action under the mutex:
// the tasks it examines and the records it appends (in one group commit).
// Between turns other requests run, so a million-task action never holds
// the partition for long.
const (
	bulkScanPerTurn    = 20_000
	bulkRecordsPerTurn = 1000
)

// Bulk applies an action to every task the filter selects, in creation
// order, a bounded number per turn. Tasks created after it started are
// not selected. If it fails part way, what it did so far stays done (each
// record is an action on its own): the error says so, and running it again
// continues.
func (c *Coordinator) Bulk(ctx context.Context, req BulkRequest) (BulkResult, error) {
	var res BulkResult
	f := req.Filter
	if err := c.checkBulk(req); err != nil {
		return res, err
	}
	applies := bulkApplies(req.Action)
	if req.Action == BulkPurge {
		// A task whose request id a row of an outbox holds stays until the
		// relay releases it, as at retention (docs/design/outbox.md).
		finished := applies
		applies = func(t *state.Task) bool { return finished(t) && !c.st.Held(t.Namespace, t.RequestID) }
	}
	var before state.Time // 0: any
	if !f.CreatedBefore.IsZero() {
		before = state.TimeOf(f.CreatedBefore)
	}
	after, end := uint64(0), uint64(0)
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := c.lock(); err != nil {
			return res, err
		}
		if end == 0 {
			end = c.st.LastLSN() // tasks created later are not selected
		}
		now := c.now()
		var recs []state.Record
		var purge *state.TasksDeleted
		scanned, done := 0, true
		c.st.Scan(after, func(t *state.Task) bool {
			if t.CreatedLSN > end {
				return false
			}
			if scanned == bulkScanPerTurn || len(recs) == bulkRecordsPerTurn {
				done = false
				return false
			}
			scanned++
			after = t.CreatedLSN
			if (f.Namespace != "" && t.Namespace != f.Namespace) || (f.Queue != "" && t.Queue != f.Queue) ||
				(f.State != 0 && t.State != f.State) || (before != 0 && t.CreatedAt >= before) {
				return true
			}
			if !applies(t) {
				res.Skipped++
				return true
			}
			switch req.Action {
			case BulkRetry:
				recs = append(recs, &state.TaskRetried{TaskID: t.ID, By: req.By, Reason: req.Reason, At: now})
			case BulkKill:
				recs = append(recs, &state.TaskDead{TaskID: t.ID, By: req.By, Reason: req.Reason, At: now})
			case BulkPurge:
				if purge == nil || len(purge.TaskIDs) == state.MaxDeletedPerRecord {
					purge = &state.TasksDeleted{By: req.By, Reason: req.Reason, At: now}
					recs = append(recs, purge)
				}
				purge.TaskIDs = append(purge.TaskIDs, t.ID)
			}
			res.Changed++
			return true
		})
		if err := c.writeAndWait(ctx, recs...); err != nil {
			if res.Changed > len(recs) || req.Action == BulkPurge && res.Changed > 0 {
				return res, fmt.Errorf("%w (after the action was applied to some tasks: run it again to continue)", err)
			}
			return res, err
		}
		if done {
			return res, nil
		}
	}
}

// checkBulk checks a bulk request's action and filter.
func (c *Coordinator) checkBulk(req BulkRequest) error {
	return c.cfg.Limits.checkBulk(req)
}

// CheckBulk checks a bulk request as Bulk would, under these limits (zero
// fields: the defaults).
func (l Limits) CheckBulk(req BulkRequest) error {
	return l.withDefaults().checkBulk(req)
}

func (l Limits) checkBulk(req BulkRequest) error {
	f := req.Filter
	switch req.Action {
	case BulkRetry, BulkKill, BulkPurge:
	default:
		return fieldErr("action", "unknown bulk action %d", req.Action)
	}
	if err := l.checkID("filter.namespace", f.Namespace, false); err != nil {
		return err
	}
	if err := l.checkID("filter.queue", f.Queue, false); err != nil {
		return err
	}
	if err := l.checkActor(req.Actor); err != nil {
		return err
	}
	if f.State > state.Dead {
		return fieldErr("filter.state", "unknown task state %d", f.State)
	}
	if f.State != 0 {
		probe := &state.Task{State: f.State, Progress: &state.Progress{}}
		if !bulkApplies(req.Action)(probe) {
			return fieldErr("filter.state", "%s never applies to a %s task (%s)", req.Action, f.State, bulkScope(req.Action))
		}
	}
	none := f.Namespace == "" && f.Queue == "" && f.State == 0 && f.CreatedBefore.IsZero()
	if none && !f.All {
		return fieldErr("filter", "no filter given: name a namespace, queue, state or created-before, or say all (--all) to %s every task it applies to (%s)", req.Action, bulkScope(req.Action))
	}
	if !none && f.All {
		return fieldErr("filter", "all (--all) means every task: give it without other filters, or drop it")
	}
	return nil
}

// bulkApplies returns whether the action applies to a task.
func bulkApplies(a BulkAction) func(*state.Task) bool {
	switch a {
	case BulkRetry:
		return func(t *state.Task) bool {
			return (t.State == state.Failed || t.State == state.Dead) && t.CommittedBy == ""
		}
	case BulkKill:
		return func(t *state.Task) bool { return !t.State.Terminal() }
	default:
		return func(t *state.Task) bool { return t.State.Terminal() }
	}
}

func bulkScope(a BulkAction) string {
	switch a {
	case BulkRetry:
		return "FAILED and DEAD tasks that no attempt committed"
	case BulkKill:
		return "tasks not yet finished"
	default:
		return "finished tasks: COMPLETED, FAILED, DEAD"
	}
}
