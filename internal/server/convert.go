package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
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
		DependsOn: r.GetDependsOn(),
	}
	switch r.GetOnDependencyFailure() {
	case tenurev1.DependencyFailure_DEPENDENCY_FAILURE_UNSPECIFIED, tenurev1.DependencyFailure_DEPENDENCY_FAILURE_DEAD:
	case tenurev1.DependencyFailure_DEPENDENCY_FAILURE_RUN:
		out.OnDependencyFailure = state.DepRun
	default:
		return out, &coordinator.FieldError{Field: "on_dependency_failure", Problem: fmt.Sprintf("%d is not a policy: DEAD (the default) or RUN", r.GetOnDependencyFailure())}
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
	state.Blocked:   tenurev1.TaskState_TASK_STATE_BLOCKED,
}

var edgeStates = [...]tenurev1.DependencyState{
	state.EdgePending:   tenurev1.DependencyState_DEPENDENCY_STATE_PENDING,
	state.EdgeCompleted: tenurev1.DependencyState_DEPENDENCY_STATE_COMPLETED,
	state.EdgeFailed:    tenurev1.DependencyState_DEPENDENCY_STATE_FAILED,
}

// depFailureMessage is the API's form of what a failed dependency does.
func depFailureMessage(p state.DepPolicy) tenurev1.DependencyFailure {
	if p == state.DepRun {
		return tenurev1.DependencyFailure_DEPENDENCY_FAILURE_RUN
	}
	return tenurev1.DependencyFailure_DEPENDENCY_FAILURE_DEAD
}

// graphFields sets what out, a task, has of the graph.
func graphFields(out *tenurev1.Task, g state.GraphInfo) {
	out.WorkflowId, out.SpawnedBy = g.Workflow, g.Parent
	if len(g.Edges) == 0 {
		return
	}
	out.OnDependencyFailure = depFailureMessage(g.Policy)
	out.Dependencies = make([]*tenurev1.Dependency, len(g.Edges))
	for i, e := range g.Edges {
		out.Dependencies[i] = &tenurev1.Dependency{TaskId: e.ID, State: edgeStates[min(int(e.State), len(edgeStates)-1)]}
	}
}

// dependencyResults converts what a lease says of its task's dependencies.
func dependencyResults(ds []coordinator.DependencyResult) []*tenurev1.DependencyResult {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*tenurev1.DependencyResult, len(ds))
	for i, d := range ds {
		out[i] = &tenurev1.DependencyResult{TaskId: d.TaskID, State: taskStates[d.State], Result: d.Result, ResultOmitted: d.Omitted}
	}
	return out
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
		RetryPolicy:     retryPolicyMessage(t.Retry),
		NotBefore:       ts(t.NotBefore),
		CreatedAt:       ts(t.CreatedAt),
		UpdatedAt:       ts(t.UpdatedAt),
		Result:          t.Result,
		FailureReason:   t.FailureReason,
		Deadline:        ts(v.Deadline),
		TraceContext:    traceMessage(v.Trace),
		Progress:        progressMessage(v.Report),
		Kind:            t.Kind,
		Key:             v.Key,
	}
	graphFields(out, v.Graph)
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
		m.WorkflowId, m.Dependencies = l.Workflow, dependencyResults(l.Dependencies)
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
