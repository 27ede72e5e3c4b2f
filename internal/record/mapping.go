package record

import (
	"time"

	"github.com/tenurehq/tenure/internal/record/recordpb"
	"github.com/tenurehq/tenure/internal/state"
)

// One pair of functions per record type: xToPB and xFromPB copy every field,
// one to one. Times are Unix nanoseconds and durations nanoseconds on both
// sides, so the copies are plain conversions. A new field in a state struct
// needs a new proto field and a line in both functions; the round-trip test
// fails until all three exist.

func retryPolicyToPB(p state.RetryPolicy) *recordpb.RetryPolicy {
	if p == (state.RetryPolicy{}) {
		return nil
	}
	return &recordpb.RetryPolicy{
		MaxAttempts:         p.MaxAttempts,
		InitialBackoffNanos: int64(p.InitialBackoff),
		MaxBackoffNanos:     int64(p.MaxBackoff),
		Multiplier:          p.Multiplier,
	}
}

func retryPolicyFromPB(m *recordpb.RetryPolicy) state.RetryPolicy {
	return state.RetryPolicy{
		MaxAttempts:    m.GetMaxAttempts(),
		InitialBackoff: time.Duration(m.GetInitialBackoffNanos()),
		MaxBackoff:     time.Duration(m.GetMaxBackoffNanos()),
		Multiplier:     m.GetMultiplier(),
	}
}

func taskCreatedToPB(r *state.TaskCreated) *recordpb.TaskCreated {
	return &recordpb.TaskCreated{
		TaskId:               r.TaskID,
		Namespace:            r.Namespace,
		Queue:                r.Queue,
		Payload:              r.Payload,
		ExecutionWindowNanos: int64(r.ExecutionWindow),
		RetryPolicy:          retryPolicyToPB(r.Retry),
		RequestId:            r.RequestID,
		NotBeforeUnixNanos:   int64(r.NotBefore),
		Priority:             r.Priority,
		CreatedAtUnixNanos:   int64(r.CreatedAt),
	}
}

func taskCreatedFromPB(m *recordpb.TaskCreated) *state.TaskCreated {
	return &state.TaskCreated{
		TaskID:          m.TaskId,
		Namespace:       m.Namespace,
		Queue:           m.Queue,
		Payload:         noEmpty(m.Payload),
		ExecutionWindow: time.Duration(m.ExecutionWindowNanos),
		Retry:           retryPolicyFromPB(m.RetryPolicy),
		RequestID:       m.RequestId,
		NotBefore:       state.Time(m.NotBeforeUnixNanos),
		Priority:        m.Priority,
		CreatedAt:       state.Time(m.CreatedAtUnixNanos),
	}
}

func leaseGrantedToPB(r *state.LeaseGranted) *recordpb.LeaseGranted {
	return &recordpb.LeaseGranted{
		TaskId:               r.TaskID,
		LeaseId:              r.LeaseID,
		WorkerId:             r.WorkerID,
		Attempt:              r.Attempt,
		LeaseExpiryUnixNanos: int64(r.LeaseExpiry),
		GrantedAtUnixNanos:   int64(r.GrantedAt),
	}
}

func leaseGrantedFromPB(m *recordpb.LeaseGranted) *state.LeaseGranted {
	return &state.LeaseGranted{
		TaskID:      m.TaskId,
		LeaseID:     m.LeaseId,
		WorkerID:    m.WorkerId,
		Attempt:     m.Attempt,
		LeaseExpiry: state.Time(m.LeaseExpiryUnixNanos),
		GrantedAt:   state.Time(m.GrantedAtUnixNanos),
	}
}

func leaseExtendedToPB(r *state.LeaseExtended) *recordpb.LeaseExtended {
	return &recordpb.LeaseExtended{
		TaskId:                  r.TaskID,
		LeaseId:                 r.LeaseID,
		NewLeaseExpiryUnixNanos: int64(r.NewLeaseExpiry),
		AtUnixNanos:             int64(r.At),
	}
}

func leaseExtendedFromPB(m *recordpb.LeaseExtended) *state.LeaseExtended {
	return &state.LeaseExtended{
		TaskID:         m.TaskId,
		LeaseID:        m.LeaseId,
		NewLeaseExpiry: state.Time(m.NewLeaseExpiryUnixNanos),
		At:             state.Time(m.AtUnixNanos),
	}
}

func leaseExpiredToPB(r *state.LeaseExpired) *recordpb.LeaseExpired {
	return &recordpb.LeaseExpired{
		TaskId:           r.TaskID,
		LeaseId:          r.LeaseID,
		AtUnixNanos:      int64(r.At),
		RetryAtUnixNanos: int64(r.RetryAt),
	}
}

func leaseExpiredFromPB(m *recordpb.LeaseExpired) *state.LeaseExpired {
	return &state.LeaseExpired{
		TaskID:  m.TaskId,
		LeaseID: m.LeaseId,
		At:      state.Time(m.AtUnixNanos),
		RetryAt: state.Time(m.RetryAtUnixNanos),
	}
}

func executionStartedToPB(r *state.ExecutionStarted) *recordpb.ExecutionStarted {
	return &recordpb.ExecutionStarted{
		TaskId:      r.TaskID,
		LeaseId:     r.LeaseID,
		AtUnixNanos: int64(r.At),
	}
}

func executionStartedFromPB(m *recordpb.ExecutionStarted) *state.ExecutionStarted {
	return &state.ExecutionStarted{
		TaskID:  m.TaskId,
		LeaseID: m.LeaseId,
		At:      state.Time(m.AtUnixNanos),
	}
}

func taskCommittedToPB(r *state.TaskCommitted) *recordpb.TaskCommitted {
	return &recordpb.TaskCommitted{
		TaskId:      r.TaskID,
		LeaseId:     r.LeaseID,
		Result:      r.Result,
		AtUnixNanos: int64(r.At),
	}
}

func taskCommittedFromPB(m *recordpb.TaskCommitted) *state.TaskCommitted {
	return &state.TaskCommitted{
		TaskID:  m.TaskId,
		LeaseID: m.LeaseId,
		Result:  noEmpty(m.Result),
		At:      state.Time(m.AtUnixNanos),
	}
}

func taskCompletedToPB(r *state.TaskCompleted) *recordpb.TaskCompleted {
	return &recordpb.TaskCompleted{
		TaskId:      r.TaskID,
		LeaseId:     r.LeaseID,
		Result:      r.Result,
		AtUnixNanos: int64(r.At),
	}
}

func taskCompletedFromPB(m *recordpb.TaskCompleted) *state.TaskCompleted {
	return &state.TaskCompleted{
		TaskID:  m.TaskId,
		LeaseID: m.LeaseId,
		Result:  noEmpty(m.Result),
		At:      state.Time(m.AtUnixNanos),
	}
}

func taskFailedToPB(r *state.TaskFailed) *recordpb.TaskFailed {
	return &recordpb.TaskFailed{
		TaskId:           r.TaskID,
		LeaseId:          r.LeaseID,
		Reason:           r.Reason,
		RetryAtUnixNanos: int64(r.RetryAt),
		Permanent:        r.Permanent,
		AtUnixNanos:      int64(r.At),
	}
}

func taskFailedFromPB(m *recordpb.TaskFailed) *state.TaskFailed {
	return &state.TaskFailed{
		TaskID:    m.TaskId,
		LeaseID:   m.LeaseId,
		Reason:    m.Reason,
		RetryAt:   state.Time(m.RetryAtUnixNanos),
		Permanent: m.Permanent,
		At:        state.Time(m.AtUnixNanos),
	}
}

func taskCancelledToPB(r *state.TaskCancelled) *recordpb.TaskCancelled {
	return &recordpb.TaskCancelled{
		TaskId:      r.TaskID,
		LeaseId:     r.LeaseID,
		Reason:      r.Reason,
		AtUnixNanos: int64(r.At),
	}
}

func taskCancelledFromPB(m *recordpb.TaskCancelled) *state.TaskCancelled {
	return &state.TaskCancelled{
		TaskID:  m.TaskId,
		LeaseID: m.LeaseId,
		Reason:  m.Reason,
		At:      state.Time(m.AtUnixNanos),
	}
}

func taskDeadToPB(r *state.TaskDead) *recordpb.TaskDead {
	return &recordpb.TaskDead{
		TaskId:      r.TaskID,
		Reason:      r.Reason,
		AtUnixNanos: int64(r.At),
	}
}

func taskDeadFromPB(m *recordpb.TaskDead) *state.TaskDead {
	return &state.TaskDead{
		TaskID: m.TaskId,
		Reason: m.Reason,
		At:     state.Time(m.AtUnixNanos),
	}
}

func fenceToPB(r *state.Fence) *recordpb.Fence {
	return &recordpb.Fence{
		Epoch:       r.Epoch,
		NodeId:      r.NodeID,
		AtUnixNanos: int64(r.At),
	}
}

func fenceFromPB(m *recordpb.Fence) *state.Fence {
	return &state.Fence{
		Epoch:  m.Epoch,
		NodeID: m.NodeId,
		At:     state.Time(m.AtUnixNanos),
	}
}

func tasksPurgedToPB(r *state.TasksPurged) *recordpb.TasksPurged {
	return &recordpb.TasksPurged{
		BeforeUnixNanos: int64(r.Before),
		AtUnixNanos:     int64(r.At),
	}
}

func tasksPurgedFromPB(m *recordpb.TasksPurged) *state.TasksPurged {
	return &state.TasksPurged{
		Before: state.Time(m.BeforeUnixNanos),
		At:     state.Time(m.AtUnixNanos),
	}
}
