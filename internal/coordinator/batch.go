package coordinator

import (
	"context"

	"github.com/tenurehq/tenure/internal/state"
)

// CompleteItem is one completion of CompleteBatch: the arguments of
// Complete.
type CompleteItem struct {
	TaskID  string
	LeaseID string
	Result  []byte // the coordinator keeps it: do not modify after the call
	// Spawn describes the tasks the completion spawns (CompleteSpawn).
	Spawn []SubmitRequest
}

// CheckCompleteBatch returns the error CompleteBatch answers for a batch of
// n items as a whole under these limits (zero fields: the defaults), or nil.
func (l Limits) CheckCompleteBatch(n int) error {
	return l.withDefaults().checkCompleteBatch(n)
}

// checkCompleteBatch is CheckCompleteBatch for limits with their defaults
// filled in.
func (l Limits) checkCompleteBatch(n int) error {
	if n == 0 {
		return fieldErr("items", "at least one completion is required")
	}
	if n > l.MaxBatch {
		return fieldErr("items", "%d completions is over the limit of %d per batch; split the batch", n, l.MaxBatch)
	}
	return nil
}

// CompleteBatch completes several tasks under one acquisition of the mutex,
// with one append and one wait for durability: the records of a whole batch
// share a write and an fsync. Each item is decided exactly as Complete
// decides it, and errs[i] is item i's own answer (nil: completed, durable
// when CompleteBatch returns). Items that name the same task take effect in
// order, as if they had come one after another.
//
// The call itself fails, with no per-item answers, only when the batch is
// empty or over Limits.MaxBatch, or when the coordinator cannot answer
// (closed, the log failed, ctx ended while waiting for durability). A
// retry of the whole call is then safe: a completion by the lease that
// already completed the task is answered nil again, without a new record.
func (c *Coordinator) CompleteBatch(ctx context.Context, items []CompleteItem) ([]error, error) {
	errs, durable, err := c.CompleteBatchUnwaited(ctx, items)
	if err != nil {
		return nil, err
	}
	if err := durable.Wait(ctx); err != nil {
		return nil, err
	}
	return errs, nil
}

// CompleteBatchUnwaited is CompleteBatch without its wait for durability:
// it decides, writes and applies as CompleteBatch does and returns at once,
// with what the caller must wait on (Durable.Wait) before it tells anyone
// the answers. A caller that has more to write on behalf of the same
// request (the lease of a worker's CompleteBatch) writes it first, so that
// both share one wait and, most often, one fsync.
func (c *Coordinator) CompleteBatchUnwaited(ctx context.Context, items []CompleteItem) ([]error, Durable, error) {
	errs, _, durable, err := c.completeBatch(ctx, items)
	return errs, durable, err
}

// completeBatch is CompleteBatchUnwaited answering also the ids of the
// tasks each item spawned (nil for none).
func (c *Coordinator) completeBatch(ctx context.Context, items []CompleteItem) ([]error, [][]string, Durable, error) {
	if err := c.cfg.Limits.checkCompleteBatch(len(items)); err != nil {
		return nil, nil, Durable{}, err
	}
	var spawned [][]string
	errs := make([]error, len(items))
	for i, it := range items {
		errs[i] = c.validateComplete(it)
	}
	if err := c.lock(); err != nil {
		return nil, nil, Durable{}, err
	}
	now := c.now()
	recs := make([]state.Record, 0, len(items))
	// The records live in c.completed until the next call: nothing keeps
	// them once written and applied.
	c.completed = resize(c.completed, len(items))
	// pending holds the tasks that recs touches. Records are applied to the
	// state only when written, and a decision reads only its own task, so
	// items of distinct tasks can share one write. An item whose task has a
	// record pending writes the pending records first, so that it is
	// decided on the state its predecessors left.
	if c.pending == nil {
		c.pending = make(map[string]struct{})
	}
	pending := c.pending // kept from batch to batch, under c.mu
	clear(pending)
	for i, it := range items {
		if errs[i] != nil {
			continue
		}
		// A spawn creates tasks with new ids that others of the batch may
		// depend on: it is decided on a state where every record before
		// it is applied.
		if _, ok := pending[it.TaskID]; ok || len(it.Spawn) > 0 && len(recs) > 0 {
			attribute(ctx, recs)
			if _, err := c.write(recs...); err != nil {
				c.mu.Unlock()
				return nil, nil, Durable{}, err
			}
			recs = recs[:0]
			clear(pending)
		}
		n := len(recs)
		var ids []string
		recs, ids, errs[i] = c.completeLocked(recs, it, now, &c.completed[i])
		if ids != nil {
			if spawned == nil {
				spawned = make([][]string, len(items))
			}
			spawned[i] = ids
		}
		if len(recs) == n {
			continue
		}
		if len(items) > 1 {
			pending[it.TaskID] = struct{}{}
		}
	}
	// With no records, last is the last LSN the decisions saw: an answer
	// (a repeated completion, a refusal) waits until what it reveals is
	// durable.
	attribute(ctx, recs)
	last, err := c.write(recs...)
	c.mu.Unlock()
	if err != nil {
		return nil, nil, Durable{}, err
	}
	if spawned == nil {
		spawned = make([][]string, len(items))
	}
	return errs, spawned, Durable{c: c, lsn: last}, nil
}

// Durable is a write of the coordinator that its caller has yet to wait
// for.
type Durable struct {
	c   *Coordinator
	lsn uint64
}

// Wait blocks until the write is durable, as the coordinator's own calls
// do before they return; a log failure stops the coordinator. The zero
// Durable is durable.
func (d Durable) Wait(ctx context.Context) error {
	if d.c == nil {
		return nil
	}
	return d.c.wait(ctx, d.lsn)
}

// validateComplete checks a completion's fields against the limits; it
// needs no lock.
func (c *Coordinator) validateComplete(it CompleteItem) error {
	if len(it.Result) > c.cfg.Limits.MaxResultBytes {
		return &LimitError{Field: "result", Size: len(it.Result), Limit: c.cfg.Limits.MaxResultBytes}
	}
	return c.checkLease(it.TaskID, it.LeaseID)
}

// completeLocked decides one validated completion at now: nothing to write
// when the lease already completed the task (a retry gets the same
// answer), else the lease-holder decision with a TaskCompleted record (rec,
// set), appended to recs. c.mu must be held.
func (c *Coordinator) completeLocked(recs []state.Record, it CompleteItem, now state.Time, rec *state.TaskCompleted) ([]state.Record, []string, error) {
	t := c.st.Task(it.TaskID)
	if t != nil && t.State == state.Completed && len(t.Executions) > 0 &&
		t.Executions[len(t.Executions)-1].LeaseID == it.LeaseID {
		return recs, nil, nil
	}
	var ids []string
	recs, err := c.leaseOpLocked(recs, t, it.TaskID, it.LeaseID, state.ActionComplete, now, func(t *state.Task, _ *state.Execution, now state.Time) (state.Record, error) {
		*rec = state.TaskCompleted{TaskID: t.ID, LeaseID: it.LeaseID, Result: it.Result, At: now}
		if len(it.Spawn) > 0 {
			if t.State != state.Leased {
				return nil, wrongState(t, " was committed by an earlier attempt, whose commit spawned what it spawned: a finalisation spawns nothing")
			}
			tasks, deliver, spawned, err := c.checkSpawn(t, it.Spawn, now.Std())
			if err != nil {
				return nil, err
			}
			rec.Spawn, rec.Deliver, ids = tasks, deliver, spawned
		}
		return rec, nil
	})
	return recs, ids, err
}
