package snapshot

import (
	"time"

	"github.com/tenurehq/tenure/internal/snapshot/snapshotpb"
	"github.com/tenurehq/tenure/internal/state"
)

// TaskMessage returns the snapshot message of t, with what the state keeps
// beside it: every field of the task. Tools print it (as protojson) to
// show a task.
func TaskMessage(t *state.Task, beside state.Beside) *snapshotpb.TaskSnapshot {
	m := &snapshotpb.TaskSnapshot{
		TaskId:               t.ID,
		Namespace:            t.Namespace,
		Queue:                t.Queue,
		Payload:              t.Payload,
		ExecutionWindowNanos: int64(t.Window),
		RequestId:            t.RequestID,
		Priority:             t.Priority,
		NotBeforeUnixNanos:   int64(t.NotBefore),
		CreatedAtUnixNanos:   int64(t.CreatedAt),
		UpdatedAtUnixNanos:   int64(t.UpdatedAt),
		CreatedLsn:           t.CreatedLSN,
		State:                snapshotpb.TaskState(t.State),
		Attempt:              t.Attempt,
		AttemptBase:          t.AttemptBase,
		Result:               t.Result,
		CommittedBy:          t.CommittedBy,
		FailureReason:        t.FailureReason,
		Lsns:                 t.LSNs(),
		LeaseCurrent:         t.LeaseIndex() >= 0,
		DeadlineUnixNanos:    int64(beside.Deadline),
		Traceparent:          beside.Trace.Parent,
		Tracestate:           beside.Trace.State,
		Kind:                 t.Kind,
		Key:                  beside.Key,
	}
	if r := beside.Report; r.At != 0 {
		m.Progress = &snapshotpb.ProgressSnapshot{Message: r.Message, Percent: r.Percent, HasPercent: r.HasPercent, AtUnixNanos: int64(r.At)}
	}
	if g := beside.Graph; !g.IsZero() {
		m.WorkflowId, m.OnDependencyFailure, m.SpawnedBy, m.Seq = g.Workflow, uint32(g.Policy), g.Parent, uint32(g.Seq)
		for i, e := range g.Edges {
			d := &snapshotpb.DependencySnapshot{TaskId: e.ID, State: uint32(e.State), Remote: e.Remote}
			if i < len(g.Results) {
				d.Result = g.Results[i]
			}
			m.Dependencies = append(m.Dependencies, d)
		}
	}
	m.RetryPolicy = retryMessage(t.Retry)
	if len(t.Executions) > 0 {
		m.Executions = make([]*snapshotpb.ExecutionSnapshot, len(t.Executions))
		for i, e := range t.Executions {
			m.Executions[i] = &snapshotpb.ExecutionSnapshot{
				Attempt:              e.Attempt,
				LeaseId:              e.LeaseID,
				WorkerId:             e.WorkerID,
				Status:               snapshotpb.ExecutionStatus(e.Status),
				Finalize:             e.Finalize,
				LeasedAtUnixNanos:    int64(e.LeasedAt),
				LeaseExpiryUnixNanos: int64(e.LeaseExpiry),
				StartedAtUnixNanos:   int64(e.StartedAt),
				CommittedAtUnixNanos: int64(e.CommittedAt),
				FinishedAtUnixNanos:  int64(e.FinishedAt),
				Reason:               e.Reason,
				RefusedActions:       uint32(e.Refused),
			}
		}
	}
	return m
}

// taskExtra is what state.Loader takes with a task besides the task
// itself: the index of its current lease in its executions (-1 for none)
// and what the state keeps beside it.
type taskExtra struct {
	lease  int
	beside state.Beside
}

// taskFromMessage is the inverse of TaskMessage. It returns the index of the
// current lease and what is kept beside the task separately, for
// state.Loader. Byte fields
// are taken over from m (proto.Unmarshal copied them out of the file
// buffer). Enum values are copied as numbers; the Loader rejects unknown
// ones.
func taskFromMessage(m *snapshotpb.TaskSnapshot) (*state.Task, taskExtra) {
	t := &state.Task{
		ID:         m.TaskId,
		QueueKey:   &state.QueueKey{Namespace: m.Namespace, Queue: m.Queue},
		Payload:    noEmpty(m.Payload),
		Policy:     &state.Policy{Kind: m.Kind, Window: time.Duration(m.ExecutionWindowNanos), Retry: retryFromMessage(m.RetryPolicy)},
		RequestID:  m.RequestId,
		Priority:   m.Priority,
		NotBefore:  state.Time(m.NotBeforeUnixNanos),
		CreatedAt:  state.Time(m.CreatedAtUnixNanos),
		UpdatedAt:  state.Time(m.UpdatedAtUnixNanos),
		CreatedLSN: m.CreatedLsn,
		State:      clampState(m.State),
		Attempt:    m.Attempt,
		Progress: &state.Progress{
			AttemptBase:   m.AttemptBase,
			Result:        noEmpty(m.Result),
			CommittedBy:   m.CommittedBy,
			FailureReason: m.FailureReason,
			History:       m.Lsns,
		},
	}
	if len(m.Executions) > 0 {
		t.Executions = make([]state.Execution, len(m.Executions))
		for i, e := range m.Executions {
			t.Executions[i] = state.Execution{
				Attempt:     e.Attempt,
				LeaseID:     e.LeaseId,
				WorkerID:    e.WorkerId,
				Status:      clampStatus(e.Status),
				Finalize:    e.Finalize,
				LeasedAt:    state.Time(e.LeasedAtUnixNanos),
				LeaseExpiry: state.Time(e.LeaseExpiryUnixNanos),
				StartedAt:   state.Time(e.StartedAtUnixNanos),
				CommittedAt: state.Time(e.CommittedAtUnixNanos),
				FinishedAt:  state.Time(e.FinishedAtUnixNanos),
				Reason:      e.Reason,
				Refused:     clampRefused(e.RefusedActions),
			}
		}
	}
	t.Progress = orNil(t.Progress)
	x := taskExtra{lease: leaseIndex(len(m.Executions), m.LeaseCurrent), beside: state.Beside{
		Deadline: state.Time(m.DeadlineUnixNanos),
		Trace:    state.TraceContext{Parent: m.Traceparent, State: m.Tracestate},
		Key:      m.Key,
	}}
	if p := m.Progress; p != nil {
		x.beside.Report = state.LastReport{Report: state.Report{Message: p.Message, Percent: p.Percent, HasPercent: p.HasPercent},
			At: state.Time(p.AtUnixNanos)}
	}
	x.beside.Graph = state.GraphInfo{Workflow: m.WorkflowId, Policy: state.DepPolicy(min(m.OnDependencyFailure, 255)),
		Parent: m.SpawnedBy, Seq: uint16(min(m.Seq, 0xffff))}
	for i, e := range m.Dependencies {
		x.beside.Graph.Edges = append(x.beside.Graph.Edges, state.Edge{ID: e.TaskId, State: state.EdgeState(min(e.State, 255)), Remote: e.Remote})
		if len(e.Result) > 0 {
			if x.beside.Graph.Results == nil {
				x.beside.Graph.Results = make([][]byte, len(m.Dependencies))
			}
			x.beside.Graph.Results[i] = e.Result
		}
	}
	return t, x
}

// workflowMessage and workflowFromMessage convert what a snapshot keeps
// of a workflow.
func workflowMessage(w state.WorkflowImage) *snapshotpb.WorkflowSnapshot {
	m := &snapshotpb.WorkflowSnapshot{Namespace: w.Key.Namespace, WorkflowId: w.Key.ID, CreatedAtUnixNanos: int64(w.CreatedAt)}
	if c := w.Cancelled; c != nil {
		m.Cancelled = &snapshotpb.QueuePause{By: c.By, Reason: c.Reason, AtUnixNanos: int64(c.At)}
	}
	return m
}

func workflowFromMessage(m *snapshotpb.WorkflowSnapshot) state.WorkflowImage {
	w := state.WorkflowImage{Key: state.WorkflowKey{Namespace: m.Namespace, ID: m.WorkflowId}, CreatedAt: state.Time(m.CreatedAtUnixNanos)}
	if c := m.Cancelled; c != nil {
		w.Cancelled = &state.Pause{By: c.By, Reason: c.Reason, At: state.Time(c.AtUnixNanos)}
	}
	return w
}

// orNil returns p, or nil if it holds nothing (the Loader shares one empty
// Progress between the tasks that have none).
func orNil(p *state.Progress) *state.Progress {
	if len(p.Executions) == 0 && p.Result == nil && p.CommittedBy == "" && p.FailureReason == "" && p.AttemptBase == 0 && len(p.History) == 0 {
		return nil
	}
	return p
}

// leaseIndex is the index of the current lease of a task with execs
// executions, given whether its last execution holds one.
func leaseIndex(execs int, current bool) int {
	if !current {
		return -1
	}
	if execs == 0 {
		// Current lease without executions: let the Loader say so.
		return 0
	}
	return execs - 1
}

// clampState and clampStatus map out-of-range enum numbers (a proto3 enum
// accepts any int32) to a value the Loader rejects, instead of letting them
// wrap around in the uint8 conversion.
func clampState(s snapshotpb.TaskState) state.TaskState {
	if s < 0 || s > 255 {
		return 255
	}
	return state.TaskState(s)
}

func clampStatus(s snapshotpb.ExecutionStatus) state.ExecStatus {
	if s < 0 || s > 255 {
		return 255
	}
	return state.ExecStatus(s)
}

// clampRefused maps a set of refused actions wider than state.ActionSet to
// one the Loader rejects (it has bits of no action), instead of dropping the
// high bits.
func clampRefused(v uint32) state.ActionSet {
	if v > 0xff {
		return 0xff
	}
	return state.ActionSet(v)
}

func noEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// queueMessage returns the snapshot message of a queue's image.
func queueMessage(q state.QueueImage) *snapshotpb.QueueSnapshot {
	m := &snapshotpb.QueueSnapshot{Namespace: q.Key.Namespace, Queue: q.Key.Queue,
		Fine: bucketMessages(q.Fine), Coarse: bucketMessages(q.Coarse)}
	if p := q.Paused; p != nil {
		m.Paused = &snapshotpb.QueuePause{By: p.By, Reason: p.Reason, AtUnixNanos: int64(p.At)}
	}
	if l := q.Limits; l != nil {
		m.Limits = &snapshotpb.QueueLimits{
			MaxConcurrency:      l.MaxConcurrency,
			RateMilli:           l.RateMilli,
			Burst:               l.Burst,
			QueueMaxConcurrency: l.Queue.MaxConcurrency,
			QueueRateMilli:      l.Queue.RateMilli,
			QueueBurst:          l.Queue.Burst,
			Partitions:          l.Partitions,
			By:                  l.By,
			Reason:              l.Reason,
			AtUnixNanos:         int64(l.At),
			BucketLevel:         q.Bucket.Level,
			RefilledUnixNanos:   int64(q.Bucket.Refilled),
			KeyMaxConcurrency:   l.Keys.MaxConcurrency,
			KeyRateMilli:        l.Keys.RateMilli,
			KeyBurst:            l.Keys.Burst,
			KeyOrdered:          l.Keys.Ordered,
			Fair:                l.Keys.Fair,
		}
	}
	if k := q.Keys; k != nil {
		m.Keys = &snapshotpb.QueueKeys{Vt: k.VT, UnkeyedPass: k.Unkeyed, States: make([]*snapshotpb.KeySnapshot, len(k.States))}
		for _, w := range k.Weights {
			m.Keys.Weights = append(m.Keys.Weights, &snapshotpb.KeyWeight{Key: w.Key, Weight: w.Weight})
		}
		for i, ks := range k.States {
			m.Keys.States[i] = &snapshotpb.KeySnapshot{Name: ks.Name, BucketLevel: ks.Bucket.Level,
				RefilledUnixNanos: int64(ks.Bucket.Refilled), Pass: ks.Pass, Seq: ks.Seq}
		}
	}
	return m
}

// queueFromMessage is the inverse of queueMessage; the Loader checks what
// it gives.
func queueFromMessage(m *snapshotpb.QueueSnapshot) state.QueueImage {
	q := state.QueueImage{Key: state.QueueKey{Namespace: m.Namespace, Queue: m.Queue},
		Fine: bucketsFromMessages(m.Fine), Coarse: bucketsFromMessages(m.Coarse)}
	if p := m.Paused; p != nil {
		q.Paused = &state.Pause{By: p.By, Reason: p.Reason, At: state.Time(p.AtUnixNanos)}
	}
	if l := m.Limits; l != nil {
		q.Limits = &state.QueueLimits{
			Limits:     state.Limits{MaxConcurrency: l.MaxConcurrency, RateMilli: l.RateMilli, Burst: l.Burst},
			Queue:      state.Limits{MaxConcurrency: l.QueueMaxConcurrency, RateMilli: l.QueueRateMilli, Burst: l.QueueBurst},
			Partitions: l.Partitions,
			By:         l.By,
			Reason:     l.Reason,
			At:         state.Time(l.AtUnixNanos),
			Keys: state.KeyLimits{MaxConcurrency: l.KeyMaxConcurrency, RateMilli: l.KeyRateMilli, Burst: l.KeyBurst,
				Ordered: l.KeyOrdered, Fair: l.Fair},
		}
		q.Bucket = state.TokenBucket{Level: l.BucketLevel, Refilled: state.Time(l.RefilledUnixNanos)}
	}
	if k := m.Keys; k != nil {
		q.Keys = &state.KeysImage{VT: k.Vt, Unkeyed: k.UnkeyedPass, States: make([]state.KeyImage, len(k.States))}
		for _, w := range k.Weights {
			q.Keys.Weights = append(q.Keys.Weights, state.KeyWeight{Key: w.GetKey(), Weight: w.GetWeight()})
		}
		for i, ks := range k.States {
			q.Keys.States[i] = state.KeyImage{Name: ks.Name, Bucket: state.TokenBucket{Level: ks.BucketLevel, Refilled: state.Time(ks.RefilledUnixNanos)},
				Pass: ks.Pass, Seq: ks.Seq}
		}
	}
	return q
}

func bucketMessages(bs []state.Bucket) []*snapshotpb.EventBucket {
	var out []*snapshotpb.EventBucket
	for _, b := range bs {
		out = append(out, &snapshotpb.EventBucket{N: b.N,
			Submitted: b.C[state.EventSubmitted], Completed: b.C[state.EventCompleted],
			Failed: b.C[state.EventFailed], LeaseExpired: b.C[state.EventLeaseExpired]})
	}
	return out
}

func bucketsFromMessages(ms []*snapshotpb.EventBucket) []state.Bucket {
	var out []state.Bucket
	for _, m := range ms {
		var b state.Bucket
		b.N = m.N
		b.C[state.EventSubmitted], b.C[state.EventCompleted] = m.Submitted, m.Completed
		b.C[state.EventFailed], b.C[state.EventLeaseExpired] = m.Failed, m.LeaseExpired
		out = append(out, b)
	}
	return out
}

// retryMessage and retryFromMessage convert a retry policy; a zero one is
// no message.
func retryMessage(p state.RetryPolicy) *snapshotpb.RetryPolicy {
	if p == (state.RetryPolicy{}) {
		return nil
	}
	return &snapshotpb.RetryPolicy{
		MaxAttempts:         p.MaxAttempts,
		InitialBackoffNanos: int64(p.InitialBackoff),
		MaxBackoffNanos:     int64(p.MaxBackoff),
		Multiplier:          p.Multiplier,
	}
}

func retryFromMessage(r *snapshotpb.RetryPolicy) state.RetryPolicy {
	if r == nil {
		return state.RetryPolicy{}
	}
	return state.RetryPolicy{
		MaxAttempts:    r.MaxAttempts,
		InitialBackoff: time.Duration(r.InitialBackoffNanos),
		MaxBackoff:     time.Duration(r.MaxBackoffNanos),
		Multiplier:     r.Multiplier,
	}
}

// scheduleMessage returns the snapshot message of a schedule.
func scheduleMessage(sc *state.Schedule) *snapshotpb.ScheduleSnapshot {
	d := &sc.Def
	m := &snapshotpb.ScheduleSnapshot{
		Namespace: sc.Key.Namespace, Queue: sc.Key.Queue, Name: sc.Key.Name,
		Cron: d.Cron, TimeZone: d.TimeZone, Overlap: uint32(d.Overlap), CatchUpNanos: int64(d.CatchUp),
		Payload: d.Payload, ExecutionWindowNanos: int64(d.Window), RetryPolicy: retryMessage(d.Retry), Priority: d.Priority, Kind: d.Kind,
		NextUnixNanos: int64(sc.Next), HeldTickUnixNanos: int64(sc.HeldTick), LastTaskId: sc.LastTask,
		CreatedAtUnixNanos: int64(sc.CreatedAt), CreatedBy: sc.CreatedBy, UpdatedAtUnixNanos: int64(sc.UpdatedAt),
	}
	if p := sc.Paused; p != nil {
		m.Paused = &snapshotpb.QueuePause{By: p.By, Reason: p.Reason, AtUnixNanos: int64(p.At)}
	}
	for _, f := range sc.Recent {
		m.Recent = append(m.Recent, &snapshotpb.ScheduleFire{TickUnixNanos: int64(f.Tick), UntilUnixNanos: int64(f.Until),
			TaskId: f.TaskID, Outcome: uint32(f.Outcome), Reason: f.Reason, AtUnixNanos: int64(f.At)})
	}
	return m
}

// scheduleFromMessage is the inverse of scheduleMessage; the Loader checks
// what it gives.
func scheduleFromMessage(m *snapshotpb.ScheduleSnapshot) *state.Schedule {
	sc := &state.Schedule{
		Key: state.ScheduleKey{Namespace: m.Namespace, Queue: m.Queue, Name: m.Name},
		Def: state.ScheduleDef{Cron: m.Cron, TimeZone: m.TimeZone, Overlap: state.Overlap(min(m.Overlap, 255)),
			CatchUp: time.Duration(m.CatchUpNanos), Payload: noEmpty(m.Payload), Window: time.Duration(m.ExecutionWindowNanos),
			Retry: retryFromMessage(m.RetryPolicy), Priority: m.Priority, Kind: m.Kind},
		Next: state.Time(m.NextUnixNanos), HeldTick: state.Time(m.HeldTickUnixNanos), LastTask: m.LastTaskId,
		CreatedAt: state.Time(m.CreatedAtUnixNanos), CreatedBy: m.CreatedBy, UpdatedAt: state.Time(m.UpdatedAtUnixNanos),
	}
	if p := m.Paused; p != nil {
		sc.Paused = &state.Pause{By: p.By, Reason: p.Reason, At: state.Time(p.AtUnixNanos)}
	}
	for _, f := range m.Recent {
		sc.Recent = append(sc.Recent, state.Fire{Tick: state.Time(f.TickUnixNanos), Until: state.Time(f.UntilUnixNanos),
			TaskID: f.TaskId, Outcome: state.Outcome(min(f.Outcome, 255)), Reason: f.Reason, At: state.Time(f.AtUnixNanos)})
	}
	return sc
}

// deliveryMessage and deliveryFromMessage convert a pending delivery.
func deliveryMessage(d state.Delivery) *snapshotpb.DeliverySnapshot {
	r := &d.Task
	return &snapshotpb.DeliverySnapshot{
		Workflow: d.Workflow, Parent: d.Parent, Lsn: d.LSN,
		TaskId: r.TaskID, Namespace: r.Namespace, Queue: r.Queue, Payload: r.Payload,
		ExecutionWindowNanos: int64(r.ExecutionWindow), RetryPolicy: retryMessage(r.Retry), RequestId: r.RequestID,
		NotBeforeUnixNanos: int64(r.NotBefore), Priority: r.Priority, CreatedAtUnixNanos: int64(r.CreatedAt), By: r.By,
		DeadlineUnixNanos: int64(r.Deadline), Traceparent: r.Trace.Parent, Tracestate: r.Trace.State,
		Kind: r.Kind, Key: r.Key, DependsOn: r.DependsOn, OnDependencyFailure: uint32(r.OnDependencyFailure), Remote: r.Remote,
	}
}

func deliveryFromMessage(m *snapshotpb.DeliverySnapshot) state.Delivery {
	d := state.Delivery{Workflow: m.Workflow, Parent: m.Parent, LSN: m.Lsn, Task: state.TaskCreated{
		TaskID: m.TaskId, Namespace: m.Namespace, Queue: m.Queue, Payload: noEmpty(m.Payload),
		ExecutionWindow: time.Duration(m.ExecutionWindowNanos), Retry: retryFromMessage(m.RetryPolicy), RequestID: m.RequestId,
		NotBefore: state.Time(m.NotBeforeUnixNanos), Priority: m.Priority, CreatedAt: state.Time(m.CreatedAtUnixNanos), By: m.By,
		Deadline: state.Time(m.DeadlineUnixNanos), Trace: state.TraceContext{Parent: m.Traceparent, State: m.Tracestate},
		Kind: m.Kind, Key: m.Key, DependsOn: m.DependsOn, OnDependencyFailure: state.DepPolicy(min(m.OnDependencyFailure, 255)), Remote: m.Remote,
	}}
	if len(d.Task.DependsOn) == 0 {
		d.Task.DependsOn = nil
	}
	if len(d.Task.Remote) == 0 {
		d.Task.Remote = nil
	}
	return d
}
