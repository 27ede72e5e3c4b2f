package server

import (
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// eventOf is the API's event of the record at lsn of a partition: its
// time, what it concerns (the namespace and queue of a record that names
// them; the caller sets a task's) and its fields. A record type without a
// case in one of the functions below fails TestEveryRecordHasAnEvent.
func eventOf(partition, lsn uint64, r state.Record) *tenurev1.Event {
	e := &tenurev1.Event{Partition: partition, Lsn: lsn, Type: record.TypeOf(r).String(), TaskId: r.Task()}
	_ = lifeEvent(e, r) || endEvent(e, r) || queueEvent(e, r) || scheduleEvent(e, r) || logEvent(e, r)
	return e
}

// lifeEvent converts the records of a task's life before its end; false
// for another record.
func lifeEvent(e *tenurev1.Event, r state.Record) bool {
	switch r := r.(type) {
	case *state.TaskCreated:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.CreatedAt), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_TaskCreated{TaskCreated: createdEvent(r)}
	case *state.LeaseGranted:
		e.At, e.RequestedBy = ts(r.GrantedAt), r.By
		e.Record = &tenurev1.Event_LeaseGranted{LeaseGranted: &tenurev1.LeaseGrantedEvent{
			LeaseId: r.LeaseID, WorkerId: r.WorkerID, Attempt: r.Attempt, LeaseExpiry: ts(r.LeaseExpiry)}}
	case *state.LeaseExtended:
		e.At, e.RequestedBy = ts(r.At), r.By
		m := &tenurev1.LeaseExtendedEvent{LeaseId: r.LeaseID, LeaseExpiry: ts(r.NewLeaseExpiry)}
		if p := r.Report; p != nil {
			m.Progress = progressMessage(state.LastReport{Report: *p, At: r.At})
		}
		e.Record = &tenurev1.Event_LeaseExtended{LeaseExtended: m}
	case *state.LeaseExpired:
		e.At = ts(r.At)
		e.Record = &tenurev1.Event_LeaseExpired{LeaseExpired: &tenurev1.LeaseExpiredEvent{LeaseId: r.LeaseID, RetryAt: ts(r.RetryAt)}}
	case *state.ExecutionStarted:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_ExecutionStarted{ExecutionStarted: &tenurev1.ExecutionStartedEvent{LeaseId: r.LeaseID}}
	case *state.TaskSnoozed:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_TaskSnoozed{TaskSnoozed: &tenurev1.TaskSnoozedEvent{LeaseId: r.LeaseID, NotBefore: ts(r.NotBefore), Reason: r.Reason}}
	case *state.TaskCancelled:
		e.At, e.RequestedBy = ts(r.At), r.By
		m := &tenurev1.TaskCancelledEvent{LeaseId: r.LeaseID, Reason: r.Reason}
		if r.Action != state.ActionUnknown {
			m.Action = r.Action.String()
		}
		e.Record = &tenurev1.Event_TaskCancelled{TaskCancelled: m}
	case *state.TaskRetried:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_TaskRetried{TaskRetried: &tenurev1.TaskRetriedEvent{Reason: r.Reason}}
	case *state.DependencyResolved:
		e.At = ts(r.At)
		m := &tenurev1.DependencyResolvedEvent{Dependency: r.Dependency, Gone: r.Outcome == state.EndedGone}
		switch r.Outcome {
		case state.EndedCompleted:
			m.State = tenurev1.TaskState_TASK_STATE_COMPLETED
		case state.EndedFailed:
			m.State = tenurev1.TaskState_TASK_STATE_FAILED
		case state.EndedDead:
			m.State = tenurev1.TaskState_TASK_STATE_DEAD
		}
		e.Record = &tenurev1.Event_DependencyResolved{DependencyResolved: m}
	default:
		return false
	}
	return true
}

// endEvent converts the records that commit or end a task; false for
// another record.
func endEvent(e *tenurev1.Event, r state.Record) bool {
	switch r := r.(type) {
	case *state.TaskCommitted:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_TaskCommitted{TaskCommitted: &tenurev1.TaskCommittedEvent{LeaseId: r.LeaseID, Result: r.Result, Spawn: createdEvents(r.Spawn)}}
	case *state.TaskCompleted:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_TaskCompleted{TaskCompleted: &tenurev1.TaskCompletedEvent{LeaseId: r.LeaseID, Result: r.Result, Spawn: createdEvents(r.Spawn)}}
	case *state.TaskFailed:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_TaskFailed{TaskFailed: &tenurev1.TaskFailedEvent{
			LeaseId: r.LeaseID, Reason: r.Reason, RetryAt: ts(r.RetryAt), Permanent: r.Permanent}}
	case *state.TaskDead:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_TaskDead{TaskDead: &tenurev1.TaskDeadEvent{Reason: r.Reason}}
	case *state.TaskDeadlineExceeded:
		e.At = ts(r.At)
		e.Record = &tenurev1.Event_TaskDeadlineExceeded{TaskDeadlineExceeded: &tenurev1.TaskDeadlineExceededEvent{}}
	default:
		return false
	}
	return true
}

// queueEvent converts the records about a queue; false for another
// record.
func queueEvent(e *tenurev1.Event, r state.Record) bool {
	switch r := r.(type) {
	case *state.QueuePaused:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_QueuePaused{QueuePaused: &tenurev1.QueuePausedEvent{Reason: r.Reason}}
	case *state.QueueResumed:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_QueueResumed{QueueResumed: &tenurev1.QueueResumedEvent{Reason: r.Reason}}
	case *state.QueueLimited:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_QueueLimited{QueueLimited: &tenurev1.QueueLimitedEvent{
			MaxConcurrency: r.MaxConcurrency, Rate: coordinator.RatePerSecond(r.RateMilli), Burst: r.Burst,
			QueueMaxConcurrency: r.QueueMaxConcurrency, QueueRate: coordinator.RatePerSecond(r.QueueRateMilli), QueueBurst: r.QueueBurst,
			Partitions: r.Partitions, Reason: r.Reason,
		}}
	default:
		return false
	}
	return true
}

// scheduleEvent converts the records about a schedule; false for another
// record.
func scheduleEvent(e *tenurev1.Event, r state.Record) bool {
	switch r := r.(type) {
	case *state.ScheduleCreated:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_ScheduleCreated{ScheduleCreated: &tenurev1.ScheduleCreatedEvent{
			Name: r.Name, Definition: scheduleDefinition(r.Def), Next: ts(r.Next)}}
	case *state.ScheduleUpdated:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_ScheduleUpdated{ScheduleUpdated: &tenurev1.ScheduleUpdatedEvent{
			Name: r.Name, Definition: scheduleDefinition(r.Def), Next: ts(r.Next), Reason: r.Reason}}
	case *state.SchedulePaused:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_SchedulePaused{SchedulePaused: &tenurev1.SchedulePausedEvent{Name: r.Name, Reason: r.Reason}}
	case *state.ScheduleResumed:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_ScheduleResumed{ScheduleResumed: &tenurev1.ScheduleResumedEvent{Name: r.Name, Next: ts(r.Next), Reason: r.Reason}}
	case *state.ScheduleDeleted:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_ScheduleDeleted{ScheduleDeleted: &tenurev1.ScheduleDeletedEvent{Name: r.Name, Reason: r.Reason}}
	case *state.ScheduleFired:
		e.At, e.RequestedBy, e.Namespace, e.Queue = ts(r.At), r.By, r.Namespace, r.Queue
		e.Record = &tenurev1.Event_ScheduleFired{ScheduleFired: &tenurev1.ScheduleFiredEvent{
			Name: r.Name, Tick: ts(r.Tick), Next: ts(r.Next), Outcome: outcomes[r.Outcome]}}
	case *state.ScheduleSkipped:
		e.At, e.Namespace, e.Queue = ts(r.At), r.Namespace, r.Queue
		e.Record = &tenurev1.Event_ScheduleSkipped{ScheduleSkipped: &tenurev1.ScheduleSkippedEvent{
			Name: r.Name, From: ts(r.From), Next: ts(r.Next), Reason: r.Reason}}
	case *state.ScheduleHeld:
		e.At, e.Namespace, e.Queue = ts(r.At), r.Namespace, r.Queue
		e.Record = &tenurev1.Event_ScheduleHeld{ScheduleHeld: &tenurev1.ScheduleHeldEvent{Name: r.Name, Tick: ts(r.Tick), Next: ts(r.Next)}}
	default:
		return false
	}
	return true
}

// logEvent converts the records about the log or about many tasks at
// once; false for another record.
func logEvent(e *tenurev1.Event, r state.Record) bool {
	switch r := r.(type) {
	case *state.Fence:
		e.At = ts(r.At)
		e.Record = &tenurev1.Event_Fence{Fence: &tenurev1.FenceEvent{Epoch: r.Epoch, NodeId: r.NodeID}}
	case *state.TasksPurged:
		e.At = ts(r.At)
		e.Record = &tenurev1.Event_TasksPurged{TasksPurged: &tenurev1.TasksPurgedEvent{Before: ts(r.Before)}}
	case *state.TasksPurgedRange:
		e.At = ts(r.At)
		e.Record = &tenurev1.Event_TasksPurgedRange{TasksPurgedRange: &tenurev1.TasksPurgedRangeEvent{
			Before: ts(r.Before), AfterLsn: r.AfterLSN, ThroughLsn: r.ThroughLSN}}
	case *state.TasksDeleted:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_TasksDeleted{TasksDeleted: &tenurev1.TasksDeletedEvent{TaskIds: r.TaskIDs, Reason: r.Reason}}
	case *state.TasksSubmitted:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_TasksSubmitted{TasksSubmitted: &tenurev1.TasksSubmittedEvent{WorkflowId: r.Workflow, Tasks: createdEvents(r.Tasks)}}
	case *state.OutboxHeld:
		e.At, e.RequestedBy = ts(r.At), r.By
		rows := make([]*tenurev1.OutboxHold, len(r.Rows))
		for i, row := range r.Rows {
			rows[i] = &tenurev1.OutboxHold{Outbox: r.Outbox, Row: row.Row, Namespace: row.Namespace, Queue: row.Queue, RequestId: row.RequestID}
		}
		e.Record = &tenurev1.Event_OutboxHeld{OutboxHeld: &tenurev1.OutboxHeldEvent{Outbox: r.Outbox, Rows: rows}}
	case *state.OutboxReleased:
		e.At, e.RequestedBy = ts(r.At), r.By
		e.Record = &tenurev1.Event_OutboxReleased{OutboxReleased: &tenurev1.OutboxReleasedEvent{Outbox: r.Outbox, Rows: r.Rows}}
	case *state.WorkflowCancelled:
		e.At, e.RequestedBy, e.Namespace = ts(r.At), r.By, r.Namespace
		e.Record = &tenurev1.Event_WorkflowCancelled{WorkflowCancelled: &tenurev1.WorkflowCancelledEvent{WorkflowId: r.Workflow, Reason: r.Reason}}
	case *state.WorkflowRetried:
		e.At, e.RequestedBy, e.Namespace = ts(r.At), r.By, r.Namespace
		e.Record = &tenurev1.Event_WorkflowRetried{WorkflowRetried: &tenurev1.WorkflowRetriedEvent{WorkflowId: r.Workflow, Reason: r.Reason}}
	case *state.TasksDelivered:
		e.At = ts(r.At)
		e.Record = &tenurev1.Event_TasksDelivered{TasksDelivered: &tenurev1.TasksDeliveredEvent{TaskIds: r.TaskIDs}}
	default:
		return false
	}
	return true
}

// createdEvent is the API's form of a task's creation.
func createdEvent(r *state.TaskCreated) *tenurev1.TaskCreatedEvent {
	m := &tenurev1.TaskCreatedEvent{
		TaskId: r.TaskID, Namespace: r.Namespace, Queue: r.Queue,
		Payload: r.Payload, ExecutionWindow: durationpb.New(r.ExecutionWindow), RetryPolicy: retryPolicyMessage(r.Retry),
		RequestId: r.RequestID, NotBefore: ts(r.NotBefore), Priority: r.Priority, Deadline: ts(r.Deadline),
		TraceContext: traceMessage(r.Trace), Kind: r.Kind, Key: r.Key, DependsOn: r.DependsOn,
	}
	if len(r.DependsOn) > 0 {
		m.OnDependencyFailure = depFailureMessage(r.OnDependencyFailure)
	}
	return m
}

// createdEvents converts tasks created together; nil for none.
func createdEvents(ts []state.TaskCreated) []*tenurev1.TaskCreatedEvent {
	if len(ts) == 0 {
		return nil
	}
	out := make([]*tenurev1.TaskCreatedEvent, len(ts))
	for i := range ts {
		out[i] = createdEvent(&ts[i])
	}
	return out
}

// retryPolicyMessage is the API's form of a retry policy.
func retryPolicyMessage(p state.RetryPolicy) *tenurev1.RetryPolicy {
	return &tenurev1.RetryPolicy{
		MaxAttempts:       p.MaxAttempts,
		InitialBackoff:    durationpb.New(p.InitialBackoff),
		MaxBackoff:        durationpb.New(p.MaxBackoff),
		BackoffMultiplier: p.Multiplier,
	}
}

// scheduleDefinition is the API's form of a schedule's definition.
func scheduleDefinition(d state.ScheduleDef) *tenurev1.ScheduleDefinition {
	return &tenurev1.ScheduleDefinition{
		Cron: d.Cron, TimeZone: d.TimeZone, Overlap: overlapMessage(d.Overlap), CatchUpWindow: durationpb.New(d.CatchUp),
		Payload: d.Payload, ExecutionWindow: durationpb.New(d.Window), RetryPolicy: retryPolicyMessage(d.Retry),
		Priority: d.Priority, Kind: d.Kind,
	}
}
