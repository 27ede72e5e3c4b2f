package coordinator

import (
	"fmt"
	"sync/atomic"
	"time"
)

// MemoryBudget bounds what the partitions of one node hold in memory: the
// sum of their states' HeldBytes (payloads, results, schedules, and each
// task's and queue's fixed cost; internal/state, memory.go). The node's
// coordinators share it (Config.Memory): each adds what its state grew or
// shrank by after every write, and gives back what it holds when it
// closes. A write that creates tasks or schedules — Submit, SubmitBatch,
// CreateSchedule, UpdateSchedule, Backfill — is refused with a *FullError
// when it would take the sum past the limit; everything else is served,
// so workers keep draining the queues (a completion even adds its result)
// and the schedules keep firing. Memory is freed by the retention purge,
// which drops finished tasks (state.TasksPurgedRange), and by deleting
// tasks or schedules: completing a task frees nothing until its
// retention passes (docs/guides/limits.md, "The memory budget").
//
// The limit is soft: coordinators decide at once, so a write admitted by
// one while another admits its own may pass it by one write's bytes, and a
// completion's result is never refused.
type MemoryBudget struct {
	limit      int64
	retryAfter time.Duration
	held       atomic.Int64
}

// NewMemoryBudget returns a budget of limitBytes. retryAfter is the hint a
// refusal gives: how long memory may take to be freed, the node's
// retention purge interval.
func NewMemoryBudget(limitBytes int64, retryAfter time.Duration) *MemoryBudget {
	return &MemoryBudget{limit: limitBytes, retryAfter: max(retryAfter, time.Second)}
}

// LimitBytes is the budget.
func (b *MemoryBudget) LimitBytes() int64 { return b.limit }

// HeldBytes is what the node's partitions hold, as their states account it.
func (b *MemoryBudget) HeldBytes() int64 { return b.held.Load() }

// FullError is a write refused because the node holds as much as its
// memory budget allows.
type FullError struct {
	// HeldBytes is what the node held, NeedBytes what the write would
	// have added, LimitBytes the budget.
	HeldBytes, NeedBytes, LimitBytes int64
	// RetryAfter is when to try again: the node's purge interval, the
	// earliest time memory may be freed.
	RetryAfter time.Duration
}

func (e *FullError) Error() string {
	return fmt.Sprintf("%v: this node holds %d bytes of tasks and schedules and this write needs %d more, over its memory budget of %d bytes (--max-memory-bytes); "+
		"memory is freed when finished tasks pass their retention (the purge runs every %v) or are purged: retry after %v",
		ErrFull, e.HeldBytes, e.NeedBytes, e.LimitBytes, e.RetryAfter, e.RetryAfter)
}

func (e *FullError) Unwrap() error { return ErrFull }

// admitLocked refuses a write that would add need bytes to what the node
// holds past its budget; c.mu must be held.
func (c *Coordinator) admitLocked(need int64) error {
	b := c.cfg.Memory
	if b == nil || need <= 0 {
		return nil
	}
	if held := b.held.Load(); held+need > b.limit {
		return &FullError{HeldBytes: held, NeedBytes: need, LimitBytes: b.limit, RetryAfter: b.retryAfter}
	}
	return nil
}

// reportLocked adds to the node's budget what the state grew or shrank by
// since the last report; c.mu must be held (or the coordinator not yet
// shared).
func (c *Coordinator) reportLocked() {
	if c.cfg.Memory == nil {
		return
	}
	if d := c.st.HeldBytes() - c.reported; d != 0 {
		c.cfg.Memory.held.Add(d)
		c.reported += d
	}
}

// releaseLocked gives back to the node's budget what the state holds: the
// coordinator stops serving and its state goes; c.mu must be held.
func (c *Coordinator) releaseLocked() {
	if c.cfg.Memory != nil && c.reported != 0 {
		c.cfg.Memory.held.Add(-c.reported)
		c.reported = 0
	}
}
