package remote

import (
	"fmt"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The conversions below are the inverses of package server's (convert.go):
// what server reads from a request is what we write, and what server writes
// into an answer is what we read back.

// optDuration is an optional API duration: nil for 0, which server reads
// back as 0.
func optDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// optTimestamp is an optional API time: nil for the zero time.
func optTimestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// stateTime inverts server's ts: nil is 0.
func stateTime(t *timestamppb.Timestamp) state.Time {
	if t == nil {
		return 0
	}
	return state.TimeOf(t.AsTime())
}

// stdTime inverts server's stdTS: nil is the zero time; others are UTC, as
// the coordinator gives them (state.Time.Std).
func stdTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func submitRequest(r coordinator.SubmitRequest) *tenurev1.SubmitRequest {
	out := &tenurev1.SubmitRequest{
		Namespace:       r.Namespace,
		Queue:           r.Queue,
		Payload:         r.Payload,
		RequestId:       r.RequestID,
		ExecutionWindow: optDuration(r.ExecutionWindow),
		NotBefore:       optTimestamp(r.NotBefore),
		Priority:        r.Priority,
	}
	if r.Retry != (state.RetryPolicy{}) {
		out.RetryPolicy = &tenurev1.RetryPolicy{
			MaxAttempts:       r.Retry.MaxAttempts,
			InitialBackoff:    optDuration(r.Retry.InitialBackoff),
			MaxBackoff:        optDuration(r.Retry.MaxBackoff),
			BackoffMultiplier: r.Retry.Multiplier,
		}
	}
	return out
}

var apiTaskStates = map[state.TaskState]tenurev1.TaskState{
	state.Waiting:   tenurev1.TaskState_TASK_STATE_WAITING,
	state.Leased:    tenurev1.TaskState_TASK_STATE_LEASED,
	state.Committed: tenurev1.TaskState_TASK_STATE_COMMITTED,
	state.Completed: tenurev1.TaskState_TASK_STATE_COMPLETED,
	state.Failed:    tenurev1.TaskState_TASK_STATE_FAILED,
	state.Dead:      tenurev1.TaskState_TASK_STATE_DEAD,
}

// taskState converts an answered task state; UNSPECIFIED and unknown
// values are errors.
func taskState(s tenurev1.TaskState) (state.TaskState, error) {
	st, ok := server.TaskState(s)
	if !ok || st == 0 {
		return 0, fmt.Errorf("task state %v is not one this node knows", s)
	}
	return st, nil
}

var execStatuses = map[tenurev1.ExecutionStatus]state.ExecStatus{
	tenurev1.ExecutionStatus_EXECUTION_STATUS_LEASED:      state.ExecLeased,
	tenurev1.ExecutionStatus_EXECUTION_STATUS_IN_PROGRESS: state.ExecInProgress,
	tenurev1.ExecutionStatus_EXECUTION_STATUS_COMMITTED:   state.ExecCommitted,
	tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE:        state.ExecDone,
	tenurev1.ExecutionStatus_EXECUTION_STATUS_ABORTED:     state.ExecAborted,
}

// task inverts server's task. The API carries every field of a state.Task
// but CreatedLSN and LSNs; CommittedBy, Execution.Finalize and the current
// lease are derived (see the package comment).
func task(p *tenurev1.Task) (*state.Task, error) {
	if p == nil {
		return nil, fmt.Errorf("the answer holds no task")
	}
	st, err := taskState(p.GetState())
	if err != nil {
		return nil, fmt.Errorf("task %q: %w", p.GetTaskId(), err)
	}
	rp := p.GetRetryPolicy()
	t := &state.Task{
		ID:        p.GetTaskId(),
		Namespace: p.GetNamespace(),
		Queue:     p.GetQueue(),
		Payload:   p.GetPayload(),
		Window:    p.GetExecutionWindow().AsDuration(),
		Retry: state.RetryPolicy{
			MaxAttempts:    rp.GetMaxAttempts(),
			InitialBackoff: rp.GetInitialBackoff().AsDuration(),
			MaxBackoff:     rp.GetMaxBackoff().AsDuration(),
			Multiplier:     rp.GetBackoffMultiplier(),
		},
		RequestID:     p.GetRequestId(),
		Priority:      p.GetPriority(),
		NotBefore:     stateTime(p.GetNotBefore()),
		CreatedAt:     stateTime(p.GetCreatedAt()),
		UpdatedAt:     stateTime(p.GetUpdatedAt()),
		State:         st,
		Attempt:       p.GetAttempt(),
		Result:        p.GetResult(),
		FailureReason: p.GetFailureReason(),
	}
	lease := -1
	committed := false
	for i, e := range p.GetExecutions() {
		status, ok := execStatuses[e.GetStatus()]
		if !ok {
			return nil, fmt.Errorf("task %q: execution %d has status %v, not one this node knows", t.ID, i, e.GetStatus())
		}
		x := state.Execution{
			Attempt:  e.GetAttempt(),
			LeaseID:  e.GetLeaseId(),
			WorkerID: e.GetWorkerId(),
			Status:   status,
			// A lease granted after the task's commit only finalises it.
			Finalize:    committed,
			LeasedAt:    stateTime(e.GetLeasedAt()),
			LeaseExpiry: stateTime(e.GetLeaseExpiry()),
			StartedAt:   stateTime(e.GetStartedAt()),
			CommittedAt: stateTime(e.GetCommittedAt()),
			FinishedAt:  stateTime(e.GetFinishedAt()),
			Reason:      e.GetReason(),
		}
		if x.CommittedAt != 0 {
			committed = true
			t.CommittedBy = x.LeaseID
		}
		if p.GetLeaseId() != "" && x.LeaseID == p.GetLeaseId() {
			lease = i
		}
		t.Executions = append(t.Executions, x)
	}
	if p.GetLeaseId() != "" && lease < 0 {
		return nil, fmt.Errorf("task %q: its current lease %q is none of its executions", t.ID, p.GetLeaseId())
	}
	return withLease(t, lease)
}

// withLease returns a copy of t whose current lease is t.Executions[lease]
// (-1: none). The current lease is unexported state of a Task that only
// the state package sets; its Loader sets it for a task restored from a
// snapshot, after checking the task as a snapshot's, so t passes through a
// throwaway Loader. The API carries no log positions, so the task is
// given creation LSN 1 for the check and none after it.
func withLease(t *state.Task, lease int) (*state.Task, error) {
	t.CreatedLSN, t.LSNs = 1, []uint64{1}
	if err := state.NewLoader(1, 0).Add(t, lease); err != nil {
		return nil, fmt.Errorf("task %q is not consistent: %w", t.ID, err)
	}
	out := t.Clone() // leaves the Loader's indexes behind
	out.CreatedLSN, out.LSNs = 0, nil
	return out, nil
}

func lease(p *tenurev1.LeasedTask, workerID string) coordinator.Lease {
	return coordinator.Lease{
		TaskID:          p.GetTaskId(),
		Namespace:       p.GetNamespace(),
		Queue:           p.GetQueue(),
		Payload:         p.GetPayload(),
		LeaseID:         p.GetLeaseId(),
		WorkerID:        workerID,
		Attempt:         p.GetAttempt(),
		LeaseExpiry:     stdTime(p.GetLeaseExpiry()),
		Window:          p.GetExecutionWindow().AsDuration(),
		Committed:       p.GetCommitted(),
		CommittedResult: p.GetCommittedResult(),
	}
}
