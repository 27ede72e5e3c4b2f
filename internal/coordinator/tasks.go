package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// DefaultNamespace is the namespace of requests that name none.
const DefaultNamespace = "default"

// SubmitRequest describes a new task. Zero fields take their defaults.
type SubmitRequest struct {
	Namespace string // default "default"
	Queue     string // required
	Payload   []byte // the coordinator keeps it: do not modify after submit
	// RequestID makes the submit idempotent within the namespace: a second
	// submit with the same id returns the first task, marked Duplicate.
	RequestID       string
	ExecutionWindow time.Duration // default Limits.DefaultWindow
	Retry           state.RetryPolicy
	NotBefore       time.Time // zero: at once
	Priority        int32
	// Deadline, when set, is the instant after which the task fails unless
	// COMMITTED by then, whatever its attempts left; no lease outlives it.
	// Zero: none.
	Deadline time.Time
	// Timeout sets the deadline to the time of the submit plus Timeout
	// instead (0: none). Deadline and Timeout exclude each other.
	Timeout time.Duration
	// Trace is the submitter's W3C trace context (zero: none), given to
	// every worker that leases the task.
	Trace state.TraceContext
	// Kind says what kind of work the task is, for workers to route it by
	// ("" for none): 1..MaxKindBytes of letters, digits and . _ - : /.
	Kind string
	// Key is the caller's key of the task, for the flow control of its
	// queue's keys ("" for none): 1..state.MaxKeyBytes of UTF-8 without
	// spaces or control characters (docs/design/keys.md).
	Key string
	// DependsOn names the tasks it depends on: task ids, or in a batch the
	// request ids of tasks of the same batch (docs/design/workflows.md).
	// The task is BLOCKED until every one of them is COMPLETED.
	DependsOn []string
	// OnDependencyFailure says what a dependency that ends FAILED or DEAD
	// does to it (default: DEAD, reason dependency_failed).
	OnDependencyFailure state.DepPolicy
	// Remote names the DependsOn entries that are tasks of other
	// partitions (cluster mode), which the caller found there, in the
	// task's namespace: their edges are resolved by DependencyResolved
	// records (docs/design/workflows.md, "Cluster mode").
	Remote []string
	// Place is, for a task of a workflow batch or a spawn that a cluster
	// node placed in another partition than this coordinator's, the id
	// suffix of that partition ("" or this partition's: here). Such a task
	// is kept as a delivery (deliveries.go); only a workflow batch, a batch
	// with dependencies and a spawn may place one elsewhere.
	Place string
}

// SubmitResult is the created (or, for a repeated request id, existing)
// task.
type SubmitResult struct {
	TaskView
	Duplicate bool
}

// MaxKindBytes is the longest kind a task may have.
const MaxKindBytes = 128

// checkKind validates a task's kind: "" (none), or 1..MaxKindBytes of
// ASCII letters, digits and . _ - : / (a Go type's name, "send_email",
// "email:deliver", "billing.charge/v2").
func checkKind(field, kind string) error {
	if len(kind) > MaxKindBytes {
		return fieldErr(field, "%d bytes is over the limit of %d", len(kind), MaxKindBytes)
	}
	for i := 0; i < len(kind); i++ {
		switch c := kind[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-', c == ':', c == '/':
		default:
			return fieldErr(field, "%q holds %q at byte %d; a kind is letters, digits and . _ - : / only", kind, c, i)
		}
	}
	return nil
}

// checkKey validates a task's key: "" (none), or 1..state.MaxKeyBytes of
// UTF-8 without spaces or control characters, as an id.
func checkKey(field, key string) error {
	if len(key) > state.MaxKeyBytes {
		return fieldErr(field, "%d bytes is over the limit of %d bytes: a key names one of your entities (a customer id, an account), not data", len(key), state.MaxKeyBytes)
	}
	return Limits{MaxIDBytes: state.MaxKeyBytes}.checkID(field, key, false)
}

// checkID validates an identifier: 1..MaxIDBytes of UTF-8 without spaces or
// control characters.
func (c *Coordinator) checkID(field, v string, required bool) error {
	return c.cfg.Limits.checkID(field, v, required)
}

func (l Limits) checkID(field, v string, required bool) error {
	if v == "" {
		if required {
			return fieldErr(field, "required")
		}
		return nil
	}
	if len(v) > l.MaxIDBytes {
		return fieldErr(field, "%d bytes is over the limit of %d bytes", len(v), l.MaxIDBytes)
	}
	if printableASCII(v) {
		return nil
	}
	if !utf8.ValidString(v) {
		return fieldErr(field, "must be valid UTF-8")
	}
	for _, r := range v {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fieldErr(field, "must not contain spaces or control characters (got %q)", v)
		}
	}
	return nil
}

// printableASCII reports whether v is all ASCII without spaces or control
// characters: valid UTF-8 that checkID accepts, known without decoding
// runes (ids are almost always this).
func printableASCII(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// validateSubmit fills defaults in req and checks every field against the
// limits. A batch names the item (ItemError) only when one fails: building
// "requests[i]." for every item cost allocations on the path every
// submit takes.
func (c *Coordinator) validateSubmit(req *SubmitRequest, now time.Time) error {
	return c.cfg.Limits.validateSubmit(req, now)
}

// CheckBatch checks a SubmitBatch as a coordinator with these limits would
// (zero fields take their defaults), without changing reqs, and returns the
// error that coordinator's SubmitBatch would answer. Cluster mode checks a
// batch this way before splitting it over partitions, so that a bad item
// still creates nothing.
func (l Limits) CheckBatch(reqs []SubmitRequest, now time.Time) error {
	l = l.withDefaults()
	if len(reqs) == 0 {
		return fieldErr("requests", "at least one task is required")
	}
	if len(reqs) > l.MaxBatch {
		return fieldErr("requests", "%d tasks is over the limit of %d per batch; split the batch", len(reqs), l.MaxBatch)
	}
	for i := range reqs {
		req := reqs[i]
		if err := l.validateSubmit(&req, now); err != nil {
			return ItemError(err, i)
		}
	}
	return nil
}

// CheckSubmit checks one Submit as a coordinator with these limits would
// (zero fields take their defaults), without changing req, and returns the
// error that coordinator's Submit would answer.
func (l Limits) CheckSubmit(req SubmitRequest, now time.Time) error {
	return l.withDefaults().validateSubmit(&req, now)
}

// CheckNames checks the identifiers of a submit as Submit would, under
// these limits (zero fields: the defaults); namespace "" is the default
// namespace. Cluster mode checks them before it creates a queue.
func (l Limits) CheckNames(namespace, queue, requestID string) error {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return l.withDefaults().checkNames(namespace, queue, requestID)
}

func (l Limits) checkNames(namespace, queue, requestID string) error {
	err := l.checkID("namespace", namespace, true)
	if err == nil {
		err = l.checkID("queue", queue, true)
	}
	if err == nil {
		err = l.checkID("request_id", requestID, false)
	}
	return err
}

func (l Limits) validateSubmit(req *SubmitRequest, now time.Time) error {
	if req.Namespace == "" {
		req.Namespace = DefaultNamespace
	}
	if err := l.checkNames(req.Namespace, req.Queue, req.RequestID); err != nil {
		return err
	}
	if len(req.Payload) > l.MaxPayloadBytes {
		return &LimitError{Field: "payload", Size: len(req.Payload), Limit: l.MaxPayloadBytes}
	}
	if err := checkKind("kind", req.Kind); err != nil {
		return err
	}
	if err := checkKey("key", req.Key); err != nil {
		return err
	}
	if req.ExecutionWindow == 0 {
		req.ExecutionWindow = l.DefaultWindow
	}
	if req.ExecutionWindow < l.MinWindow || req.ExecutionWindow > l.MaxWindow {
		return fieldErr("execution_window", "%v is outside %v..%v", req.ExecutionWindow, l.MinWindow, l.MaxWindow)
	}
	r := &req.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = l.DefaultRetry.MaxAttempts
	}
	if r.MaxAttempts > l.MaxAttempts {
		return fieldErr("retry_policy.max_attempts", "%d is outside 1..%d", r.MaxAttempts, l.MaxAttempts)
	}
	if r.InitialBackoff < 0 || r.InitialBackoff > l.MaxBackoff {
		return fieldErr("retry_policy.initial_backoff", "%v is outside 0..%v", r.InitialBackoff, l.MaxBackoff)
	}
	if r.MaxBackoff < 0 || r.MaxBackoff > l.MaxBackoff {
		return fieldErr("retry_policy.max_backoff", "%v is outside 0..%v", r.MaxBackoff, l.MaxBackoff)
	}
	if r.InitialBackoff == 0 {
		r.InitialBackoff = l.DefaultRetry.InitialBackoff
		if r.MaxBackoff > 0 {
			r.InitialBackoff = min(r.InitialBackoff, r.MaxBackoff)
		}
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = max(l.DefaultRetry.MaxBackoff, r.InitialBackoff)
	}
	if r.MaxBackoff < r.InitialBackoff {
		return fieldErr("retry_policy.max_backoff", "%v is below initial_backoff %v", r.MaxBackoff, r.InitialBackoff)
	}
	if r.Multiplier == 0 {
		r.Multiplier = l.DefaultRetry.Multiplier
	}
	if !(r.Multiplier >= 1 && r.Multiplier <= 100) { // also rejects NaN
		return fieldErr("retry_policy.backoff_multiplier", "%v is outside 1..100", r.Multiplier)
	}
	if !req.NotBefore.IsZero() && req.NotBefore.Sub(now) > l.MaxDelay {
		return fieldErr("not_before", "%s is more than %v ahead", req.NotBefore.UTC().Format(time.RFC3339), l.MaxDelay)
	}
	if req.Trace != (state.TraceContext{}) {
		if err := l.checkTrace(req.Trace); err != nil {
			return err
		}
	}
	// A retry of a submit with a request id may come after its deadline:
	// it is answered with the first task, so that whether its deadline is
	// still ahead is checked only when it would create one (SubmitBatch).
	return l.checkDeadline(req, now, req.RequestID == "")
}

// checkDeadline checks a submit's deadline or timeout at now: one of them at
// most, within MaxDelay, and, if ahead is set, in the future and leaving the
// task at least the minimum execution window to run after it may start
// (now, or not_before).
func (l Limits) checkDeadline(req *SubmitRequest, now time.Time, ahead bool) error {
	field, deadline := "deadline", req.Deadline
	switch {
	case req.Timeout != 0 && !req.Deadline.IsZero():
		return fieldErr("timeout", "deadline and timeout exclude each other: set one of them")
	case req.Timeout < 0:
		return fieldErr("timeout", "%v is not positive", req.Timeout)
	case req.Timeout > l.MaxDelay:
		return fieldErr("timeout", "%v is over the limit of %v", req.Timeout, l.MaxDelay)
	case req.Timeout > 0:
		field, deadline = "timeout", now.Add(req.Timeout)
	case deadline.IsZero():
		return nil
	case !ahead:
		return nil
	case !deadline.After(now):
		return fieldErr(field, "%s is in the past (the server's time is %s)", deadline.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	case deadline.Sub(now) > l.MaxDelay:
		return fieldErr(field, "%s is more than %v ahead", deadline.UTC().Format(time.RFC3339), l.MaxDelay)
	}
	start, from := now, "the submit"
	if req.NotBefore.After(now) {
		start, from = req.NotBefore, "not_before"
	}
	if deadline.Sub(start) < l.MinWindow {
		return fieldErr(field, "the deadline %s leaves less than the minimum execution window (%v) after %s (%s): the task could not run",
			deadline.UTC().Format(time.RFC3339Nano), l.MinWindow, from, start.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// created sets r to the record of req's new task id, created at now.
func created(r *state.TaskCreated, req *SubmitRequest, id string, now time.Time) {
	*r = state.TaskCreated{
		TaskID:          id,
		Namespace:       req.Namespace,
		Queue:           req.Queue,
		Payload:         req.Payload,
		ExecutionWindow: req.ExecutionWindow,
		Retry:           req.Retry,
		RequestID:       req.RequestID,
		Priority:        req.Priority,
		CreatedAt:       state.TimeOf(now),
		Trace:           req.Trace,
		Kind:            req.Kind,
		Key:             req.Key,
	}
	if !req.NotBefore.IsZero() {
		r.NotBefore = state.TimeOf(req.NotBefore)
	}
	switch {
	case req.Timeout > 0:
		r.Deadline = state.TimeOf(now.Add(req.Timeout))
	case !req.Deadline.IsZero():
		r.Deadline = state.TimeOf(req.Deadline)
	}
}

// Submit creates a task (one TaskCreated record), or returns the existing
// one if the request id was used before in the namespace.
func (c *Coordinator) Submit(ctx context.Context, req SubmitRequest) (SubmitResult, error) {
	res, err := c.SubmitBatch(ctx, []SubmitRequest{req})
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.Field = fe.Field[len("requests[0]."):]
		}
		var le *LimitError
		if errors.As(err, &le) {
			le.Field = le.Field[len("requests[0]."):]
		}
		return SubmitResult{}, err
	}
	return res[0], nil
}

// SubmitBatch submits several tasks in one append. Every request is
// validated first; if any is invalid nothing is submitted and the error
// names it (requests[i].field). Results are in request order.
func (c *Coordinator) SubmitBatch(ctx context.Context, reqs []SubmitRequest) ([]SubmitResult, error) {
	out := make([]SubmitResult, len(reqs))
	err := c.submitBatch(ctx, reqs, nil, func(i int, t *state.Task, dup bool) {
		out[i] = SubmitResult{TaskView: c.view(t), Duplicate: dup}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SubmitID is what SubmitBatchIDs answers for one request.
type SubmitID struct {
	ID        string
	Duplicate bool
}

// SubmitBatchIDs is SubmitBatch answering only each task's id: it copies no
// task, for an API answer that names only ids.
func (c *Coordinator) SubmitBatchIDs(ctx context.Context, reqs []SubmitRequest) ([]SubmitID, error) {
	out := make([]SubmitID, len(reqs))
	err := c.submitBatch(ctx, reqs, nil, func(i int, t *state.Task, dup bool) {
		out[i] = SubmitID{ID: t.ID, Duplicate: dup}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// relaying is what submitBatch does for an outbox's relay (Relay): each
// request is a row of the outbox, held by an OutboxHeld appended before
// the tasks; a request that is refused is refused alone, its error in
// errs, and holds nothing.
type relaying struct {
	outbox string
	rows   []int64
	errs   []error
}

// refuse records why request i of a relay is refused, and reports
// whether it was (false: not relaying, the caller fails the batch).
func (r *relaying) refuse(i int, err error) bool {
	if r == nil {
		return false
	}
	r.errs[i] = err
	return true
}

// submitBatch is SubmitBatch, SubmitBatchIDs and Relay (relay set): it
// calls answer for each request it submits, in order, with its task once
// applied (c.mu held), before waiting for the log.
func (c *Coordinator) submitBatch(ctx context.Context, reqs []SubmitRequest, relay *relaying, answer func(i int, t *state.Task, dup bool)) error {
	if relay == nil && (graphed("", reqs) || c.anyRemote(reqs)) {
		return c.submitGraph(ctx, "", reqs, func(i int, id string, t *state.Task, dup bool) {
			if t == nil {
				t = &state.Task{ID: id} // of another partition: its id only
			}
			answer(i, t, dup)
		})
	}
	if len(reqs) == 0 {
		return fieldErr("requests", "at least one task is required")
	}
	if len(reqs) > c.cfg.Limits.MaxBatch {
		return fieldErr("requests", "%d tasks is over the limit of %d per batch; split the batch", len(reqs), c.cfg.Limits.MaxBatch)
	}
	now := c.cfg.Clock.Now()
	for i := range reqs {
		if err := c.validateSubmit(&reqs[i], now); err != nil && !relay.refuse(i, err) {
			return ItemError(err, i)
		}
	}
	if err := c.lock(); err != nil {
		return err
	}
	now = c.cfg.Clock.Now()
	// dup[i] says request i names a task submitted before (earlier, or by
	// an earlier request of the batch).
	sc := &c.submitScratch
	dup := resize(sc.dup, len(reqs))
	recs := make([]state.Record, 0, len(reqs)+1)
	var held *state.OutboxHeld
	if relay != nil {
		// The rows' hold goes before their tasks: a task durable is a hold
		// durable.
		held = &state.OutboxHeld{Outbox: relay.outbox, At: state.TimeOf(now)}
		recs = append(recs, held)
	}
	// newAt[i] is the index in recs of request i's record; firstOf maps a
	// request id to the earlier request of this batch that carries it.
	newAt := resize(sc.newAt, len(reqs))
	if sc.firstOf == nil {
		sc.firstOf = make(map[[2]string]int)
	}
	firstOf := sc.firstOf
	clear(firstOf) // of the batch before
	if sc.ids == nil {
		sc.ids = make(map[string]struct{})
	}
	clear(sc.ids)
	sc.created = resize(sc.created, len(reqs))
	sc.dup, sc.newAt = dup, newAt
	nNew := 0
	// refuse fails request i: the whole batch, answered once what it saw
	// is durable, or the request alone when relaying.
	refuse := func(i int, err error) error {
		if relay.refuse(i, err) {
			return nil
		}
		if werr := c.writeAndWait(ctx); werr != nil {
			return werr
		}
		return err
	}
	for i := range reqs {
		req := &reqs[i]
		newAt[i] = -1
		if relay != nil && relay.errs[i] != nil {
			continue
		}
		if req.RequestID != "" {
			// A retry names a task submitted before: a stored one, or that
			// of an earlier request of the batch.
			k := [2]string{req.Namespace, req.RequestID}
			retry, err := false, error(nil)
			if t := c.st.ByRequest(req.Namespace, req.RequestID); t != nil {
				retry, err = true, sameRequest(i, req, t.ID, t.Queue, t.Kind, c.st.KeyOf(t), t.Payload)
			} else if j, ok := firstOf[k]; ok {
				retry, err = true, sameRequest(i, req, fmt.Sprintf("of requests[%d]", j), reqs[j].Queue, reqs[j].Kind, reqs[j].Key, reqs[j].Payload)
			}
			switch {
			case retry && err != nil:
				// It names an earlier task: answer once that is durable.
				if err := refuse(i, err); err != nil {
					return err
				}
				continue
			case retry:
				dup[i] = true
				holdRow(held, relay, i, req)
				continue
			}
			// Not a retry: its deadline must be ahead (validateSubmit left
			// that to here).
			if err := c.cfg.Limits.checkDeadline(req, now, true); err != nil {
				// It says the request id is new: answer once that is durable.
				if err := refuse(i, ItemError(err, i)); err != nil {
					return err
				}
				continue
			}
			firstOf[k] = i
		}
		holdRow(held, relay, i, req)
		newAt[i] = len(recs)
		// The records live in sc.created until the next batch: nothing
		// keeps them once written and applied.
		r := &sc.created[nNew]
		nNew++
		created(r, req, c.newTaskID(now, sc.ids), now)
		recs = append(recs, r)
	}
	if held != nil && len(held.Rows) == 0 {
		recs = recs[1:] // every row refused: nothing held, nothing created
	}
	if err := c.admitTasksLocked(sc.created[:nNew]); err != nil {
		c.mu.Unlock()
		return err
	}
	return c.writeAnswered(ctx, recs, func() {
		for i := range reqs {
			switch {
			case newAt[i] >= 0:
				answer(i, c.st.Task(recs[newAt[i]].Task()), false)
			case dup[i]:
				answer(i, c.st.ByRequest(reqs[i].Namespace, reqs[i].RequestID), true)
			}
		}
	})
}

// holdRow adds the row of request i to held when relaying.
func holdRow(held *state.OutboxHeld, relay *relaying, i int, req *SubmitRequest) {
	if held == nil {
		return
	}
	held.Rows = append(held.Rows, state.OutboxHeldRow{Row: relay.rows[i], Namespace: req.Namespace, Queue: req.Queue, RequestID: req.RequestID})
}

// admitTasksLocked refuses to create the tasks of recs if they would pass
// the memory budget (c.mu held).
func (c *Coordinator) admitTasksLocked(recs []state.TaskCreated) error {
	if c.cfg.Memory == nil {
		return nil
	}
	var need int64
	for i := range recs {
		r := &recs[i]
		need += state.NewTaskHeldBytes(len(r.TaskID), len(r.RequestID), len(r.Payload)) + state.NewKeyHeldBytes(r.Key)
	}
	return c.admitLocked(need)
}

// writeAnswered writes and applies recs (c.mu held), calls answer with
// the state they left, releases c.mu and waits until they are durable.
func (c *Coordinator) writeAnswered(ctx context.Context, recs []state.Record, answer func()) error {
	attribute(ctx, recs)
	last, err := c.write(recs...)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	answer()
	c.mu.Unlock()
	return c.wait(ctx, last)
}

// resize returns s with length n and every element zero, reusing its array
// when it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// sameRequest refuses request i, whose request id was used before for task
// (an id, or a description of an earlier request of the batch) with queue,
// kind, key and payload, unless it is a true retry: the same queue, kind,
// key and payload.
func sameRequest(i int, req *SubmitRequest, task, queue, kind, key string, payload []byte) error {
	what := ""
	switch {
	case req.Queue != queue:
		what = fmt.Sprintf("queue %q, not %q", queue, req.Queue)
	case req.Kind != kind:
		what = fmt.Sprintf("kind %q, not %q", kind, req.Kind)
	case req.Key != key:
		what = fmt.Sprintf("key %q, not %q", key, req.Key)
	case !bytes.Equal(req.Payload, payload):
		what = "a different payload"
	default:
		return nil
	}
	return fieldErr(fmt.Sprintf("requests[%d].request_id", i),
		"%q was already used in namespace %q for task %s with %s; a retry must repeat the same queue, kind, key and payload, and a new task needs a new request id",
		req.RequestID, req.Namespace, task, what)
}

// newTaskID returns an id that no task holds and that is not in pending
// (the ids of the records not yet written), and adds it to pending (nil:
// no record is pending). A collision needs a broken random source, but the
// cost of checking is two map lookups, and a duplicate id would stop the
// partition.
func (c *Coordinator) newTaskID(now time.Time, pending map[string]struct{}) string {
	for {
		id := newID(now, c.ids) + c.cfg.TaskIDSuffix
		if c.st.Task(id) != nil {
			continue
		}
		if _, clash := pending[id]; clash {
			continue
		}
		if pending != nil {
			pending[id] = struct{}{}
		}
		return id
	}
}

// Actor is who asks for an operator's action and why, as given; the
// record of the action keeps both.
type Actor struct {
	By     string
	Reason string
}

func (l Limits) checkActor(a Actor) error {
	if len(a.Reason) > l.MaxReasonBytes {
		return &LimitError{Field: "reason", Size: len(a.Reason), Limit: l.MaxReasonBytes}
	}
	if len(a.By) > l.MaxIDBytes {
		return &LimitError{Field: "requested_by", Size: len(a.By), Limit: l.MaxIDBytes}
	}
	return nil
}

// Kill makes a task DEAD (one TaskDead record). Its lease, if any, loses
// authority at once.
func (c *Coordinator) Kill(ctx context.Context, taskID string, a Actor) error {
	return c.taskAction(ctx, taskID, a, killRefusal, func(now state.Time) state.Record {
		return &state.TaskDead{TaskID: taskID, Reason: a.Reason, By: a.By, At: now}
	})
}

func killRefusal(t *state.Task) error {
	if t.State.Terminal() {
		return wrongState(t, " is already %s", t.State)
	}
	return nil
}

// Retry returns a FAILED or DEAD task to WAITING with a fresh budget of
// attempts (one TaskRetried record). A COMPLETED task, one that is not
// finished, and one an attempt committed before it was killed (its effect
// may have been applied) are refused.
func (c *Coordinator) Retry(ctx context.Context, taskID string, a Actor) error {
	return c.taskAction(ctx, taskID, a, retryRefusal, func(now state.Time) state.Record {
		return &state.TaskRetried{TaskID: taskID, Reason: a.Reason, By: a.By, At: now}
	})
}

func retryRefusal(t *state.Task) error {
	switch {
	case t.State == state.Completed:
		return wrongState(t, " is COMPLETED: it ran successfully and is not retried; submit a new task to run it again")
	case t.State != state.Failed && t.State != state.Dead:
		return wrongState(t, " is %s: only a FAILED or DEAD task can be retried", t.State)
	case t.CommittedBy != "":
		return wrongState(t, " was committed by lease %s before it was killed: its effect may have been applied, so it is not retried (that could apply it twice); submit a new task if it must run again", t.CommittedBy)
	}
	return nil
}

// taskAction appends the record rec makes for an operator's action on one
// task, unless refuse refuses the task.
func (c *Coordinator) taskAction(ctx context.Context, taskID string, a Actor, refuse func(*state.Task) error, rec func(state.Time) state.Record) error {
	if err := c.checkID("task_id", taskID, true); err != nil {
		return err
	}
	if err := c.cfg.Limits.checkActor(a); err != nil {
		return err
	}
	if err := c.lock(); err != nil {
		return err
	}
	t := c.st.Task(taskID)
	var refusal error
	if t == nil {
		refusal = notFound(taskID)
	} else {
		refusal = refuse(t)
	}
	if refusal != nil {
		// The refusal reveals the task's state: answer it only once that
		// state is durable (a crash could still undo a terminal record).
		if err := c.writeAndWait(ctx); err != nil {
			return err
		}
		return refusal
	}
	return c.writeAndWait(ctx, rec(c.now()))
}

// TaskView is a copy of one task as an answer shows it: the task, and
// what the state keeps beside it: its deadline in force (0: none, or no
// longer: see state.State.Deadline), the trace context it was submitted
// with, and the last progress report of its current lease.
type TaskView struct {
	*state.Task
	state.Beside
}

// view copies t and what is kept beside it; c.mu must be held.
func (c *Coordinator) view(t *state.Task) TaskView {
	return TaskView{Task: t.Clone(), Beside: c.st.Beside(t)}
}

// Get returns a copy of the task.
func (c *Coordinator) Get(ctx context.Context, taskID string) (*state.Task, error) {
	v, err := c.View(ctx, taskID)
	return v.Task, err
}

// View returns a copy of the task with its deadline.
func (c *Coordinator) View(ctx context.Context, taskID string) (TaskView, error) {
	if err := c.checkID("task_id", taskID, true); err != nil {
		return TaskView{}, err
	}
	var out TaskView
	err := c.read(ctx, func() error {
		t := c.st.Task(taskID)
		if t == nil {
			return notFound(taskID)
		}
		out = c.view(t)
		return nil
	})
	return out, err
}

// read runs fn under the mutex, then waits until everything fn could have
// seen is durable: no answer reveals a record that a crash could still
// undo.
func (c *Coordinator) read(ctx context.Context, fn func() error) error {
	if err := c.lock(); err != nil {
		return err
	}
	err := fn()
	last := c.st.LastLSN()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.wait(ctx, last)
}

// ListFilter selects tasks; empty fields match everything.
type ListFilter struct {
	Namespace string
	Queue     string
	State     state.TaskState // 0: any
	// After continues a listing: the NextAfter of the previous page.
	After uint64
	Limit int // default 100, at most Limits.MaxListPage
}

// maxListScan bounds the tasks one List call examines, so a selective
// filter over a large state cannot hold the mutex for long; the caller
// continues from NextAfter.
const maxListScan = 100_000

// List returns tasks in creation order, with their deadlines, and the value
// of After for the next page (0 when there is none).
func (c *Coordinator) List(ctx context.Context, f ListFilter) (tasks []TaskView, nextAfter uint64, err error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 0 || f.Limit > c.cfg.Limits.MaxListPage {
		return nil, 0, fieldErr("page_size", "%d is outside 0..%d (0: the default, 100)", f.Limit, c.cfg.Limits.MaxListPage)
	}
	err = c.read(ctx, func() error {
		scanned := 0
		more := false
		c.st.Scan(f.After, func(t *state.Task) bool {
			if len(tasks) == f.Limit || scanned == maxListScan {
				more = true
				return false
			}
			scanned++
			nextAfter = t.CreatedLSN
			if (f.Namespace == "" || t.Namespace == f.Namespace) && (f.Queue == "" || t.Queue == f.Queue) &&
				(f.State == 0 || t.State == f.State) {
				tasks = append(tasks, c.view(t))
			}
			return true
		})
		if !more {
			nextAfter = 0
		}
		return nil
	})
	return tasks, nextAfter, err
}

// HistoryEntry is one record that touched a task.
type HistoryEntry struct {
	LSN    uint64
	Record state.Record
}

// History returns every record that touched the task, in log order, read
// back from the log.
func (c *Coordinator) History(ctx context.Context, taskID string) ([]HistoryEntry, error) {
	if err := c.checkID("task_id", taskID, true); err != nil {
		return nil, err
	}
	var lsns []uint64
	err := c.read(ctx, func() error {
		t := c.st.Task(taskID)
		if t == nil {
			return notFound(taskID)
		}
		lsns = append(lsns, t.LSNs()...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	want := make(map[uint64]bool, len(lsns))
	for _, l := range lsns {
		want[l] = true
	}
	last := lsns[len(lsns)-1]
	out := make([]HistoryEntry, 0, len(lsns))
	errDone := errors.New("done")
	err = c.log.Replay(lsns[0], func(lsn uint64, e wal.Entry) error {
		if lsn > last {
			return errDone
		}
		if !want[lsn] {
			return nil
		}
		r, err := record.Decode(record.Type(e.Type), e.Payload)
		if err != nil {
			return fmt.Errorf("coordinator: history: record at lsn %d: %w", lsn, err)
		}
		out = append(out, HistoryEntry{LSN: lsn, Record: r})
		if lsn == last {
			return errDone
		}
		return nil
	})
	if err != nil && !errors.Is(err, errDone) {
		return nil, err
	}
	return out, nil
}

// Where calls fn with the namespace, queue and workflow ("" for none) of
// each task of ids that exists (i its index in ids), for the event
// streams, which learn them from records that do not carry them
// (docs/design/events.md). None of them changes, so Where waits for
// nothing.
func (c *Coordinator) Where(ids []string, fn func(i int, namespace, queue, workflow string)) error {
	if err := c.lock(); err != nil {
		return err
	}
	defer c.mu.Unlock()
	for i, id := range ids {
		if t := c.st.Task(id); t != nil {
			var wf string
			if w := c.st.WorkflowOf(t); w != nil {
				wf = w.Key.ID
			}
			fn(i, t.Namespace, t.Queue, wf)
		}
	}
	return nil
}
