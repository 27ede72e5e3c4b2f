package state

import "time"

// TaskState is the coarse, user-facing state of a task.
type TaskState uint8

const (
	// Waiting: schedulable once NotBefore has passed; no lease.
	Waiting TaskState = iota + 1
	// Leased: one attempt holds the current lease; nothing committed yet.
	Leased
	// Committed: one attempt committed its result. The task never returns
	// to Waiting; if its lease expires it is offered again only to be
	// finalised.
	Committed
	// Completed is terminal: done, with its committed result.
	Completed
	// Failed is terminal: attempts ran out or the worker said the failure
	// is permanent.
	Failed
	// Dead is terminal: killed by an administrator.
	Dead
)

var taskStateNames = [...]string{"UNSPECIFIED", "WAITING", "LEASED", "COMMITTED", "COMPLETED", "FAILED", "DEAD"}

func (s TaskState) String() string {
	if int(s) < len(taskStateNames) {
		return taskStateNames[s]
	}
	return "INVALID"
}

// Terminal reports whether no record can change the state any more.
func (s TaskState) Terminal() bool { return s == Completed || s == Failed || s == Dead }

// ExecStatus is the status of one execution (attempt), derived from the
// records that touched its lease.
type ExecStatus uint8

const (
	ExecLeased ExecStatus = iota + 1
	ExecInProgress
	ExecCommitted
	ExecDone
	ExecAborted
)

var execStatusNames = [...]string{"UNSPECIFIED", "LEASED", "IN_PROGRESS", "COMMITTED", "DONE", "ABORTED"}

func (s ExecStatus) String() string {
	if int(s) < len(execStatusNames) {
		return execStatusNames[s]
	}
	return "INVALID"
}

// ReasonLeaseExpired is the Reason of an execution aborted by LeaseExpired.
const ReasonLeaseExpired = "lease expired"

// Execution is one attempt of a task under one lease.
//
// Its fields are ordered so that it is 96 bytes (a size class), with the
// small ones sharing the first word: one byte of padding is left.
type Execution struct {
	Attempt uint32
	Status  ExecStatus
	// Finalize marks a lease granted only to finalise a task that an
	// earlier attempt committed: its worker re-applies the idempotent
	// effect and completes; it never re-executes the work.
	Finalize bool
	// Refused holds the actions of this lease whose refusal a TaskCancelled
	// recorded, once the lease had lost authority: each is recorded once.
	Refused     ActionSet
	LeaseID     string
	WorkerID    string
	LeasedAt    Time
	LeaseExpiry Time
	StartedAt   Time
	CommittedAt Time
	FinishedAt  Time
	// Reason says why the execution was aborted, if it was.
	Reason string
}

// Task is the authoritative record of one task, derived only from records.
// Callers outside this package must treat a *Task as read-only.
//
// A State holds one Task per task it knows, so its size matters: the small
// fields are grouped at the end so that it has no padding beyond
// RetryPolicy's own (288 bytes, a size class).
type Task struct {
	ID        string
	Namespace string
	Queue     string
	Payload   []byte
	Window    time.Duration
	Retry     RetryPolicy
	RequestID string
	// NotBefore is the earliest lease time while Waiting (a retry moves it).
	NotBefore  Time
	CreatedAt  Time
	UpdatedAt  Time
	CreatedLSN uint64

	// Result is the committed (or completed) result.
	Result []byte
	// CommittedBy is the lease id whose commit won ("" before any commit).
	CommittedBy   string
	FailureReason string
	Executions    []Execution
	// LSNs lists every record that touched the task, in log order.
	LSNs []uint64

	Priority int32
	State    TaskState
	// delayed says which heap of its queue holds a schedulable task.
	delayed bool
	// Attempt is the number of leases granted so far.
	Attempt uint32
	// AttemptBase is Attempt when the task was last retried by an operator
	// (TaskRetried), 0 before: the retry policy's budget counts the
	// attempts after it.
	AttemptBase uint32
	// cur indexes Executions for the current lease, -1 when unleased.
	cur int32
	// heapIdx is the task's position in whichever heap holds it (queue
	// ready/delayed heap while schedulable, expiry heap while leased).
	heapIdx int32
}

// ExecutionOf returns the execution under lease leaseID, or nil if the
// task never had that lease.
func (t *Task) ExecutionOf(leaseID string) *Execution {
	for i := range t.Executions {
		if t.Executions[i].LeaseID == leaseID {
			return &t.Executions[i]
		}
	}
	return nil
}

// CurrentLease returns the execution that holds the current lease, or nil.
func (t *Task) CurrentLease() *Execution {
	if t.cur < 0 {
		return nil
	}
	return &t.Executions[t.cur]
}

// AttemptsUsed is the number of attempts the retry policy's budget has
// spent: those since the last operator retry.
func (t *Task) AttemptsUsed() uint32 { return t.Attempt - t.AttemptBase }

// AttemptsLeft reports whether the retry policy allows another attempt.
func (t *Task) AttemptsLeft() bool { return t.AttemptsUsed() < t.Retry.MaxAttempts }

// Schedulable reports whether the task may receive a lease (ignoring
// NotBefore): waiting, or committed without a lease (to be finalised).
func (t *Task) Schedulable() bool {
	return t.State == Waiting || (t.State == Committed && t.cur < 0)
}

// Clone returns a deep copy that shares nothing with the state.
func (t *Task) Clone() *Task {
	c := *t
	c.Payload = cloneBytes(t.Payload)
	c.Result = cloneBytes(t.Result)
	c.Executions = append([]Execution(nil), t.Executions...)
	c.LSNs = append([]uint64(nil), t.LSNs...)
	c.heapIdx = -1
	c.delayed = false
	return &c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
