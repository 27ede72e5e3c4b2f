package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/tenurehq/tenure/internal/state"
)

// LeaseRequest asks for up to MaxTasks tasks of one queue.
type LeaseRequest struct {
	WorkerID  string
	Namespace string // default "default"
	Queue     string
	MaxTasks  int // default 1
	// Wait is how long to long-poll for a task when none is ready now (0:
	// answer at once).
	Wait time.Duration
}

// Lease is one granted attempt.
type Lease struct {
	TaskID      string
	Namespace   string
	Queue       string
	Payload     []byte // shared and immutable: do not modify
	LeaseID     string
	WorkerID    string
	Attempt     uint32
	LeaseExpiry time.Time
	Window      time.Duration
	Kind        string
	// Deadline is the task's deadline (zero: none): the lease never
	// outlives it, and the task fails at it unless committed by then.
	Deadline time.Time
	// Committed marks a finalisation lease: an earlier attempt committed
	// CommittedResult. The worker re-applies its idempotent effect and
	// completes; it must not execute the task again.
	Committed       bool
	CommittedResult []byte // shared and immutable: do not modify
	// Trace is the trace context the task was submitted with (zero: none):
	// the worker's span of the attempt continues the submitter's trace.
	Trace state.TraceContext
	// Key is the task's key ("" for none).
	Key string
	// Workflow is the task's workflow ("" for none), and Dependencies the
	// tasks it depends on, as they ended, with their results
	// (docs/design/workflows.md, "Results passed on").
	Workflow     string
	Dependencies []DependencyResult
}

// DependencyResult is one task a leased task depends on, as it ended.
type DependencyResult struct {
	TaskID string
	// State is how it ended (0: it is no longer kept).
	State state.TaskState
	// Result is its result if it completed, shared and immutable; Omitted
	// says it was left out to keep the lease within the payload limit.
	Result  []byte
	Omitted bool
}

// FencingToken identifies the attempt whose commit won. External effects
// keyed by it (or by task id) are applied once.
type FencingToken struct {
	TaskID  string
	Attempt uint32
}

// FailResult says what a failure led to.
type FailResult struct {
	State   state.TaskState // WAITING (retry scheduled) or FAILED
	RetryAt time.Time       // when the retry may start; zero if FAILED
}

func (c *Coordinator) validateLease(req *LeaseRequest) error {
	return c.cfg.Limits.checkLease(req)
}

// CheckLease fills in the defaults of req (namespace, max tasks) and checks
// it as Lease would, against these limits (zero fields: the defaults).
func (l Limits) CheckLease(req *LeaseRequest) error {
	return l.withDefaults().checkLease(req)
}

// checkLease is CheckLease for limits with their defaults filled in.
func (l Limits) checkLease(req *LeaseRequest) error {
	if req.Namespace == "" {
		req.Namespace = DefaultNamespace
	}
	if req.MaxTasks == 0 {
		req.MaxTasks = 1
	}
	if err := l.checkID("worker_id", req.WorkerID, true); err != nil {
		return err
	}
	if err := l.checkID("namespace", req.Namespace, true); err != nil {
		return err
	}
	if err := l.checkID("queue", req.Queue, true); err != nil {
		return err
	}
	if req.MaxTasks < 0 || req.MaxTasks > l.MaxLeaseTasks {
		return fieldErr("max_tasks", "%d is outside 1..%d", req.MaxTasks, l.MaxLeaseTasks)
	}
	if req.Wait < 0 || req.Wait > l.MaxWait {
		return fieldErr("wait", "%v is outside 0..%v", req.Wait, l.MaxWait)
	}
	return nil
}

// Lease grants up to MaxTasks ready tasks of the queue, in priority then age
// order. With none ready it long-polls up to Wait for one to become ready,
// and returns an empty list if none did.
func (c *Coordinator) Lease(ctx context.Context, req LeaseRequest) ([]Lease, error) {
	return c.LeaseAppend(ctx, req, nil)
}

// LeaseAppend is Lease appending the leases to out (Lease allocates them):
// for a caller that converts them and reuses out.
func (c *Coordinator) LeaseAppend(ctx context.Context, req LeaseRequest, out []Lease) ([]Lease, error) {
	if err := c.validateLease(&req); err != nil {
		return nil, err
	}
	q := state.QueueKey{Namespace: req.Namespace, Queue: req.Queue}
	pollEnd := c.cfg.Clock.Now().Add(req.Wait)
	for {
		if err := c.lock(); err != nil {
			return nil, err
		}
		nowT := c.cfg.Clock.Now()
		now := state.TimeOf(nowT)
		c.workers.seen(req.WorkerID, nowT, req.MaxTasks)
		// Lazy revocation before a grant: a past-due lease must not keep a
		// task from being leased, and a task past its deadline fails rather
		// than being leased. One write holds them and the grants.
		recs := c.revocationsLocked(now, c.cfg.MaxExpiriesPerScan)
		ready := c.st.Schedulable(q, now, req.MaxTasks)
		grants := make([]*state.LeaseGranted, 0, len(ready))
		// The records live in c.granted until the next call: nothing keeps
		// them once written, applied and answered (before Unlock).
		c.granted = resize(c.granted, len(ready))
		var failing map[string]bool // tasks recs fails at their deadline
		for _, t := range ready {
			if c.pastDeadline(t, now) {
				if failing == nil {
					failing = deadlineFailures(recs)
				}
				if !failing[t.ID] { // beyond the bound of one pass
					failing[t.ID] = true
					recs = append(recs, &state.TaskDeadlineExceeded{TaskID: t.ID, At: now})
				}
				continue
			}
			g := &c.granted[len(grants)]
			*g = state.LeaseGranted{
				TaskID:      t.ID,
				LeaseID:     newID(nowT, c.ids),
				WorkerID:    req.WorkerID,
				Attempt:     t.Attempt + 1,
				GrantedAt:   now,
				LeaseExpiry: c.capExpiry(t, now.Add(t.Window)),
			}
			grants = append(grants, g)
			recs = append(recs, g)
		}
		attribute(ctx, recs)
		last, err := c.write(recs...)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if len(grants) > 0 {
			out = slices.Grow(out, len(grants))
			for _, g := range grants {
				out = append(out, c.leaseView(c.st.Task(g.TaskID), g))
			}
			c.mu.Unlock()
			if err := c.wait(ctx, last); err != nil {
				return nil, err
			}
			return out, nil
		}
		// Nothing granted: once the revocations are durable, look again at
		// once if tasks past their deadline took the places of ready ones;
		// otherwise wait for the queue to be signalled, the next delayed
		// task, or the end of the long-poll.
		signal := c.signalFor(q)
		remaining := pollEnd.Sub(nowT)
		if next, ok := c.st.NextReady(q); ok {
			remaining = min(remaining, max(next.Std().Sub(nowT), time.Millisecond))
		}
		c.mu.Unlock()
		if len(recs) > 0 {
			if err := c.wait(ctx, last); err != nil {
				return nil, err
			}
		}
		if len(ready) > 0 {
			continue
		}
		// Without a Wait there is no poll, whatever the clock did since
		// pollEnd was read (a clock that went back would put it ahead).
		if req.Wait == 0 || !nowT.Before(pollEnd) {
			return out, nil
		}
		timer := c.cfg.Clock.NewTimer(remaining)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-signal:
			timer.Stop()
		case <-timer.C():
		}
	}
}

// deadlineFailures returns the tasks recs fails at their deadline.
func deadlineFailures(recs []state.Record) map[string]bool {
	out := make(map[string]bool)
	for _, r := range recs {
		if r, ok := r.(*state.TaskDeadlineExceeded); ok {
			out[r.TaskID] = true
		}
	}
	return out
}

func (c *Coordinator) leaseView(t *state.Task, g *state.LeaseGranted) Lease {
	l := Lease{
		TaskID:      t.ID,
		Namespace:   t.Namespace,
		Queue:       t.Queue,
		Payload:     t.Payload,
		LeaseID:     g.LeaseID,
		WorkerID:    g.WorkerID,
		Attempt:     g.Attempt,
		LeaseExpiry: g.LeaseExpiry.Std(),
		Window:      t.Window,
		Kind:        t.Kind,
	}
	if t.State == state.Committed {
		l.Committed = true
		l.CommittedResult = t.Result
	}
	if d, ok := c.st.DeadlineOf(t); ok {
		l.Deadline = d.Std()
	}
	l.Trace = c.st.TraceOf(t)
	l.Key = c.st.KeyOf(t)
	if t.State != state.Committed {
		// A finalisation has its committed result: nothing runs again.
		l.Workflow, l.Dependencies = c.dependencyResults(t)
	}
	return l
}

// revocationsLocked builds what time revokes at now: TaskDeadlineExceeded
// for up to max tasks past their deadline, then LeaseExpired for up to max
// leases past due, but none for a task past its deadline (the lease of a
// task ends at its deadline at the latest, and then the deadline wins: the
// task fails rather than being retried). c.mu must be held.
func (c *Coordinator) revocationsLocked(now state.Time, max int) []state.Record {
	var recs []state.Record
	for _, t := range c.st.PastDeadline(now, max) {
		recs = append(recs, &state.TaskDeadlineExceeded{TaskID: t.ID, At: now})
	}
	for _, t := range c.st.Expired(now, max) {
		if !c.pastDeadline(t, now) {
			recs = append(recs, c.expiry(t, now))
		}
	}
	return recs
}

// pastDeadline reports whether t has a deadline at or before now.
func (c *Coordinator) pastDeadline(t *state.Task, now state.Time) bool {
	d, ok := c.st.DeadlineOf(t)
	return ok && d <= now
}

// capExpiry returns expiry, or t's deadline if that is earlier: no lease
// outlives its task's deadline.
func (c *Coordinator) capExpiry(t *state.Task, expiry state.Time) state.Time {
	if d, ok := c.st.DeadlineOf(t); ok {
		return min(expiry, d)
	}
	return expiry
}

// expiry builds the LeaseExpired record of t's current lease at now. If the
// task will be retried, the retry waits out the backoff, as after a failure.
func (c *Coordinator) expiry(t *state.Task, now state.Time) *state.LeaseExpired {
	r := &state.LeaseExpired{TaskID: t.ID, LeaseID: t.CurrentLease().LeaseID, At: now}
	if t.State == state.Leased && t.AttemptsLeft() {
		r.RetryAt = now.Add(t.Retry.Backoff(t.AttemptsUsed()))
	}
	return r
}

// authorize checks that leaseID is t's current, unexpired lease at now. A
// lease past due is expired on the spot (a LeaseExpired record, or a
// TaskDeadlineExceeded if the task's deadline has passed too). An action
// by a lease without authority is answered with ErrLeaseLost, or
// ErrAlreadyCommitted if another attempt committed.
//
// A refused action by a former lease of t is recorded as a TaskCancelled,
// once per lease and action: the records refusals can add to a task are
// bounded by its leases, however often a caller retries. A lease id that t
// never had is refused without a record; the answer reveals only state the
// caller waits to be durable (leaseOp and CompleteBatch wait for the last
// LSN even when they write nothing). Neither extends t's retention.
//
// It returns the records to write and, on success, the current execution.
func (c *Coordinator) authorize(t *state.Task, leaseID string, action state.Action, now state.Time) (*state.Execution, []state.Record, error) {
	var recs []state.Record
	cur := t.CurrentLease()
	expiredNow := cur != nil && cur.LeaseExpiry <= now
	deadlineNow := expiredNow && c.pastDeadline(t, now)
	switch {
	case deadlineNow:
		recs = append(recs, &state.TaskDeadlineExceeded{TaskID: t.ID, At: now})
		cur = nil
	case expiredNow:
		recs = append(recs, c.expiry(t, now))
		cur = nil
	}
	if cur != nil && cur.LeaseID == leaseID {
		return cur, recs, nil
	}
	former := t.ExecutionOf(leaseID)
	if former != nil && !former.Refused.Has(action) {
		recs = append(recs, &state.TaskCancelled{TaskID: t.ID, LeaseID: leaseID, Action: action,
			Reason: action.String() + " by a lease without authority", At: now})
	}
	if former != nil && c.cfg.Observer != nil {
		c.cfg.Observer.Refused(t, action)
	}
	if t.CommittedBy != "" && t.CommittedBy != leaseID {
		return nil, recs, alreadyCommitted(t.ID, leaseID, t.CommittedBy)
	}
	why := "is not the current lease"
	switch {
	case former == nil:
	case deadlineNow && t.CurrentLease() == former || endedBy(former, state.ReasonLeaseDeadline):
		why = "ended at the task's deadline"
	case expiredNow && t.CurrentLease() == former || endedBy(former, state.ReasonLeaseExpired):
		why = "expired"
	case former.Status == state.ExecSnoozed:
		why = "was snoozed"
	}
	return nil, recs, leaseLost(t.ID, leaseID, why)
}

// endedBy reports whether execution e was aborted for reason.
func endedBy(e *state.Execution, reason string) bool {
	return e.Status == state.ExecAborted && e.Reason == reason
}

// checkLease validates the ids every lease-holder operation names.
func (c *Coordinator) checkLease(taskID, leaseID string) error {
	if err := c.checkID("task_id", taskID, true); err != nil {
		return err
	}
	return c.checkID("lease_id", leaseID, true)
}

// leaseOp runs one lease-holder operation: validate the ids, then
// leaseOpLocked under the mutex, then write and wait.
func (c *Coordinator) leaseOp(ctx context.Context, taskID, leaseID string, action state.Action, decide decideFunc) error {
	if err := c.checkLease(taskID, leaseID); err != nil {
		return err
	}
	if err := c.lock(); err != nil {
		return err
	}
	recs, opErr := c.leaseOpLocked(nil, c.st.Task(taskID), taskID, leaseID, action, c.now(), decide)
	if err := c.writeAndWait(ctx, recs...); err != nil {
		return err
	}
	return opErr
}

// decideFunc chooses the record of an authorized lease-holder operation
// (nil for an answer without one), or refuses it with an error.
type decideFunc func(t *state.Task, cur *state.Execution, now state.Time) (state.Record, error)

// leaseOpLocked decides one lease-holder operation at now on t, the task
// taskID names (nil if there is none): authorize the lease, and let decide
// choose the record. It appends the records to write to recs and returns
// them with the operation's answer. A rejected lease comes with what
// authorize records of it (an expiry, a TaskCancelled): the refusal is
// recorded before it is answered. c.mu must be held.
func (c *Coordinator) leaseOpLocked(recs []state.Record, t *state.Task, taskID, leaseID string, action state.Action, now state.Time, decide decideFunc) ([]state.Record, error) {
	if t == nil {
		return recs, notFound(taskID)
	}
	cur, revs, authErr := c.authorize(t, leaseID, action, now)
	if authErr != nil {
		return append(recs, revs...), authErr
	}
	r, err := decide(t, cur, now)
	if err != nil {
		return recs, err
	}
	recs = append(recs, revs...)
	if r != nil {
		recs = append(recs, r)
	}
	return recs, nil
}

// Start records that the worker began executing (optional).
func (c *Coordinator) Start(ctx context.Context, taskID, leaseID string) error {
	return c.leaseOp(ctx, taskID, leaseID, state.ActionStart, func(t *state.Task, cur *state.Execution, now state.Time) (state.Record, error) {
		switch cur.Status {
		case state.ExecLeased:
			return &state.ExecutionStarted{TaskID: t.ID, LeaseID: leaseID, At: now}, nil
		case state.ExecInProgress:
			return nil, nil // a retried Start
		default:
			return nil, wrongState(t, ": execution is %s; start is only for a new lease", cur.Status)
		}
	})
}

// Heartbeat extends the lease to now + the task's execution window, but
// not beyond the task's deadline, and returns the new expiry. An expired
// lease is never resurrected.
func (c *Coordinator) Heartbeat(ctx context.Context, taskID, leaseID string) (time.Time, error) {
	return c.HeartbeatReport(ctx, taskID, leaseID, nil)
}

// HeartbeatReport is Heartbeat carrying the worker's progress (nil: none),
// which becomes the lease's last report. The report rides on the
// heartbeat's record, so that progress costs the log nothing a heartbeat
// does not; a heartbeat that cannot move the expiry (at the task's
// deadline) still writes one for a report, and a report equal to the
// lease's last one is not written again.
func (c *Coordinator) HeartbeatReport(ctx context.Context, taskID, leaseID string, report *state.Report) (time.Time, error) {
	if report != nil {
		if err := c.cfg.Limits.checkReport(report); err != nil {
			return time.Time{}, err
		}
	}
	var expiry state.Time
	err := c.leaseOp(ctx, taskID, leaseID, state.ActionHeartbeat, func(t *state.Task, cur *state.Execution, now state.Time) (state.Record, error) {
		r := report
		if last, ok := c.st.ReportOf(t); r != nil && ok && last.Report == *r {
			r = nil // the same again
		}
		expiry = c.capExpiry(t, now.Add(t.Window))
		if expiry <= cur.LeaseExpiry {
			// At the task's deadline already, or the clock went back: keep
			// the lease as it is.
			expiry = cur.LeaseExpiry
			if r == nil {
				return nil, nil
			}
		}
		return &state.LeaseExtended{TaskID: t.ID, LeaseID: leaseID, NewLeaseExpiry: expiry, At: now, Report: r}, nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return expiry.Std(), nil
}

// checkReport checks a progress report: a message of at most
// MaxProgressBytes of UTF-8, a percentage of at most 100.
func (l Limits) checkReport(r *state.Report) error {
	switch {
	case len(r.Message) > l.MaxProgressBytes:
		return &LimitError{Field: "progress.message", Size: len(r.Message), Limit: l.MaxProgressBytes}
	case !utf8.ValidString(r.Message):
		return fieldErr("progress.message", "must be valid UTF-8")
	case r.HasPercent && r.Percent > 100:
		return fieldErr("progress.percent", "%d is over 100", r.Percent)
	case !r.HasPercent && r.Percent != 0:
		return fieldErr("progress.percent", "%d is set without HasPercent", r.Percent)
	}
	return nil
}

// Commit records result as the task's one committed result. Only the
// attempt whose commit succeeds may apply external effects. The same lease
// committing again (a network retry) gets the same answer.
func (c *Coordinator) Commit(ctx context.Context, taskID, leaseID string, result []byte) (FencingToken, error) {
	tok, _, err := c.CommitSpawn(ctx, taskID, leaseID, result, nil)
	return tok, err
}

// CommitSpawn is Commit that spawns the tasks spawn describes, in the
// commit's record (docs/design/workflows.md): only the winning commit
// spawns, and a bad task of spawn refuses the commit. It returns the id of
// each spawned request's task; a repeated commit by the same lease answers
// as the first, without ids, and spawns nothing more.
func (c *Coordinator) CommitSpawn(ctx context.Context, taskID, leaseID string, result []byte, spawn []SubmitRequest) (FencingToken, []string, error) {
	if len(result) > c.cfg.Limits.MaxResultBytes {
		return FencingToken{}, nil, &LimitError{Field: "result", Size: len(result), Limit: c.cfg.Limits.MaxResultBytes}
	}
	if tok, ok, err := c.committedBy(ctx, taskID, leaseID); ok || err != nil {
		return tok, nil, err
	}
	var tok FencingToken
	var ids []string
	err := c.leaseOp(ctx, taskID, leaseID, state.ActionCommit, func(t *state.Task, cur *state.Execution, now state.Time) (state.Record, error) {
		if t.CommittedBy != "" {
			// A finalisation lease: the work is committed already.
			return nil, &TaskError{Kind: ErrAlreadyCommitted, TaskID: t.ID, LeaseID: leaseID, CommittedBy: t.CommittedBy,
				msg: fmt.Sprintf("%v: task %s was committed by an earlier attempt; a finalisation lease applies the committed result's effects and calls Complete", ErrAlreadyCommitted, t.ID)}
		}
		tasks, deliver, spawned, err := c.checkSpawn(t, spawn, now.Std())
		if err != nil {
			return nil, err
		}
		tok, ids = FencingToken{TaskID: t.ID, Attempt: cur.Attempt}, spawned
		return &state.TaskCommitted{TaskID: t.ID, LeaseID: leaseID, Result: result, At: now, Spawn: tasks, Deliver: deliver}, nil
	})
	return tok, ids, err
}

// committedBy answers a commit that leaseID already made (a retry) without
// a new record.
func (c *Coordinator) committedBy(ctx context.Context, taskID, leaseID string) (FencingToken, bool, error) {
	if err := c.lock(); err != nil {
		return FencingToken{}, false, err
	}
	t := c.st.Task(taskID)
	if t == nil || t.CommittedBy == "" || t.CommittedBy != leaseID {
		c.mu.Unlock()
		return FencingToken{}, false, nil
	}
	var tok FencingToken
	if e := t.ExecutionOf(leaseID); e != nil {
		tok = FencingToken{TaskID: t.ID, Attempt: e.Attempt}
	}
	last := c.st.LastLSN()
	c.mu.Unlock()
	return tok, true, c.wait(ctx, last)
}

// Complete finishes the task: from LEASED it commits result and finishes in
// one record; from COMMITTED it finalises the committed result (result is
// then ignored). The same lease completing again gets the same answer.
func (c *Coordinator) Complete(ctx context.Context, taskID, leaseID string, result []byte) error {
	_, err := c.CompleteSpawn(ctx, taskID, leaseID, result, nil)
	return err
}

// CompleteSpawn is Complete that, from LEASED, spawns the tasks spawn
// describes in the completion's record, as CommitSpawn does; a task
// committed before spawned at its commit, so a spawn then is refused. It
// returns the id of each spawned request's task (none for a repeated
// completion by the same lease).
func (c *Coordinator) CompleteSpawn(ctx context.Context, taskID, leaseID string, result []byte, spawn []SubmitRequest) ([]string, error) {
	item := []CompleteItem{{TaskID: taskID, LeaseID: leaseID, Result: result, Spawn: spawn}}
	errs, spawned, durable, err := c.completeBatch(ctx, item)
	if err == nil {
		err = durable.Wait(ctx)
	}
	if err != nil {
		return nil, err
	}
	return spawned[0], errs[0]
}

// Snooze ends an uncommitted attempt at the worker's request: the task
// waits until now + delay and runs again without using up an attempt (one
// TaskSnoozed record; the next lease has the same attempt number). It
// returns when the task may run again. Refused for a committed task
// (apply the effects and Complete), for a task snoozed MaxSnoozes times,
// and for one whose deadline the snooze would not leave the minimum
// execution window before.
func (c *Coordinator) Snooze(ctx context.Context, taskID, leaseID string, delay time.Duration, reason string) (time.Time, error) {
	l := c.cfg.Limits
	switch {
	case delay < 0 || delay > l.MaxSnoozeDelay:
		return time.Time{}, fieldErr("delay", "%v is outside 0..%v", delay, l.MaxSnoozeDelay)
	case len(reason) > l.MaxReasonBytes:
		return time.Time{}, &LimitError{Field: "reason", Size: len(reason), Limit: l.MaxReasonBytes}
	}
	var notBefore state.Time
	err := c.leaseOp(ctx, taskID, leaseID, state.ActionSnooze, func(t *state.Task, cur *state.Execution, now state.Time) (state.Record, error) {
		if t.State != state.Leased {
			return nil, wrongState(t, " is %s: its result is committed, so it cannot snooze; apply the committed effects and call Complete", t.State)
		}
		if n := snoozes(t); n >= l.MaxSnoozes {
			return nil, wrongState(t, " was snoozed %d times, the server's limit: complete or fail it", n)
		}
		notBefore = now.Add(delay)
		if d, ok := c.st.DeadlineOf(t); ok && d.Std().Sub(notBefore.Std()) < l.MinWindow {
			return nil, wrongState(t, " must be committed by its deadline %s: a snooze until %s leaves it less than the minimum execution window (%v); snooze less, or fail it",
				d, notBefore, l.MinWindow)
		}
		return &state.TaskSnoozed{TaskID: t.ID, LeaseID: leaseID, NotBefore: notBefore, Reason: reason, At: now}, nil
	})
	if err != nil {
		return time.Time{}, err
	}
	return notBefore.Std(), nil
}

// snoozes counts the executions of t that a snooze ended.
func snoozes(t *state.Task) int {
	n := 0
	for i := range t.Executions {
		if t.Executions[i].Status == state.ExecSnoozed {
			n++
		}
	}
	return n
}

// Fail ends an uncommitted attempt. With attempts left (and permanent
// unset) the task is retried after the policy's backoff; otherwise it is
// FAILED.
func (c *Coordinator) Fail(ctx context.Context, taskID, leaseID, reason string, permanent bool) (FailResult, error) {
	if len(reason) > c.cfg.Limits.MaxReasonBytes {
		return FailResult{}, &LimitError{Field: "reason", Size: len(reason), Limit: c.cfg.Limits.MaxReasonBytes}
	}
	var res FailResult
	err := c.leaseOp(ctx, taskID, leaseID, state.ActionFail, func(t *state.Task, cur *state.Execution, now state.Time) (state.Record, error) {
		if t.State != state.Leased {
			return nil, wrongState(t, " is %s: its result is committed, so it cannot fail; apply the committed effects and call Complete", t.State)
		}
		r := &state.TaskFailed{TaskID: t.ID, LeaseID: leaseID, Reason: reason, Permanent: permanent, At: now}
		res.State = state.Failed
		if !permanent && t.AttemptsLeft() {
			r.RetryAt = now.Add(t.Retry.Backoff(t.AttemptsUsed()))
			res = FailResult{State: state.Waiting, RetryAt: r.RetryAt.Std()}
		}
		return r, nil
	})
	return res, err
}
