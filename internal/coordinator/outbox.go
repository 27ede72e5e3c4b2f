package coordinator

import (
	"context"
	"fmt"

	"github.com/tenurehq/tenure/internal/state"
)

// The transactional outbox's side of the coordinator
// (docs/design/outbox.md): a relay submits the rows of an outbox with
// Relay, which holds each row's request id in the same append as its task,
// and releases them with ReleaseOutbox once the rows are deleted.

// RelayItem is one row of an outbox to submit.
type RelayItem struct {
	Row int64
	Req SubmitRequest
}

// RelayResult answers one row: its task, or why it was refused.
type RelayResult struct {
	// ID is the task created, or with Duplicate the existing task its
	// request id names.
	ID        string
	Duplicate bool
	// Err is why the row was refused (a *FieldError or *LimitError: the
	// request's fault); it then holds nothing and created nothing.
	Err error
}

// checkOutbox checks an outbox's name.
func (l Limits) checkOutbox(outbox string) error {
	return l.checkID("outbox", outbox, true)
}

// Relay submits the rows of outbox (each with a request id) in one
// append: first an OutboxHeld in which each row holds its request id,
// then a TaskCreated for each row whose request id names no task yet.
// Each row is answered alone: a row the coordinator refuses (an invalid
// request, or a request id used before for another payload) gets its
// error and holds nothing, and the others go on. An error of the call
// (unavailable, the memory budget) leaves everything as it was.
func (c *Coordinator) Relay(ctx context.Context, outbox string, items []RelayItem) ([]RelayResult, error) {
	if err := c.cfg.Limits.checkOutbox(outbox); err != nil {
		return nil, err
	}
	if len(items) > state.MaxOutboxRowsPerRecord {
		return nil, fieldErr("rows", "%d rows is over the limit of %d per call; split the batch", len(items), state.MaxOutboxRowsPerRecord)
	}
	reqs := make([]SubmitRequest, len(items))
	relay := &relaying{outbox: outbox, rows: make([]int64, len(items)), errs: make([]error, len(items))}
	seen := make(map[int64]bool, len(items))
	for i, it := range items {
		reqs[i], relay.rows[i] = it.Req, it.Row
		switch {
		case seen[it.Row]:
			return nil, fieldErr(fmt.Sprintf("rows[%d].row", i), "row %d appears twice in the call", it.Row)
		case it.Req.RequestID == "":
			relay.errs[i] = fieldErr("request_id", "required: a row of an outbox is submitted with its request id")
		case len(it.Req.DependsOn) > 0:
			relay.errs[i] = fieldErr("depends_on", "a row of an outbox may not depend on other tasks (each row is submitted on its own): submit the tasks that depend on each other in one SubmitBatch")
		}
		seen[it.Row] = true
	}
	out := make([]RelayResult, len(items))
	err := c.submitBatch(ctx, reqs, relay, func(i int, t *state.Task, dup bool) {
		out[i] = RelayResult{ID: t.ID, Duplicate: dup}
	})
	if err != nil {
		return nil, err
	}
	for i, e := range relay.errs {
		out[i].Err = e
	}
	return out, nil
}

// ReleaseOutbox ends the holds of rows of outbox (one OutboxReleased of
// those held here; nothing when none is), once the relay has deleted them.
func (c *Coordinator) ReleaseOutbox(ctx context.Context, outbox string, rows []int64) error {
	if err := c.cfg.Limits.checkOutbox(outbox); err != nil {
		return err
	}
	if len(rows) > state.MaxOutboxRowsPerRecord {
		return fieldErr("rows", "%d rows is over the limit of %d per call; split the batch", len(rows), state.MaxOutboxRowsPerRecord)
	}
	if err := c.lock(); err != nil {
		return err
	}
	held := make(map[int64]bool)
	for _, h := range c.st.Holds(outbox) {
		held[h.Row] = true
	}
	r := &state.OutboxReleased{Outbox: outbox, At: c.now()}
	for _, row := range rows {
		if held[row] {
			r.Rows = append(r.Rows, row)
			held[row] = false
		}
	}
	if len(r.Rows) == 0 {
		return c.writeAndWait(ctx) // as it is: answer once that is durable
	}
	return c.writeAndWait(ctx, r)
}

// OutboxHolds returns the holds of outbox ("": of every outbox), ordered
// by outbox and row.
func (c *Coordinator) OutboxHolds(ctx context.Context, outbox string) ([]state.OutboxHold, error) {
	if err := c.lock(); err != nil {
		return nil, err
	}
	holds := c.st.Holds(outbox)
	return holds, c.writeAndWait(ctx)
}
