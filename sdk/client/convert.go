package client

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The conversions between the API's messages and the SDK's types. Byte
// slices are shared with the decoded message, not copied: the message is
// not used after the conversion.

// timeOf returns ts as a time, zero when the server did not set it.
func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func taskOf(p *tenurev1.Task) Task {
	t := Task{
		ID:              p.GetTaskId(),
		Namespace:       p.GetNamespace(),
		Queue:           p.GetQueue(),
		Kind:            p.GetKind(),
		Key:             p.GetKey(),
		Payload:         p.GetPayload(),
		State:           TaskState(p.GetState()),
		Attempt:         p.GetAttempt(),
		AttemptsUsed:    p.GetAttemptsUsed(),
		Priority:        p.GetPriority(),
		RequestID:       p.GetRequestId(),
		ExecutionWindow: p.GetExecutionWindow().AsDuration(),
		RetryPolicy:     retryPolicyOf(p.GetRetryPolicy()),
		NotBefore:       timeOf(p.GetNotBefore()),
		CreatedAt:       timeOf(p.GetCreatedAt()),
		UpdatedAt:       timeOf(p.GetUpdatedAt()),
		Result:          p.GetResult(),
		FailureReason:   p.GetFailureReason(),
		LeaseID:         p.GetLeaseId(),
		WorkerID:        p.GetWorkerId(),
		LeaseExpiry:     timeOf(p.GetLeaseExpiry()),
		Deadline:        timeOf(p.GetDeadline()),
		TraceContext:    traceContextFrom(p.GetTraceContext()),
	}
	if pr := p.GetProgress(); pr != nil {
		t.Progress = &Progress{Message: pr.GetMessage(), Percent: pr.GetPercent(), HasPercent: pr.Percent != nil, ReportedAt: timeOf(pr.GetReportedAt())}
	}
	t.WorkflowID, t.SpawnedBy, t.OnDependencyFailure = p.GetWorkflowId(), p.GetSpawnedBy(), DependencyFailure(p.GetOnDependencyFailure())
	for _, d := range p.GetDependencies() {
		t.Dependencies = append(t.Dependencies, Dependency{TaskID: d.GetTaskId(), State: DependencyState(d.GetState())})
	}
	if ex := p.GetExecutions(); len(ex) > 0 {
		t.Executions = make([]Execution, len(ex))
		for i, e := range ex {
			t.Executions[i] = Execution{
				Attempt:     e.GetAttempt(),
				LeaseID:     e.GetLeaseId(),
				WorkerID:    e.GetWorkerId(),
				Status:      ExecutionStatus(e.GetStatus()),
				LeasedAt:    timeOf(e.GetLeasedAt()),
				StartedAt:   timeOf(e.GetStartedAt()),
				CommittedAt: timeOf(e.GetCommittedAt()),
				FinishedAt:  timeOf(e.GetFinishedAt()),
				LeaseExpiry: timeOf(e.GetLeaseExpiry()),
				Reason:      e.GetReason(),
			}
		}
	}
	return t
}

// traceContextFrom is the trace context an answer carries (traceContextOf
// makes the one a submit sends).
func traceContextFrom(p *tenurev1.TraceContext) TraceContext {
	return TraceContext{Traceparent: p.GetTraceparent(), Tracestate: p.GetTracestate()}
}

// allOf converts every message of ps with of: nil for none.
func allOf[P, T any](ps []P, of func(P) T) []T {
	if len(ps) == 0 {
		return nil
	}
	out := make([]T, len(ps))
	for i, p := range ps {
		out[i] = of(p)
	}
	return out
}

// taskPtr converts p, or returns nil when the answer carried no task.
func taskPtr(p *tenurev1.Task) *Task {
	if p == nil {
		return nil
	}
	t := taskOf(p)
	return &t
}

func leasedTaskOf(p *tenurev1.LeasedTask) LeasedTask {
	var deps []DependencyResult
	for _, d := range p.GetDependencies() {
		deps = append(deps, DependencyResult{TaskID: d.GetTaskId(), State: TaskState(d.GetState()), Result: d.GetResult(), ResultOmitted: d.GetResultOmitted()})
	}
	return LeasedTask{
		WorkflowID:      p.GetWorkflowId(),
		Dependencies:    deps,
		ID:              p.GetTaskId(),
		Namespace:       p.GetNamespace(),
		Queue:           p.GetQueue(),
		Kind:            p.GetKind(),
		Key:             p.GetKey(),
		LeaseID:         p.GetLeaseId(),
		Payload:         p.GetPayload(),
		Attempt:         p.GetAttempt(),
		LeaseExpiry:     timeOf(p.GetLeaseExpiry()),
		ExecutionWindow: p.GetExecutionWindow().AsDuration(),
		Committed:       p.GetCommitted(),
		CommittedResult: p.GetCommittedResult(),
		Deadline:        timeOf(p.GetDeadline()),
		TraceContext:    traceContextFrom(p.GetTraceContext()),
	}
}

func historyEntryOf(p *tenurev1.HistoryEntry) HistoryEntry {
	return HistoryEntry{
		LSN:      p.GetLsn(),
		Type:     p.GetType(),
		At:       timeOf(p.GetAt()),
		LeaseID:  p.GetLeaseId(),
		WorkerID: p.GetWorkerId(),
		Attempt:  p.GetAttempt(),
		Detail:   p.GetDetail(),

		RequestedBy: p.GetRequestedBy(),
		Reason:      p.GetReason(),
	}
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b[:])
}

// fillSubmit sets the fields of out, a new message, from r (a batch fills
// the messages of one slice rather than allocating one per task): a typed
// task's kind, arguments (encoded by codec) and defaults; a random request id when r
// has none, so that the client's own retries of the call never create a
// second task. Its error names the field as op's request has it (field
// is "" for Submit, "requests[i]." for SubmitBatch).
func fillSubmit(codec Codec, op, field string, r *SubmitRequest, out *tenurev1.SubmitRequest) error {
	if r.Args != nil {
		if err := typed(codec, op, field, r); err != nil {
			return err
		}
	}
	out.Namespace, out.Queue, out.Kind, out.Payload, out.RequestId, out.Priority = r.Namespace, r.Queue, r.Kind, r.Payload, r.RequestID, r.Priority
	out.DependsOn, out.OnDependencyFailure = r.DependsOn, tenurev1.DependencyFailure(r.OnDependencyFailure)
	out.Key = r.Key
	if out.RequestId == "" {
		out.RequestId = newRequestID()
	}
	out.ExecutionWindow = optDuration(r.ExecutionWindow)
	out.RetryPolicy = r.Retry.proto()
	out.NotBefore = optTime(r.NotBefore)
	out.Deadline = optTime(r.Deadline)
	if r.Timeout != 0 {
		out.Timeout = durationpb.New(r.Timeout)
	}
	return nil
}

// typed sets r's kind and payload from r.Args, and its unset fields from
// the type's SubmitOptions. r is the caller's copy: Args stays set.
func typed(codec Codec, op, field string, r *SubmitRequest) error {
	d, err := template(codec, op, field, r.Args, &r.Kind, &r.Payload)
	if err != nil {
		return err
	}
	d.fill(&r.Namespace, &r.Queue, &r.ExecutionWindow, &r.Retry, &r.Priority)
	if r.Deadline.IsZero() && r.Timeout == 0 {
		r.Timeout = d.Timeout
	}
	if r.Queue == "" {
		return invalid(op, field+"Queue", fmt.Sprintf("%sQueue is empty: name the queue, or give %T a SubmitOptions method that does", field, r.Args))
	}
	return nil
}

// fill sets each of the fields of a submit or a schedule that is unset
// to d's value.
func (d SubmitOptions) fill(namespace, queue *string, window *time.Duration, retry **RetryPolicy, priority *int32) {
	*namespace = cmp.Or(*namespace, d.Namespace)
	*queue = cmp.Or(*queue, d.Queue)
	*window = cmp.Or(*window, d.ExecutionWindow)
	if *retry == nil {
		*retry = d.Retry
	}
	*priority = cmp.Or(*priority, d.Priority)
}

// template sets *kind and *payload from a typed task's args, encoded by
// codec, and returns its type's SubmitOptions (zero without them), for a
// submit or a schedule of op; field prefixes the request's field names.
func template(codec Codec, op, field string, args Args, kind *string, payload *[]byte) (SubmitOptions, error) {
	if *kind != "" || *payload != nil {
		return SubmitOptions{}, invalid(op, field+"Args", fmt.Sprintf("%sArgs (%T) is set with %sKind or %sPayload: a typed task's kind and payload come from its Args; set one or the other", field, args, field, field))
	}
	*kind = args.Kind()
	if *kind == "" {
		return SubmitOptions{}, invalid(op, field+"Args", fmt.Sprintf("%T.Kind() is empty: a typed task's Kind names its kind of work, e.g. \"send_email\"", args))
	}
	p, err := codec.Marshal(args)
	if err != nil {
		return SubmitOptions{}, invalid(op, field+"Args", fmt.Sprintf("encoding %sArgs (%T): %v", field, args, err))
	}
	*payload = p
	if o, ok := args.(ArgsWithOptions); ok {
		return o.SubmitOptions(), nil
	}
	return SubmitOptions{}, nil
}

func retryPolicyOf(p *tenurev1.RetryPolicy) RetryPolicy {
	return RetryPolicy{
		MaxAttempts:    p.GetMaxAttempts(),
		InitialBackoff: p.GetInitialBackoff().AsDuration(),
		MaxBackoff:     p.GetMaxBackoff().AsDuration(),
		Multiplier:     p.GetBackoffMultiplier(),
	}
}

// proto returns the API's retry policy for p (nil: the server's default),
// zero durations left unset.
func (p *RetryPolicy) proto() *tenurev1.RetryPolicy {
	if p == nil {
		return nil
	}
	out := &tenurev1.RetryPolicy{MaxAttempts: p.MaxAttempts, BackoffMultiplier: p.Multiplier}
	out.InitialBackoff = optDuration(p.InitialBackoff)
	out.MaxBackoff = optDuration(p.MaxBackoff)
	return out
}

// optDuration is d as the API's optional duration: nil for 0.
func optDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// optTime is t as the API's optional timestamp: nil for the zero time.
func optTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func taskCountsOf(c *tenurev1.TaskCounts) TaskCounts {
	return TaskCounts{Waiting: c.GetWaiting(), Leased: c.GetLeased(), Committed: c.GetCommitted(),
		Completed: c.GetCompleted(), Failed: c.GetFailed(), Dead: c.GetDead(), Blocked: c.GetBlocked()}
}

func queueOf(p *tenurev1.Queue) Queue {
	c := p.GetTasks()
	q := Queue{
		Namespace:         p.GetNamespace(),
		Queue:             p.GetQueue(),
		Tasks:             taskCountsOf(c),
		OldestWaitingAge:  p.GetOldestWaitingAge().AsDuration(),
		ActiveLeases:      p.GetActiveLeases(),
		Paused:            p.GetPaused(),
		LastMinute:        queueEventsOf(p.GetLastMinute()),
		Last5Minutes:      queueEventsOf(p.GetLast_5Minutes()),
		LastHour:          queueEventsOf(p.GetLastHour()),
		Partitions:        p.GetPartitions(),
		PausedPartitions:  p.GetPausedPartitions(),
		LimitedPartitions: p.GetLimitedPartitions(),
	}
	q.Pause = pauseOf(p.GetPause())
	if l := p.GetLimits(); l != nil {
		q.Limits = &QueueLimits{MaxConcurrency: l.GetMaxConcurrency(), Rate: l.GetRate(), Burst: l.GetBurst(),
			RequestedBy: l.GetRequestedBy(), Reason: l.GetReason(), SetAt: timeOf(l.GetSetAt()),
			KeyMaxConcurrency: l.GetKeyMaxConcurrency(), KeyRate: l.GetKeyRate(), KeyBurst: l.GetKeyBurst(),
			KeyOrdered: l.GetKeyOrdered(), Fair: l.GetFair()}
		for _, w := range l.GetKeyWeights() {
			q.KeyWeights = append(q.KeyWeights, KeyWeight{Key: w.GetKey(), Weight: w.GetWeight()})
		}
	}
	if k := p.GetKeys(); k != nil {
		q.Keys = &QueueKeys{Keys: k.GetKeys(), HeldByConcurrency: k.GetHeldByConcurrency(), HeldByRate: k.GetHeldByRate(),
			HeldByOrder: k.GetHeldByOrder()}
		for _, t := range k.GetTop() {
			q.Keys.Top = append(q.Keys.Top, KeySummary{Key: t.GetKey(), Waiting: t.GetWaiting(), Leased: t.GetLeased(), Held: t.GetHeld()})
		}
	}
	q.PerMinute = allOf(p.GetPerMinute(), queueEventsOf)
	return q
}

// pauseOf converts a pause; nil for none.
func pauseOf(p *tenurev1.QueuePause) *QueuePause {
	if p == nil {
		return nil
	}
	return &QueuePause{RequestedBy: p.GetRequestedBy(), Reason: p.GetReason(), PausedAt: timeOf(p.GetPausedAt())}
}

func queueEventsOf(p *tenurev1.QueueEvents) QueueEvents {
	return QueueEvents{Submitted: p.GetSubmitted(), Completed: p.GetCompleted(), Failed: p.GetFailed(), LeaseExpired: p.GetLeaseExpired()}
}

// proto returns the API's filter for f.
func (f TaskFilter) proto() *tenurev1.TaskFilter {
	return &tenurev1.TaskFilter{Namespace: f.Namespace, Queue: f.Queue, State: tenurev1.TaskState(f.State), All: f.All,
		CreatedBefore: optTime(f.CreatedBefore)}
}

// spawnMessages converts the tasks a commit or completion spawns, as a
// SubmitBatch converts its requests (field names them: "Spawn[i].").
func spawnMessages(codec Codec, op string, rs []SubmitRequest) ([]*tenurev1.SubmitRequest, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	out := make([]*tenurev1.SubmitRequest, len(rs))
	for i := range rs {
		r := rs[i] // the caller's request stays as it was
		out[i] = new(tenurev1.SubmitRequest)
		if err := fillSubmit(codec, op, fmt.Sprintf("Spawn[%d].", i), &r, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
