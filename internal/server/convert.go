package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func ts(t state.Time) *timestamppb.Timestamp {
	if t == 0 {
		return nil
	}
	return timestamppb.New(t.Std())
}

func stdTS(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// optDuration is an optional API duration: nil for 0.
func optDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// duration converts an optional API duration, rejecting invalid ones with
// the field named.
func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, &coordinator.FieldError{Field: field, Problem: "not a valid duration"}
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, &coordinator.FieldError{Field: field, Problem: fmt.Sprintf("%v is negative", v)}
	}
	return v, nil
}

func timestamp(field string, t *timestamppb.Timestamp) (time.Time, error) {
	if t == nil {
		return time.Time{}, nil
	}
	if err := t.CheckValid(); err != nil {
		return time.Time{}, &coordinator.FieldError{Field: field, Problem: "not a valid timestamp"}
	}
	return t.AsTime(), nil
}

// submitRequest converts an API submit; its errors name fields as a
// single Submit has them (a batch names the item with
// coordinator.ItemError).
func submitRequest(r *tenurev1.SubmitRequest) (coordinator.SubmitRequest, error) {
	out := coordinator.SubmitRequest{
		Namespace: r.GetNamespace(),
		Queue:     r.GetQueue(),
		Payload:   r.GetPayload(),
		RequestID: r.GetRequestId(),
		Priority:  r.GetPriority(),
		Kind:      r.GetKind(),
		Key:       r.GetKey(),
	}
	var err error
	if out.ExecutionWindow, err = duration("execution_window", r.GetExecutionWindow()); err != nil {
		return out, err
	}
	if out.NotBefore, err = timestamp("not_before", r.GetNotBefore()); err != nil {
		return out, err
	}
	if out.Deadline, err = timestamp("deadline", r.GetDeadline()); err != nil {
		return out, err
	}
	if out.Timeout, err = duration("timeout", r.GetTimeout()); err != nil {
		return out, err
	}
	if tc := r.GetTraceContext(); tc != nil {
		out.Trace = state.TraceContext{Parent: tc.GetTraceparent(), State: tc.GetTracestate()}
	}
	if r.GetTimeout() != nil && out.Timeout == 0 {
		return out, &coordinator.FieldError{Field: "timeout", Problem: "0s is not positive: a timeout must be positive (leave it unset for no deadline)"}
	}
	if p := r.GetRetryPolicy(); p != nil {
		out.Retry.MaxAttempts = p.GetMaxAttempts()
		out.Retry.Multiplier = p.GetBackoffMultiplier()
		if out.Retry.InitialBackoff, err = duration("retry_policy.initial_backoff", p.GetInitialBackoff()); err != nil {
			return out, err
		}
		if out.Retry.MaxBackoff, err = duration("retry_policy.max_backoff", p.GetMaxBackoff()); err != nil {
			return out, err
		}
		if out.Retry.Multiplier < 0 {
			return out, &coordinator.FieldError{Field: "retry_policy.backoff_multiplier", Problem: "must not be negative"}
		}
	}
	return out, nil
}

var taskStates = map[state.TaskState]tenurev1.TaskState{
	state.Waiting:   tenurev1.TaskState_TASK_STATE_WAITING,
	state.Leased:    tenurev1.TaskState_TASK_STATE_LEASED,
	state.Committed: tenurev1.TaskState_TASK_STATE_COMMITTED,
	state.Completed: tenurev1.TaskState_TASK_STATE_COMPLETED,
	state.Failed:    tenurev1.TaskState_TASK_STATE_FAILED,
	state.Dead:      tenurev1.TaskState_TASK_STATE_DEAD,
}

// TaskState converts an API task state to the state package's; 0 for
// UNSPECIFIED.
func TaskState(s tenurev1.TaskState) (state.TaskState, bool) {
	if s == tenurev1.TaskState_TASK_STATE_UNSPECIFIED {
		return 0, true
	}
	for k, v := range taskStates {
		if v == s {
			return k, true
		}
	}
	return 0, false
}

var execStatuses = map[state.ExecStatus]tenurev1.ExecutionStatus{
	state.ExecLeased:     tenurev1.ExecutionStatus_EXECUTION_STATUS_LEASED,
	state.ExecInProgress: tenurev1.ExecutionStatus_EXECUTION_STATUS_IN_PROGRESS,
	state.ExecCommitted:  tenurev1.ExecutionStatus_EXECUTION_STATUS_COMMITTED,
	state.ExecDone:       tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE,
	state.ExecAborted:    tenurev1.ExecutionStatus_EXECUTION_STATUS_ABORTED,
	state.ExecSnoozed:    tenurev1.ExecutionStatus_EXECUTION_STATUS_SNOOZED,
}

// progressReport converts a heartbeat's progress; nil for none.
func progressReport(p *tenurev1.Progress) *state.Report {
	if p == nil {
		return nil
	}
	return &state.Report{Message: p.GetMessage(), Percent: p.GetPercent(), HasPercent: p.Percent != nil}
}

// progressMessage is the API's form of a lease's last report; nil for
// none.
func progressMessage(r state.LastReport) *tenurev1.Progress {
	if r.At == 0 {
		return nil
	}
	p := &tenurev1.Progress{Message: r.Message, ReportedAt: ts(r.At)}
	if r.HasPercent {
		p.Percent = &r.Percent
	}
	return p
}

// traceMessage is the API's form of a trace context; nil for none.
func traceMessage(tc state.TraceContext) *tenurev1.TraceContext {
	if tc == (state.TraceContext{}) {
		return nil
	}
	return &tenurev1.TraceContext{Traceparent: tc.Parent, Tracestate: tc.State}
}

func task(v coordinator.TaskView) *tenurev1.Task {
	t := v.Task
	out := &tenurev1.Task{
		TaskId:          t.ID,
		Namespace:       t.Namespace,
		Queue:           t.Queue,
		Payload:         t.Payload,
		State:           taskStates[t.State],
		Attempt:         t.Attempt,
		AttemptsUsed:    t.AttemptsUsed(),
		Priority:        t.Priority,
		RequestId:       t.RequestID,
		ExecutionWindow: durationpb.New(t.Window),
		RetryPolicy: &tenurev1.RetryPolicy{
			MaxAttempts:       t.Retry.MaxAttempts,
			InitialBackoff:    durationpb.New(t.Retry.InitialBackoff),
			MaxBackoff:        durationpb.New(t.Retry.MaxBackoff),
			BackoffMultiplier: t.Retry.Multiplier,
		},
		NotBefore:     ts(t.NotBefore),
		CreatedAt:     ts(t.CreatedAt),
		UpdatedAt:     ts(t.UpdatedAt),
		Result:        t.Result,
		FailureReason: t.FailureReason,
		Deadline:      ts(v.Deadline),
		TraceContext:  traceMessage(v.Trace),
		Progress:      progressMessage(v.Report),
		Kind:          t.Kind,
		Key:           v.Key,
	}
	if cur := t.CurrentLease(); cur != nil {
		out.LeaseId, out.WorkerId, out.LeaseExpiry = cur.LeaseID, cur.WorkerID, ts(cur.LeaseExpiry)
	}
	for _, e := range t.Executions {
		out.Executions = append(out.Executions, &tenurev1.Execution{
			Attempt:     e.Attempt,
			LeaseId:     e.LeaseID,
			WorkerId:    e.WorkerID,
			Status:      execStatuses[e.Status],
			LeasedAt:    ts(e.LeasedAt),
			StartedAt:   ts(e.StartedAt),
			CommittedAt: ts(e.CommittedAt),
			FinishedAt:  ts(e.FinishedAt),
			LeaseExpiry: ts(e.LeaseExpiry),
			Reason:      e.Reason,
		})
	}
	return out
}

// leasedTasks converts the leases of one Lease answer. Their messages, and
// the expiry and window messages every lease has, are allocated together:
// a few allocations per answer rather than three per task; and when the
// answer of ctx's call is held until sent (unaryAnswers), they come from a
// pool and go back to it once it is.
func leasedTasks(ctx context.Context, ls []coordinator.Lease) []*tenurev1.LeasedTask {
	b := new(leasedBuf)
	if h := heldAnswerOf(ctx); h != nil {
		b = leasedBufs.Get().(*leasedBuf)
		h.after = append(h.after, b.release)
	}
	n := len(ls)
	out, msgs, expiries, windows := grown(&b.out, n), grown(&b.msgs, n), grown(&b.expiries, n), grown(&b.windows, n)
	for i, l := range ls {
		m := &msgs[i]
		m.TaskId, m.Namespace, m.Queue, m.Payload, m.Kind, m.Key = l.TaskID, l.Namespace, l.Queue, l.Payload, l.Kind, l.Key
		m.LeaseId, m.Attempt = l.LeaseID, l.Attempt
		if !l.LeaseExpiry.IsZero() {
			expiries[i].Seconds, expiries[i].Nanos = l.LeaseExpiry.Unix(), int32(l.LeaseExpiry.Nanosecond())
			m.LeaseExpiry = &expiries[i]
		}
		windows[i].Seconds, windows[i].Nanos = durationParts(l.Window)
		m.ExecutionWindow = &windows[i]
		m.Committed, m.CommittedResult = l.Committed, l.CommittedResult
		m.Deadline = stdTS(l.Deadline)
		m.TraceContext = traceMessage(l.Trace)
		out[i] = m
	}
	return out
}

// leasedBuf holds the messages of a Lease answer.
type leasedBuf struct {
	out      []*tenurev1.LeasedTask
	msgs     []tenurev1.LeasedTask
	expiries []timestamppb.Timestamp
	windows  []durationpb.Duration
}

var leasedBufs = sync.Pool{New: func() any { return new(leasedBuf) }}

// release clears b (it lets go of the tasks' memory) and puts it back in
// the pool: the answer made of it is sent.
func (b *leasedBuf) release() {
	clear(b.out)
	clear(b.msgs)
	clear(b.expiries)
	clear(b.windows)
	leasedBufs.Put(b)
}

// grown sets *s to n zero elements, in its own array if it is large
// enough, and returns it. The elements of a pooled slice are zero: release
// cleared them.
func grown[T any](s *[]T, n int) []T {
	if cap(*s) < n {
		*s = make([]T, n)
	}
	*s = (*s)[:n]
	return *s
}

// durationParts splits d as durationpb.New does.
func durationParts(d time.Duration) (seconds int64, nanos int32) {
	nanos64 := d.Nanoseconds()
	return nanos64 / 1e9, int32(nanos64 % 1e9)
}

// historyEntry turns a record into the API's summary of it.
// by names who asked, for a history entry's detail.
func by(who string) string {
	if who == "" {
		return ""
	}
	return " (asked by " + who + ")"
}

// later writes the time t of a record at at as the time after it ("30s
// later"): the history's details carry no time of day of their own, so a
// reader sees each in one zone, the record's time's (its at, which a
// client shows in the reader's zone).
func later(at, t state.Time) string {
	d := t.Std().Sub(at.Std())
	switch {
	case d == 0:
		return "at once"
	case d < 0:
		return (-d).Round(time.Millisecond).String() + " earlier"
	}
	return d.Round(time.Millisecond).String() + " later"
}

// historyEntryOf is the line of task id's history for h: historyEntry for
// a record about the task, or what a record about others did to it (the
// record that created it with others, or the end of a task it depended
// on: docs/design/workflows.md).
func historyEntryOf(id string, h coordinator.HistoryEntry) *tenurev1.HistoryEntry {
	if h.Record.Task() == id {
		return historyEntry(h)
	}
	var how string
	var tasks []state.TaskCreated
	switch r := h.Record.(type) {
	case *state.TasksSubmitted:
		how, tasks = fmt.Sprintf("submitted in a batch of %d", len(r.Tasks)), r.Tasks
		if r.Workflow != "" {
			how = fmt.Sprintf("submitted in workflow %s (a batch of %d)", r.Workflow, len(r.Tasks))
		}
	case *state.TaskCommitted:
		how, tasks = "spawned by the commit of task "+r.TaskID, r.Spawn
	case *state.TaskCompleted:
		how, tasks = "spawned by the completion of task "+r.TaskID, r.Spawn
	}
	for i := range tasks {
		if t := &tasks[i]; t.TaskID == id {
			line := historyEntry(coordinator.HistoryEntry{LSN: h.LSN, Record: t})
			line.Type, line.Detail = record.TypeOf(h.Record).String(), how+"; "+line.Detail+dependsOn(t.DependsOn)
			return line
		}
	}
	line := historyEntry(h)
	return &tenurev1.HistoryEntry{Lsn: h.LSN, Type: line.Type, At: line.At, RequestedBy: line.RequestedBy,
		Detail: fmt.Sprintf("task %s, which it depended on (itself or through its dependencies), ended: %s; that released it, or ended it if it failed (dependency_failed)",
			h.Record.Task(), line.Detail)}
}

// dependsOn says what a new task depends on ("" for nothing).
func dependsOn(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	if len(ids) > 5 {
		return fmt.Sprintf(", depends on %s and %d more", strings.Join(ids[:5], ", "), len(ids)-5)
	}
	return ", depends on " + strings.Join(ids, ", ")
}

func historyEntry(h coordinator.HistoryEntry) *tenurev1.HistoryEntry {
	e := &tenurev1.HistoryEntry{Lsn: h.LSN, Type: record.TypeOf(h.Record).String()}
	switch r := h.Record.(type) {
	case *state.TaskCreated:
		e.RequestedBy = r.By
		e.At = ts(r.CreatedAt)
		e.Detail = fmt.Sprintf("queue %s/%s, %d-byte payload, window %v, up to %d attempts", r.Namespace, r.Queue, len(r.Payload), r.ExecutionWindow, r.Retry.MaxAttempts)
		if r.NotBefore != 0 {
			e.Detail += ", not before " + later(r.CreatedAt, r.NotBefore)
		}
		if r.Deadline != 0 {
			e.Detail += ", deadline " + later(r.CreatedAt, r.Deadline)
		}
	case *state.LeaseGranted:
		e.RequestedBy = r.By
		e.At, e.LeaseId, e.WorkerId, e.Attempt = ts(r.GrantedAt), r.LeaseID, r.WorkerID, r.Attempt
		e.Detail = "lease until " + later(r.GrantedAt, r.LeaseExpiry)
	case *state.LeaseExtended:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "lease extended until " + later(r.At, r.NewLeaseExpiry)
		if p := r.Report; p != nil {
			e.Detail += "; progress: " + p.String()
		}
	case *state.LeaseExpired:
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "lease expired"
		if r.RetryAt != 0 {
			e.Detail += "; retry not before " + later(r.At, r.RetryAt)
		}
	case *state.ExecutionStarted:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "execution started"
	case *state.TaskCommitted:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = fmt.Sprintf("committed a %d-byte result", len(r.Result))
	case *state.TaskCompleted:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "completed"
	case *state.TaskFailed:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "failed: " + r.Reason
		switch {
		case r.Permanent:
			e.Detail += " (permanent)"
		case r.RetryAt != 0:
			e.Detail += "; retry not before " + later(r.At, r.RetryAt)
		}
	case *state.TaskSnoozed:
		e.RequestedBy = r.By
		e.At, e.LeaseId, e.Reason = ts(r.At), r.LeaseID, r.Reason
		e.Detail = "snoozed, to run again " + later(r.At, r.NotBefore) + " without using up the attempt"
		if r.Reason != "" {
			e.Detail += ": " + r.Reason
		}
	case *state.TaskCancelled:
		e.RequestedBy = r.By
		e.At, e.LeaseId = ts(r.At), r.LeaseID
		e.Detail = "rejected: " + r.Reason
	case *state.TaskDead:
		e.At, e.RequestedBy, e.Reason = ts(r.At), r.By, r.Reason
		e.Detail = "killed: " + r.Reason + by(r.By)
	case *state.TaskDeadlineExceeded:
		e.At = ts(r.At)
		e.Detail = "failed: its deadline passed before a commit (" + state.ReasonDeadlineExceeded + ")"
	case *state.TaskRetried:
		e.At, e.RequestedBy, e.Reason = ts(r.At), r.By, r.Reason
		e.Detail = "retried by an operator: waiting again, with a fresh budget of attempts" + by(r.By)
		if r.Reason != "" {
			e.Detail += ": " + r.Reason
		}
	case *state.ScheduleFired:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Detail = fmt.Sprintf("submitted by schedule %s of queue %s/%s for its tick at %s", r.Name, r.Namespace, r.Queue, r.Tick)
		if r.Outcome == state.Backfilled {
			e.Detail += " (a backfill" + by(r.By) + ")"
		}
	}
	return e
}
