package record

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/record/recordpb"
	"github.com/tenurehq/tenure/internal/state"
)

// Type is the number of a record type: what a WAL frame carries next to the
// payload to say which message the payload holds. A number is part of the
// on-disk format: never reuse or renumber one. The number of a removed type
// stays here, commented out, so that nobody hands it out again.
type Type uint16

// The record types. The registry below gives each its name, its
// internal/state struct and its message of record.proto.
const (
	TypeTaskCreated          Type = 1
	TypeLeaseGranted         Type = 2
	TypeLeaseExtended        Type = 3
	TypeLeaseExpired         Type = 4
	TypeExecutionStarted     Type = 5
	TypeTaskCommitted        Type = 6
	TypeTaskCompleted        Type = 7
	TypeTaskFailed           Type = 8
	TypeTaskCancelled        Type = 9
	TypeTaskDead             Type = 10
	TypeFence                Type = 11
	TypeTasksPurged          Type = 12
	TypeQueuePaused          Type = 13
	TypeQueueResumed         Type = 14
	TypeTaskRetried          Type = 15
	TypeTasksDeleted         Type = 16
	TypeQueueLimited         Type = 17
	TypeTaskDeadlineExceeded Type = 18
	TypeScheduleCreated      Type = 19
	TypeScheduleUpdated      Type = 20
	TypeSchedulePaused       Type = 21
	TypeScheduleResumed      Type = 22
	TypeScheduleDeleted      Type = 23
	TypeScheduleFired        Type = 24
	TypeScheduleSkipped      Type = 25
	TypeScheduleHeld         Type = 26
	TypeTasksPurgedRange     Type = 27
	TypeTaskSnoozed          Type = 28
	TypeTasksSubmitted       Type = 29
	TypeOutboxHeld           Type = 30
	TypeOutboxReleased       Type = 31
	TypeWorkflowCancelled    Type = 32
	TypeWorkflowRetried      Type = 33
	TypeDependencyResolved   Type = 34
	TypeTasksDelivered       Type = 35
)

// registry has one row per record type: its number, its name (printed by
// tools and the API's task history; as permanent as the number), and the
// two conversions between its internal/state struct and its record.proto
// message, which name the Go type and the message. The conversion to the
// message writes every field of a message given to it (*m = ...), so that
// an Encoder reuses one message per type. Everything else about a
// record type in this package is derived from this table, and the tests
// check it against internal/state, record.proto and the statetest
// generator.
//
// Each conversion copies every field, one to one (times are Unix
// nanoseconds and durations nanoseconds on both sides, so the copies are
// plain conversions). toPB may share the record's memory; fromPB keeps the
// message's, which proto.Unmarshal copied out of the payload. A byte field
// goes through noEmpty, so that an empty one decodes to nil.
var registry = []row{
	entry(TypeTaskCreated, "TaskCreated", taskCreatedInto, taskCreatedFromPB),

	entry(TypeLeaseGranted, "LeaseGranted",
		func(r *state.LeaseGranted, m *recordpb.LeaseGranted) {
			*m = recordpb.LeaseGranted{
				By:                   r.By,
				TaskId:               r.TaskID,
				LeaseId:              r.LeaseID,
				WorkerId:             r.WorkerID,
				Attempt:              r.Attempt,
				LeaseExpiryUnixNanos: int64(r.LeaseExpiry),
				GrantedAtUnixNanos:   int64(r.GrantedAt),
			}
		},
		func(m *recordpb.LeaseGranted) *state.LeaseGranted {
			return &state.LeaseGranted{
				By:          m.By,
				TaskID:      m.TaskId,
				LeaseID:     m.LeaseId,
				WorkerID:    m.WorkerId,
				Attempt:     m.Attempt,
				LeaseExpiry: state.Time(m.LeaseExpiryUnixNanos),
				GrantedAt:   state.Time(m.GrantedAtUnixNanos),
			}
		}),

	entry(TypeLeaseExtended, "LeaseExtended",
		func(r *state.LeaseExtended, m *recordpb.LeaseExtended) {
			*m = recordpb.LeaseExtended{
				By:                      r.By,
				TaskId:                  r.TaskID,
				LeaseId:                 r.LeaseID,
				NewLeaseExpiryUnixNanos: int64(r.NewLeaseExpiry),
				AtUnixNanos:             int64(r.At),
				Progress:                reportToPB(r.Report),
			}
		},
		func(m *recordpb.LeaseExtended) *state.LeaseExtended {
			return &state.LeaseExtended{
				By:             m.By,
				TaskID:         m.TaskId,
				LeaseID:        m.LeaseId,
				NewLeaseExpiry: state.Time(m.NewLeaseExpiryUnixNanos),
				At:             state.Time(m.AtUnixNanos),
				Report:         reportFromPB(m.Progress),
			}
		}),

	entry(TypeLeaseExpired, "LeaseExpired",
		func(r *state.LeaseExpired, m *recordpb.LeaseExpired) {
			*m = recordpb.LeaseExpired{
				TaskId:           r.TaskID,
				LeaseId:          r.LeaseID,
				AtUnixNanos:      int64(r.At),
				RetryAtUnixNanos: int64(r.RetryAt),
			}
		},
		func(m *recordpb.LeaseExpired) *state.LeaseExpired {
			return &state.LeaseExpired{
				TaskID:  m.TaskId,
				LeaseID: m.LeaseId,
				At:      state.Time(m.AtUnixNanos),
				RetryAt: state.Time(m.RetryAtUnixNanos),
			}
		}),

	entry(TypeExecutionStarted, "ExecutionStarted",
		func(r *state.ExecutionStarted, m *recordpb.ExecutionStarted) {
			*m = recordpb.ExecutionStarted{
				By:          r.By,
				TaskId:      r.TaskID,
				LeaseId:     r.LeaseID,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.ExecutionStarted) *state.ExecutionStarted {
			return &state.ExecutionStarted{
				By:      m.By,
				TaskID:  m.TaskId,
				LeaseID: m.LeaseId,
				At:      state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeTaskCommitted, "TaskCommitted", taskCommittedInto, taskCommittedFromPB),

	entry(TypeTaskCompleted, "TaskCompleted",
		func(r *state.TaskCompleted, m *recordpb.TaskCompleted) {
			taskCommittedInto((*state.TaskCommitted)(r), (*recordpb.TaskCommitted)(m))
		},
		func(m *recordpb.TaskCompleted) *state.TaskCompleted {
			return (*state.TaskCompleted)(taskCommittedFromPB((*recordpb.TaskCommitted)(m)))
		}),

	entry(TypeTaskFailed, "TaskFailed",
		func(r *state.TaskFailed, m *recordpb.TaskFailed) {
			*m = recordpb.TaskFailed{
				By:               r.By,
				TaskId:           r.TaskID,
				LeaseId:          r.LeaseID,
				Reason:           r.Reason,
				RetryAtUnixNanos: int64(r.RetryAt),
				Permanent:        r.Permanent,
				AtUnixNanos:      int64(r.At),
			}
		},
		func(m *recordpb.TaskFailed) *state.TaskFailed {
			return &state.TaskFailed{
				By:        m.By,
				TaskID:    m.TaskId,
				LeaseID:   m.LeaseId,
				Reason:    m.Reason,
				RetryAt:   state.Time(m.RetryAtUnixNanos),
				Permanent: m.Permanent,
				At:        state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeTaskCancelled, "TaskCancelled",
		func(r *state.TaskCancelled, m *recordpb.TaskCancelled) {
			*m = recordpb.TaskCancelled{
				By:          r.By,
				TaskId:      r.TaskID,
				LeaseId:     r.LeaseID,
				Reason:      r.Reason,
				AtUnixNanos: int64(r.At),
				Action:      recordpb.LeaseAction(r.Action),
			}
		},
		func(m *recordpb.TaskCancelled) *state.TaskCancelled {
			return &state.TaskCancelled{
				By:      m.By,
				TaskID:  m.TaskId,
				LeaseID: m.LeaseId,
				Reason:  m.Reason,
				At:      state.Time(m.AtUnixNanos),
				Action:  clampAction(m.Action),
			}
		}),

	entry(TypeTaskDead, "TaskDead",
		func(r *state.TaskDead, m *recordpb.TaskDead) {
			*m = recordpb.TaskDead{
				TaskId:      r.TaskID,
				Reason:      r.Reason,
				AtUnixNanos: int64(r.At),
				By:          r.By,
			}
		},
		func(m *recordpb.TaskDead) *state.TaskDead {
			return &state.TaskDead{
				TaskID: m.TaskId,
				Reason: m.Reason,
				At:     state.Time(m.AtUnixNanos),
				By:     m.By,
			}
		}),

	entry(TypeFence, "Fence",
		func(r *state.Fence, m *recordpb.Fence) {
			*m = recordpb.Fence{
				Epoch:       r.Epoch,
				NodeId:      r.NodeID,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.Fence) *state.Fence {
			return &state.Fence{
				Epoch:  m.Epoch,
				NodeID: m.NodeId,
				At:     state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeTasksPurged, "TasksPurged",
		func(r *state.TasksPurged, m *recordpb.TasksPurged) {
			*m = recordpb.TasksPurged{
				BeforeUnixNanos: int64(r.Before),
				AtUnixNanos:     int64(r.At),
			}
		},
		func(m *recordpb.TasksPurged) *state.TasksPurged {
			return &state.TasksPurged{
				Before: state.Time(m.BeforeUnixNanos),
				At:     state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeQueuePaused, "QueuePaused", queuePausedInto, queuePausedFromPB),

	entry(TypeQueueResumed, "QueueResumed",
		func(r *state.QueueResumed, m *recordpb.QueueResumed) {
			queuePausedInto((*state.QueuePaused)(r), (*recordpb.QueuePaused)(m))
		},
		func(m *recordpb.QueueResumed) *state.QueueResumed {
			return (*state.QueueResumed)(queuePausedFromPB((*recordpb.QueuePaused)(m)))
		}),

	entry(TypeTaskRetried, "TaskRetried",
		func(r *state.TaskRetried, m *recordpb.TaskRetried) {
			*m = recordpb.TaskRetried{
				TaskId:      r.TaskID,
				By:          r.By,
				Reason:      r.Reason,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.TaskRetried) *state.TaskRetried {
			return &state.TaskRetried{
				TaskID: m.TaskId,
				By:     m.By,
				Reason: m.Reason,
				At:     state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeTasksDeleted, "TasksDeleted",
		func(r *state.TasksDeleted, m *recordpb.TasksDeleted) {
			*m = recordpb.TasksDeleted{
				TaskIds:     r.TaskIDs,
				By:          r.By,
				Reason:      r.Reason,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.TasksDeleted) *state.TasksDeleted {
			return &state.TasksDeleted{
				TaskIDs: m.TaskIds,
				By:      m.By,
				Reason:  m.Reason,
				At:      state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeQueueLimited, "QueueLimited",
		func(r *state.QueueLimited, m *recordpb.QueueLimited) {
			*m = recordpb.QueueLimited{
				Namespace:           r.Namespace,
				Queue:               r.Queue,
				MaxConcurrency:      r.MaxConcurrency,
				RateMilli:           r.RateMilli,
				Burst:               r.Burst,
				QueueMaxConcurrency: r.QueueMaxConcurrency,
				QueueRateMilli:      r.QueueRateMilli,
				QueueBurst:          r.QueueBurst,
				Partitions:          r.Partitions,
				By:                  r.By,
				Reason:              r.Reason,
				AtUnixNanos:         int64(r.At),
				KeyMaxConcurrency:   r.KeyMaxConcurrency,
				KeyRateMilli:        r.KeyRateMilli,
				KeyBurst:            r.KeyBurst,
				KeyOrdered:          r.KeyOrdered,
				Fair:                r.Fair,
				KeyWeights:          keyWeightsToPB(r.KeyWeights),
			}
		},
		func(m *recordpb.QueueLimited) *state.QueueLimited {
			return &state.QueueLimited{
				Namespace:           m.Namespace,
				Queue:               m.Queue,
				MaxConcurrency:      m.MaxConcurrency,
				RateMilli:           m.RateMilli,
				Burst:               m.Burst,
				QueueMaxConcurrency: m.QueueMaxConcurrency,
				QueueRateMilli:      m.QueueRateMilli,
				QueueBurst:          m.QueueBurst,
				Partitions:          m.Partitions,
				By:                  m.By,
				Reason:              m.Reason,
				At:                  state.Time(m.AtUnixNanos),
				KeyMaxConcurrency:   m.KeyMaxConcurrency,
				KeyRateMilli:        m.KeyRateMilli,
				KeyBurst:            m.KeyBurst,
				KeyOrdered:          m.KeyOrdered,
				Fair:                m.Fair,
				KeyWeights:          keyWeightsFromPB(m.KeyWeights),
			}
		}),
	entry(TypeTaskDeadlineExceeded, "TaskDeadlineExceeded",
		func(r *state.TaskDeadlineExceeded, m *recordpb.TaskDeadlineExceeded) {
			*m = recordpb.TaskDeadlineExceeded{
				TaskId:      r.TaskID,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.TaskDeadlineExceeded) *state.TaskDeadlineExceeded {
			return &state.TaskDeadlineExceeded{
				TaskID: m.TaskId,
				At:     state.Time(m.AtUnixNanos),
			}
		}),
	entry(TypeScheduleCreated, "ScheduleCreated",
		func(r *state.ScheduleCreated, m *recordpb.ScheduleCreated) {
			*m = recordpb.ScheduleCreated{
				Namespace:     r.Namespace,
				Queue:         r.Queue,
				Name:          r.Name,
				Def:           scheduleDefToPB(r.Def),
				NextUnixNanos: int64(r.Next),
				By:            r.By,
				AtUnixNanos:   int64(r.At),
			}
		},
		func(m *recordpb.ScheduleCreated) *state.ScheduleCreated {
			return &state.ScheduleCreated{
				Namespace: m.Namespace,
				Queue:     m.Queue,
				Name:      m.Name,
				Def:       scheduleDefFromPB(m.Def),
				Next:      state.Time(m.NextUnixNanos),
				By:        m.By,
				At:        state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeScheduleUpdated, "ScheduleUpdated",
		func(r *state.ScheduleUpdated, m *recordpb.ScheduleUpdated) {
			*m = recordpb.ScheduleUpdated{
				Namespace:     r.Namespace,
				Queue:         r.Queue,
				Name:          r.Name,
				Def:           scheduleDefToPB(r.Def),
				NextUnixNanos: int64(r.Next),
				By:            r.By,
				Reason:        r.Reason,
				AtUnixNanos:   int64(r.At),
			}
		},
		func(m *recordpb.ScheduleUpdated) *state.ScheduleUpdated {
			return &state.ScheduleUpdated{
				Namespace: m.Namespace,
				Queue:     m.Queue,
				Name:      m.Name,
				Def:       scheduleDefFromPB(m.Def),
				Next:      state.Time(m.NextUnixNanos),
				By:        m.By,
				Reason:    m.Reason,
				At:        state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeSchedulePaused, "SchedulePaused", schedulePausedInto, schedulePausedFromPB),

	entry(TypeScheduleResumed, "ScheduleResumed",
		func(r *state.ScheduleResumed, m *recordpb.ScheduleResumed) {
			*m = recordpb.ScheduleResumed{
				Namespace:     r.Namespace,
				Queue:         r.Queue,
				Name:          r.Name,
				NextUnixNanos: int64(r.Next),
				By:            r.By,
				Reason:        r.Reason,
				AtUnixNanos:   int64(r.At),
			}
		},
		func(m *recordpb.ScheduleResumed) *state.ScheduleResumed {
			return &state.ScheduleResumed{
				Namespace: m.Namespace,
				Queue:     m.Queue,
				Name:      m.Name,
				Next:      state.Time(m.NextUnixNanos),
				By:        m.By,
				Reason:    m.Reason,
				At:        state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeScheduleDeleted, "ScheduleDeleted",
		func(r *state.ScheduleDeleted, m *recordpb.ScheduleDeleted) {
			schedulePausedInto((*state.SchedulePaused)(r), (*recordpb.SchedulePaused)(m))
		},
		func(m *recordpb.ScheduleDeleted) *state.ScheduleDeleted {
			return (*state.ScheduleDeleted)(schedulePausedFromPB((*recordpb.SchedulePaused)(m)))
		}),

	entry(TypeScheduleFired, "ScheduleFired",
		func(r *state.ScheduleFired, m *recordpb.ScheduleFired) {
			*m = recordpb.ScheduleFired{
				Namespace:     r.Namespace,
				Queue:         r.Queue,
				Name:          r.Name,
				TickUnixNanos: int64(r.Tick),
				TaskId:        r.TaskID,
				NextUnixNanos: int64(r.Next),
				Outcome:       uint32(r.Outcome),
				By:            r.By,
				AtUnixNanos:   int64(r.At),
			}
		},
		func(m *recordpb.ScheduleFired) *state.ScheduleFired {
			return &state.ScheduleFired{
				Namespace: m.Namespace,
				Queue:     m.Queue,
				Name:      m.Name,
				Tick:      state.Time(m.TickUnixNanos),
				TaskID:    m.TaskId,
				Next:      state.Time(m.NextUnixNanos),
				Outcome:   state.Outcome(min(m.Outcome, 255)),
				By:        m.By,
				At:        state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeScheduleSkipped, "ScheduleSkipped",
		func(r *state.ScheduleSkipped, m *recordpb.ScheduleSkipped) {
			*m = recordpb.ScheduleSkipped{
				Namespace:     r.Namespace,
				Queue:         r.Queue,
				Name:          r.Name,
				FromUnixNanos: int64(r.From),
				NextUnixNanos: int64(r.Next),
				Reason:        r.Reason,
				AtUnixNanos:   int64(r.At),
			}
		},
		func(m *recordpb.ScheduleSkipped) *state.ScheduleSkipped {
			return &state.ScheduleSkipped{
				Namespace: m.Namespace,
				Queue:     m.Queue,
				Name:      m.Name,
				From:      state.Time(m.FromUnixNanos),
				Next:      state.Time(m.NextUnixNanos),
				Reason:    m.Reason,
				At:        state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeScheduleHeld, "ScheduleHeld",
		func(r *state.ScheduleHeld, m *recordpb.ScheduleHeld) {
			*m = recordpb.ScheduleHeld{
				Namespace:     r.Namespace,
				Queue:         r.Queue,
				Name:          r.Name,
				TickUnixNanos: int64(r.Tick),
				NextUnixNanos: int64(r.Next),
				AtUnixNanos:   int64(r.At),
			}
		},
		func(m *recordpb.ScheduleHeld) *state.ScheduleHeld {
			return &state.ScheduleHeld{
				Namespace: m.Namespace,
				Queue:     m.Queue,
				Name:      m.Name,
				Tick:      state.Time(m.TickUnixNanos),
				Next:      state.Time(m.NextUnixNanos),
				At:        state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeTasksPurgedRange, "TasksPurgedRange",
		func(r *state.TasksPurgedRange, m *recordpb.TasksPurgedRange) {
			*m = recordpb.TasksPurgedRange{
				BeforeUnixNanos: int64(r.Before),
				AtUnixNanos:     int64(r.At),
				AfterLsn:        r.AfterLSN,
				ThroughLsn:      r.ThroughLSN,
			}
		},
		func(m *recordpb.TasksPurgedRange) *state.TasksPurgedRange {
			return &state.TasksPurgedRange{
				Before:     state.Time(m.BeforeUnixNanos),
				At:         state.Time(m.AtUnixNanos),
				AfterLSN:   m.AfterLsn,
				ThroughLSN: m.ThroughLsn,
			}
		}),

	entry(TypeTaskSnoozed, "TaskSnoozed",
		func(r *state.TaskSnoozed, m *recordpb.TaskSnoozed) {
			*m = recordpb.TaskSnoozed{
				TaskId:             r.TaskID,
				LeaseId:            r.LeaseID,
				NotBeforeUnixNanos: int64(r.NotBefore),
				Reason:             r.Reason,
				AtUnixNanos:        int64(r.At),
				By:                 r.By,
			}
		},
		func(m *recordpb.TaskSnoozed) *state.TaskSnoozed {
			return &state.TaskSnoozed{
				TaskID:    m.TaskId,
				LeaseID:   m.LeaseId,
				NotBefore: state.Time(m.NotBeforeUnixNanos),
				Reason:    m.Reason,
				At:        state.Time(m.AtUnixNanos),
				By:        m.By,
			}
		}),

	entry(TypeTasksSubmitted, "TasksSubmitted",
		func(r *state.TasksSubmitted, m *recordpb.TasksSubmitted) {
			*m = recordpb.TasksSubmitted{
				WorkflowId:  r.Workflow,
				Tasks:       taskCreatedsToPB(m.Tasks, r.Tasks),
				By:          r.By,
				AtUnixNanos: int64(r.At),
				Deliver:     taskCreatedsToPB(m.Deliver, r.Deliver),
				Parent:      r.Parent,
			}
		},
		func(m *recordpb.TasksSubmitted) *state.TasksSubmitted {
			return &state.TasksSubmitted{
				Workflow: m.WorkflowId,
				Tasks:    taskCreatedsFromPB(m.Tasks),
				By:       m.By,
				At:       state.Time(m.AtUnixNanos),
				Deliver:  taskCreatedsFromPB(m.Deliver),
				Parent:   m.Parent,
			}
		}),

	entry(TypeOutboxHeld, "OutboxHeld",
		func(r *state.OutboxHeld, m *recordpb.OutboxHeld) {
			rows := m.Rows[:0]
			for i, row := range r.Rows {
				pb := new(recordpb.OutboxHeldRow)
				if i < len(m.Rows) && m.Rows[i] != nil {
					pb = m.Rows[i]
				}
				*pb = recordpb.OutboxHeldRow{Row: row.Row, Namespace: row.Namespace, Queue: row.Queue, RequestId: row.RequestID}
				rows = append(rows, pb)
			}
			*m = recordpb.OutboxHeld{
				Outbox:      r.Outbox,
				Rows:        rows,
				By:          r.By,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.OutboxHeld) *state.OutboxHeld {
			r := &state.OutboxHeld{
				Outbox: m.Outbox,
				By:     m.By,
				At:     state.Time(m.AtUnixNanos),
			}
			for _, row := range m.Rows {
				r.Rows = append(r.Rows, state.OutboxHeldRow{Row: row.GetRow(), Namespace: row.GetNamespace(), Queue: row.GetQueue(), RequestID: row.GetRequestId()})
			}
			return r
		}),

	entry(TypeOutboxReleased, "OutboxReleased",
		func(r *state.OutboxReleased, m *recordpb.OutboxReleased) {
			*m = recordpb.OutboxReleased{
				Outbox:      r.Outbox,
				Rows:        r.Rows,
				By:          r.By,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.OutboxReleased) *state.OutboxReleased {
			return &state.OutboxReleased{
				Outbox: m.Outbox,
				Rows:   m.Rows,
				By:     m.By,
				At:     state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeWorkflowCancelled, "WorkflowCancelled", workflowCancelledInto, workflowCancelledFromPB),

	entry(TypeWorkflowRetried, "WorkflowRetried",
		func(r *state.WorkflowRetried, m *recordpb.WorkflowRetried) {
			workflowCancelledInto((*state.WorkflowCancelled)(r), (*recordpb.WorkflowCancelled)(m))
		},
		func(m *recordpb.WorkflowRetried) *state.WorkflowRetried {
			return (*state.WorkflowRetried)(workflowCancelledFromPB((*recordpb.WorkflowCancelled)(m)))
		}),

	entry(TypeDependencyResolved, "DependencyResolved",
		func(r *state.DependencyResolved, m *recordpb.DependencyResolved) {
			*m = recordpb.DependencyResolved{
				TaskId:      r.TaskID,
				Dependency:  r.Dependency,
				Outcome:     recordpb.DependencyOutcome(r.Outcome),
				Result:      r.Result,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.DependencyResolved) *state.DependencyResolved {
			return &state.DependencyResolved{
				TaskID:     m.TaskId,
				Dependency: m.Dependency,
				Outcome:    state.Ended(min(m.Outcome, 255)),
				Result:     noEmpty(m.Result),
				At:         state.Time(m.AtUnixNanos),
			}
		}),

	entry(TypeTasksDelivered, "TasksDelivered",
		func(r *state.TasksDelivered, m *recordpb.TasksDelivered) {
			*m = recordpb.TasksDelivered{
				TaskIds:     r.TaskIDs,
				AtUnixNanos: int64(r.At),
			}
		},
		func(m *recordpb.TasksDelivered) *state.TasksDelivered {
			return &state.TasksDelivered{
				TaskIDs: m.TaskIds,
				At:      state.Time(m.AtUnixNanos),
			}
		}),
}

// The twins: four pairs of record types whose internal/state structs have
// the same fields, and so do their messages in record.proto (TaskCompleted
// those of TaskCommitted, QueueResumed those of QueuePaused,
// ScheduleDeleted those of SchedulePaused, WorkflowRetried those of
// WorkflowCancelled). Go converts a pointer to one struct into a pointer to
// another with identical fields, so the second of a pair converts through
// the first's conversions below, which only read and assign the fields (no
// proto method is called through the converted pointer). The day the two
// of a pair differ in a field, the conversion stops compiling: give the
// second its own conversions then.

func taskCommittedInto(r *state.TaskCommitted, m *recordpb.TaskCommitted) {
	*m = recordpb.TaskCommitted{
		By:          r.By,
		TaskId:      r.TaskID,
		LeaseId:     r.LeaseID,
		Result:      r.Result,
		AtUnixNanos: int64(r.At),
		Spawn:       taskCreatedsToPB(m.Spawn, r.Spawn),
		Deliver:     taskCreatedsToPB(m.Deliver, r.Deliver),
	}
}

func taskCommittedFromPB(m *recordpb.TaskCommitted) *state.TaskCommitted {
	return &state.TaskCommitted{
		By:      m.By,
		TaskID:  m.TaskId,
		LeaseID: m.LeaseId,
		Result:  noEmpty(m.Result),
		At:      state.Time(m.AtUnixNanos),
		Spawn:   taskCreatedsFromPB(m.Spawn),
		Deliver: taskCreatedsFromPB(m.Deliver),
	}
}

func queuePausedInto(r *state.QueuePaused, m *recordpb.QueuePaused) {
	*m = recordpb.QueuePaused{
		Namespace:   r.Namespace,
		Queue:       r.Queue,
		By:          r.By,
		Reason:      r.Reason,
		AtUnixNanos: int64(r.At),
	}
}

func queuePausedFromPB(m *recordpb.QueuePaused) *state.QueuePaused {
	return &state.QueuePaused{
		Namespace: m.Namespace,
		Queue:     m.Queue,
		By:        m.By,
		Reason:    m.Reason,
		At:        state.Time(m.AtUnixNanos),
	}
}

func schedulePausedInto(r *state.SchedulePaused, m *recordpb.SchedulePaused) {
	*m = recordpb.SchedulePaused{
		Namespace:   r.Namespace,
		Queue:       r.Queue,
		Name:        r.Name,
		By:          r.By,
		Reason:      r.Reason,
		AtUnixNanos: int64(r.At),
	}
}

func schedulePausedFromPB(m *recordpb.SchedulePaused) *state.SchedulePaused {
	return &state.SchedulePaused{
		Namespace: m.Namespace,
		Queue:     m.Queue,
		Name:      m.Name,
		By:        m.By,
		Reason:    m.Reason,
		At:        state.Time(m.AtUnixNanos),
	}
}

func workflowCancelledInto(r *state.WorkflowCancelled, m *recordpb.WorkflowCancelled) {
	*m = recordpb.WorkflowCancelled{
		Namespace:   r.Namespace,
		WorkflowId:  r.Workflow,
		Reason:      r.Reason,
		By:          r.By,
		AtUnixNanos: int64(r.At),
	}
}

func workflowCancelledFromPB(m *recordpb.WorkflowCancelled) *state.WorkflowCancelled {
	return &state.WorkflowCancelled{
		Namespace: m.Namespace,
		Workflow:  m.WorkflowId,
		Reason:    m.Reason,
		By:        m.By,
		At:        state.Time(m.AtUnixNanos),
	}
}

// reportToPB and reportFromPB convert the progress report a LeaseExtended
// carries; nil is none.
func reportToPB(r *state.Report) *recordpb.ProgressReport {
	if r == nil {
		return nil
	}
	return &recordpb.ProgressReport{Message: r.Message, Percent: r.Percent, HasPercent: r.HasPercent}
}

func reportFromPB(m *recordpb.ProgressReport) *state.Report {
	if m == nil {
		return nil
	}
	return &state.Report{Message: m.Message, Percent: m.Percent, HasPercent: m.HasPercent}
}

// scheduleDefToPB and scheduleDefFromPB convert the definition that
// ScheduleCreated and ScheduleUpdated carry.
func scheduleDefToPB(d state.ScheduleDef) *recordpb.ScheduleDef {
	if reflect.ValueOf(d).IsZero() {
		return nil
	}
	return &recordpb.ScheduleDef{
		Cron:                 d.Cron,
		TimeZone:             d.TimeZone,
		Overlap:              uint32(d.Overlap),
		CatchUpNanos:         int64(d.CatchUp),
		Payload:              d.Payload,
		ExecutionWindowNanos: int64(d.Window),
		RetryPolicy:          retryPolicyToPB(d.Retry),
		Priority:             d.Priority,
		Kind:                 d.Kind,
	}
}

func scheduleDefFromPB(m *recordpb.ScheduleDef) state.ScheduleDef {
	return state.ScheduleDef{
		Cron:     m.GetCron(),
		TimeZone: m.GetTimeZone(),
		Overlap:  state.Overlap(min(m.GetOverlap(), 255)),
		CatchUp:  time.Duration(m.GetCatchUpNanos()),
		Payload:  noEmpty(m.GetPayload()),
		Window:   time.Duration(m.GetExecutionWindowNanos()),
		Retry:    retryPolicyFromPB(m.GetRetryPolicy()),
		Priority: m.GetPriority(),
		Kind:     m.GetKind(),
	}
}

// taskCreatedInto and taskCreatedFromPB are TaskCreated's conversions,
// which the records that create several tasks use for each.
func taskCreatedInto(r *state.TaskCreated, m *recordpb.TaskCreated) {
	*m = recordpb.TaskCreated{
		By:                   r.By,
		TaskId:               r.TaskID,
		Namespace:            r.Namespace,
		Queue:                r.Queue,
		Payload:              r.Payload,
		ExecutionWindowNanos: int64(r.ExecutionWindow),
		RetryPolicy:          retryPolicyInto(m.RetryPolicy, r.Retry),
		RequestId:            r.RequestID,
		NotBeforeUnixNanos:   int64(r.NotBefore),
		Priority:             r.Priority,
		CreatedAtUnixNanos:   int64(r.CreatedAt),
		DeadlineUnixNanos:    int64(r.Deadline),
		Traceparent:          r.Trace.Parent,
		Tracestate:           r.Trace.State,
		Kind:                 r.Kind,
		Key:                  r.Key,
		DependsOn:            r.DependsOn,
		OnDependencyFailure:  recordpb.DependencyFailure(r.OnDependencyFailure),
		Remote:               r.Remote,
	}
}

func taskCreatedFromPB(m *recordpb.TaskCreated) *state.TaskCreated {
	return &state.TaskCreated{
		By:                  m.By,
		TaskID:              m.TaskId,
		Namespace:           m.Namespace,
		Queue:               m.Queue,
		Payload:             noEmpty(m.Payload),
		ExecutionWindow:     time.Duration(m.ExecutionWindowNanos),
		Retry:               retryPolicyFromPB(m.RetryPolicy),
		RequestID:           m.RequestId,
		NotBefore:           state.Time(m.NotBeforeUnixNanos),
		Priority:            m.Priority,
		CreatedAt:           state.Time(m.CreatedAtUnixNanos),
		Deadline:            state.Time(m.DeadlineUnixNanos),
		Trace:               state.TraceContext{Parent: m.Traceparent, State: m.Tracestate},
		Kind:                m.Kind,
		Key:                 m.Key,
		DependsOn:           noEmptyStrings(m.DependsOn),
		OnDependencyFailure: clampPolicy(m.OnDependencyFailure),
		Remote:              noEmptyIndexes(m.Remote),
	}
}

// noEmptyIndexes is v, or nil for an empty list.
func noEmptyIndexes(v []uint32) []uint32 {
	if len(v) == 0 {
		return nil
	}
	return v
}

// taskCreatedsToPB converts a list of TaskCreated, reusing the messages
// of into (what an Encoder encoded before) where it can; none is nil.
func taskCreatedsToPB(into []*recordpb.TaskCreated, rs []state.TaskCreated) []*recordpb.TaskCreated {
	if len(rs) == 0 {
		return nil
	}
	out := into[:0]
	for i := range rs {
		var m *recordpb.TaskCreated
		if i < len(into) && into[i] != nil {
			m = into[i]
		} else {
			m = new(recordpb.TaskCreated)
		}
		taskCreatedInto(&rs[i], m)
		out = append(out, m)
	}
	return out
}

func taskCreatedsFromPB(ms []*recordpb.TaskCreated) []state.TaskCreated {
	if len(ms) == 0 {
		return nil
	}
	out := make([]state.TaskCreated, len(ms))
	for i, m := range ms {
		out[i] = *taskCreatedFromPB(m)
	}
	return out
}

// keyWeightsToPB and keyWeightsFromPB convert the key weights a
// QueueLimited carries (none: nil).
func keyWeightsToPB(ws []state.KeyWeight) []*recordpb.KeyWeight {
	if len(ws) == 0 {
		return nil
	}
	out := make([]*recordpb.KeyWeight, len(ws))
	for i, w := range ws {
		out[i] = &recordpb.KeyWeight{Key: w.Key, Weight: w.Weight}
	}
	return out
}

func keyWeightsFromPB(ms []*recordpb.KeyWeight) []state.KeyWeight {
	if len(ms) == 0 {
		return nil
	}
	out := make([]state.KeyWeight, len(ms))
	for i, m := range ms {
		out[i] = state.KeyWeight{Key: m.GetKey(), Weight: m.GetWeight()}
	}
	return out
}

// noEmptyStrings returns vs, or nil if it is empty.
func noEmptyStrings(vs []string) []string {
	if len(vs) == 0 {
		return nil
	}
	return vs
}

// clampPolicy converts a dependency failure policy. A proto3 enum holds
// any int32, so a number beyond uint8 becomes 255, which apply refuses.
func clampPolicy(p recordpb.DependencyFailure) state.DepPolicy {
	if p < 0 || p > 255 {
		return 255
	}
	return state.DepPolicy(p)
}

// retryPolicyToPB and retryPolicyFromPB convert the retry policy that
// TaskCreated carries. A zero policy is no message at all, so that a zero
// record encodes to nothing.
func retryPolicyToPB(p state.RetryPolicy) *recordpb.RetryPolicy {
	return retryPolicyInto(nil, p)
}

// retryPolicyInto is retryPolicyToPB writing into m if it is not nil (the
// message of the record an Encoder encoded before).
func retryPolicyInto(m *recordpb.RetryPolicy, p state.RetryPolicy) *recordpb.RetryPolicy {
	if p == (state.RetryPolicy{}) {
		return nil
	}
	if m == nil {
		m = new(recordpb.RetryPolicy)
	}
	*m = recordpb.RetryPolicy{
		MaxAttempts:         p.MaxAttempts,
		InitialBackoffNanos: int64(p.InitialBackoff),
		MaxBackoffNanos:     int64(p.MaxBackoff),
		Multiplier:          p.Multiplier,
	}
	return m
}

func retryPolicyFromPB(m *recordpb.RetryPolicy) state.RetryPolicy {
	return state.RetryPolicy{
		MaxAttempts:    m.GetMaxAttempts(),
		InitialBackoff: time.Duration(m.GetInitialBackoffNanos()),
		MaxBackoff:     time.Duration(m.GetMaxBackoffNanos()),
		Multiplier:     m.GetMultiplier(),
	}
}

// clampAction converts an action number. A proto3 enum holds any int32, so
// a number beyond uint8 becomes 255, which apply refuses as unknown, instead
// of wrapping around to a known action.
func clampAction(a recordpb.LeaseAction) state.Action {
	if a < 0 || a > 255 {
		return 255
	}
	return state.Action(a)
}

// noEmpty returns b, or nil if b is empty, so that a record decodes to the
// same value whether an empty byte field was omitted or written.
func noEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// row is one record type of the registry, its conversions wrapped to work
// on any record and any payload.
type row struct {
	typ    Type
	name   string
	goType reflect.Type // a pointer to the internal/state struct
	// typeID identifies goType for rowOf: the address of its type
	// descriptor, which is unique and never moves.
	typeID uintptr
	// newMsg returns an empty message of the type's record.proto message.
	newMsg func() proto.Message
	// toPB returns the message of a record of goType (nil for a nil
	// pointer).
	toPB func(state.Record) proto.Message
	// fill sets every field of m, a message of the type's (newMsg), from
	// a record of goType, and reports whether it did (not for a nil
	// pointer); nothing of what m held before is kept but nested messages,
	// which it may reuse.
	fill func(r state.Record, m proto.Message) bool
	// decode parses a payload into a new record.
	decode func(payload []byte) (state.Record, error)
}

// entry makes the row of record type typ from the two conversions between
// its state struct R and its message M; the conversions' signatures name
// both types.
func entry[R any, PR interface {
	*R
	state.Record
}, M any, PM interface {
	*M
	proto.Message
}](typ Type, name string, toPB func(PR, PM), fromPB func(PM) PR) row {
	return row{
		typ:    typ,
		name:   name,
		goType: reflect.TypeFor[PR](),
		typeID: typeID(reflect.TypeFor[PR]()),
		newMsg: func() proto.Message { return PM(new(M)) },
		toPB: func(r state.Record) proto.Message {
			p := r.(PR)
			if p == nil {
				return nil
			}
			m := PM(new(M))
			toPB(p, m)
			return m
		},
		fill: func(r state.Record, m proto.Message) bool {
			p := r.(PR)
			if p == nil {
				return false
			}
			toPB(p, m.(PM))
			return true
		},
		decode: func(payload []byte) (state.Record, error) {
			// proto.Unmarshal copies bytes and string fields out of
			// payload, so the record shares no memory with it.
			m := PM(new(M))
			if err := proto.Unmarshal(payload, m); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, name, err)
			}
			return fromPB(m), nil
		},
	}
}

// byType indexes the registry by number, for Decode and Type.String: a
// WAL replay decodes every record, so the lookup is one bounds check and
// one load.
var byType = index(registry)

func init() {
	if errs := checkRegistry(registry); len(errs) > 0 {
		panic(fmt.Sprintf("record: the registry in internal/record/registry.go is inconsistent: %v", errors.Join(errs...)))
	}
}

// index returns rows indexed by number (nil where no row has the number).
func index(rows []row) []*row {
	n := 0
	for _, r := range rows {
		n = max(n, int(r.typ)+1)
	}
	out := make([]*row, n)
	for i := range rows {
		out[rows[i].typ] = &rows[i]
	}
	return out
}

// checkRegistry returns every problem of a table of rows: numbers and names
// must be set and unique, and so must the Go types and messages.
func checkRegistry(rows []row) []error {
	var errs []error
	numbers := map[Type]string{}
	names := map[string]Type{}
	goTypes := map[reflect.Type]string{}
	msgs := map[string]string{}
	for _, r := range rows {
		if r.typ == 0 {
			errs = append(errs, fmt.Errorf("row %q has number 0, which no record may have (zeroed disk must not decode as a record): give it the next free number", r.name))
		} else if other, dup := numbers[r.typ]; dup {
			errs = append(errs, fmt.Errorf("rows %q and %q share number %d: a new record type takes the next free number", other, r.name, r.typ))
		}
		numbers[r.typ] = r.name
		if r.name == "" {
			errs = append(errs, fmt.Errorf("row %d has no name: name it after its record", r.typ))
		} else if other, dup := names[r.name]; dup {
			errs = append(errs, fmt.Errorf("rows %d and %d share name %q: every record type has its own name", other, r.typ, r.name))
		}
		names[r.name] = r.typ
		if other, dup := goTypes[r.goType]; dup {
			errs = append(errs, fmt.Errorf("rows %q and %q share Go type %v: each internal/state record has one row", other, r.name, r.goType))
		}
		goTypes[r.goType] = r.name
		msg := string(r.newMsg().ProtoReflect().Descriptor().FullName())
		if other, dup := msgs[msg]; dup {
			errs = append(errs, fmt.Errorf("rows %q and %q share message %s: each record type has its own message in record.proto", other, r.name, msg))
		}
		msgs[msg] = r.name
	}
	return errs
}

// rowOf returns the row of r's Go type, or nil. Encode calls it for every
// record, so it compares type descriptor addresses: a scan of the table
// costs 4 to 9 ns, where comparing reflect.Type interfaces costs up to
// 40 ns and a map lookup about 20 ns.
func rowOf(r state.Record) *row {
	id := typeID(reflect.TypeOf(r))
	for i := range registry {
		if registry[i].typeID == id {
			return &registry[i]
		}
	}
	return nil
}

// typeID is the address of t's type descriptor (0 for a nil t).
func typeID(t reflect.Type) uintptr {
	if t == nil {
		return 0
	}
	return reflect.ValueOf(t).Pointer()
}

// TypeOf returns the type number of r, or 0 if r's type has no row in the
// registry.
func TypeOf(r state.Record) Type {
	if row := rowOf(r); row != nil {
		return row.typ
	}
	return 0
}

// String returns the name of the record type (such as "TaskCreated"), or
// Type(N) for a number that is not in the registry.
func (t Type) String() string {
	if int(t) < len(byType) && byType[t] != nil {
		return byType[t].name
	}
	return fmt.Sprintf("Type(%d)", uint16(t))

}

// Types returns every record type of the registry, in order of number.
func Types() []Type {
	out := make([]Type, 0, len(registry))
	for t, r := range byType {
		if r != nil {
			out = append(out, Type(t))
		}
	}
	return out
}

// ParseType returns the record type named name (as Type.String names it).
func ParseType(name string) (Type, bool) {
	for t, r := range byType {
		if r != nil && r.name == name {
			return Type(t), true
		}
	}
	return 0, false
}
