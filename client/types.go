package client

import (
	"strconv"
	"time"
)

// TaskState is the coarse state of a task:
//
//	WAITING -> LEASED -> (COMMITTED) -> COMPLETED, or FAILED / DEAD
//
// The values are the API's enum numbers (tenure.v1.TaskState).
type TaskState uint8

const (
	// TaskStateUnspecified is not a state. As ListTasksRequest.State: any
	// state.
	TaskStateUnspecified TaskState = iota
	// TaskStateWaiting: schedulable once NotBefore has passed; no lease.
	TaskStateWaiting
	// TaskStateLeased: an attempt holds the current lease; nothing is
	// committed yet.
	TaskStateLeased
	// TaskStateCommitted: an attempt committed its result. The task never
	// runs its work again: if the lease expires before Complete, it is
	// leased again only to be finalised (LeasedTask.Committed).
	TaskStateCommitted
	// TaskStateCompleted is terminal: done, with its result.
	TaskStateCompleted
	// TaskStateFailed is terminal: attempts ran out, or a worker said the
	// failure is permanent.
	TaskStateFailed
	// TaskStateDead is terminal: killed with KillTask.
	TaskStateDead
)

var taskStateNames = [...]string{"UNSPECIFIED", "WAITING", "LEASED", "COMMITTED", "COMPLETED", "FAILED", "DEAD"}

// String returns the state's name as the API spells it without its
// prefix: "WAITING", "LEASED", ...
func (s TaskState) String() string {
	if int(s) < len(taskStateNames) {
		return taskStateNames[s]
	}
	return "TaskState(" + strconv.Itoa(int(s)) + ")"
}

// ExecutionStatus is the status of one attempt:
//
//	LEASED -> IN_PROGRESS -> COMMITTED -> DONE, or ABORTED
//
// The values are the API's enum numbers (tenure.v1.ExecutionStatus).
type ExecutionStatus uint8

const (
	// ExecutionStatusUnspecified is not a status.
	ExecutionStatusUnspecified ExecutionStatus = iota
	// ExecutionStatusLeased: the lease was granted; the worker has not
	// reported Start.
	ExecutionStatusLeased
	// ExecutionStatusInProgress: the worker reported Start.
	ExecutionStatusInProgress
	// ExecutionStatusCommitted: this attempt's Commit won; its effects may
	// be applied.
	ExecutionStatusCommitted
	// ExecutionStatusDone: this attempt completed the task.
	ExecutionStatusDone
	// ExecutionStatusAborted: the attempt ended without success (its lease
	// expired before a commit, it failed, or the task was killed); see
	// Execution.Reason.
	ExecutionStatusAborted
)

var executionStatusNames = [...]string{"UNSPECIFIED", "LEASED", "IN_PROGRESS", "COMMITTED", "DONE", "ABORTED"}

// String returns the status's name as the API spells it without its
// prefix: "LEASED", "IN_PROGRESS", ...
func (s ExecutionStatus) String() string {
	if int(s) < len(executionStatusNames) {
		return executionStatusNames[s]
	}
	return "ExecutionStatus(" + strconv.Itoa(int(s)) + ")"
}

// Task is a task as the server knows it (GetTask, ListTasks, Submit).
// Times the server did not set are zero.
type Task struct {
	ID        string
	Namespace string
	Queue     string
	Payload   []byte
	State     TaskState
	// Attempt is the number of leases granted so far (0 before the first).
	Attempt uint32
	// Priority orders leasing within the queue: higher first.
	Priority int32
	// RequestID is the idempotency key given at submit ("" for none).
	RequestID string
	// ExecutionWindow is the lease duration granted per attempt and per
	// heartbeat.
	ExecutionWindow time.Duration
	// RetryPolicy is the policy in force, the server's defaults filled in.
	RetryPolicy RetryPolicy
	// NotBefore is the earliest time the task may be leased; after a
	// failed attempt, when its retry is due. Zero: at once.
	NotBefore time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
	// Result is the committed or completed result; empty before that.
	Result []byte
	// FailureReason says why the task is FAILED or DEAD.
	FailureReason string
	// LeaseID, WorkerID and LeaseExpiry describe the current lease, if the
	// task has one (LEASED, or COMMITTED and being finalised).
	LeaseID     string
	WorkerID    string
	LeaseExpiry time.Time
	// Executions holds every attempt so far, oldest first.
	Executions []Execution
}

// Execution is one attempt of a task under one lease.
type Execution struct {
	Attempt  uint32 // from 1
	LeaseID  string
	WorkerID string
	Status   ExecutionStatus
	LeasedAt time.Time
	// StartedAt is when the worker reported Start (zero if it did not).
	StartedAt time.Time
	// CommittedAt is when this attempt's commit won (zero if it did not).
	CommittedAt time.Time
	// FinishedAt is when the attempt ended (zero while it runs).
	FinishedAt time.Time
	// LeaseExpiry is the lease's last expiry.
	LeaseExpiry time.Time
	// Reason says why the attempt was aborted.
	Reason string
}

// RetryPolicy decides what a failed or expired attempt leads to. The wait
// before attempt n+1 is InitialBackoff * Multiplier^(n-1), capped at
// MaxBackoff. In a SubmitRequest a zero field takes the server's default
// (3 attempts, 1s initial backoff, 10m cap, multiplier 2).
type RetryPolicy struct {
	MaxAttempts    uint32
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	Multiplier     float64
}

// SubmitRequest describes one task. Zero fields take the server's defaults:
// namespace "default", a 30s execution window, the default retry policy,
// leasable at once, priority 0.
type SubmitRequest struct {
	Namespace string
	Queue     string // required
	Payload   []byte
	// RequestID makes the submission idempotent within the namespace. Empty:
	// the SDK generates a random one, which covers the SDK's own retries
	// only.
	RequestID       string
	ExecutionWindow time.Duration
	// Retry is the task's retry policy; nil takes the server's default.
	Retry     *RetryPolicy
	NotBefore time.Time
	Priority  int32
}

// SubmitBatchRequest holds the tasks of one SubmitBatch call.
type SubmitBatchRequest struct {
	// Requests are the tasks, up to 1000 (the server's default limit).
	Requests []SubmitRequest
	// ReturnTasks asks for every whole task back, in SubmitResult.Task. By
	// default the server answers each task's id only: it does not encode
	// and send every payload back, which saves a large share of the CPU of
	// a batch on both sides. GetTask reads a whole task later.
	ReturnTasks bool
}

// SubmitResult is the answer for one submitted task.
type SubmitResult struct {
	// TaskID is the task created, or with Duplicate the existing one.
	TaskID string
	// Duplicate: the request id was used before; nothing was created.
	Duplicate bool
	// Task is the whole task as stored. Submit always sets it; SubmitBatch
	// only with ReturnTasks (nil otherwise).
	Task *Task
}

// ListTasksRequest selects the tasks of ListTasks. Zero fields: all
// namespaces, all queues, any state, the server's default page size (100).
type ListTasksRequest struct {
	Namespace string
	Queue     string
	State     TaskState
	PageSize  int
	// PageToken is the token ListTasks returned with the previous page,
	// with the same filters; empty for the first page.
	PageToken string
}

// HistoryEntry is one log record that touched a task (GetTaskHistory).
type HistoryEntry struct {
	// LSN is the record's sequence number within its partition's log.
	LSN uint64
	// Type is the record type: "TaskCreated", "LeaseGranted",
	// "LeaseExtended", "LeaseExpired", "ExecutionStarted", "TaskCommitted",
	// "TaskCompleted", "TaskFailed", "TaskCancelled", "TaskDead" or
	// "TaskRetried".
	Type string
	// At is the time the record carries (for TaskCreated the submission,
	// for LeaseGranted the grant, and so on).
	At time.Time
	// LeaseID, WorkerID and Attempt name the lease the record concerns, if
	// any.
	LeaseID  string
	WorkerID string
	Attempt  uint32
	// Detail is a summary for people, e.g. "lease expired; retry not
	// before …". Its wording may change: do not parse it.
	Detail string
	// RequestedBy and Reason say who asked for an operator's action
	// (TaskDead, TaskRetried) and why, as given.
	RequestedBy string
	Reason      string
}

// LeaseRequest asks for tasks of one queue.
type LeaseRequest struct {
	WorkerID  string // required; stable and unique per worker process
	Namespace string // default "default"
	Queue     string // required
	MaxTasks  int    // default (0) 1; the server's limit is 1000 unless configured otherwise
	// Wait is how long to long-poll when no task is ready (0: answer at
	// once; the server caps it at 30s).
	Wait time.Duration
}

// LeasedTask is one task leased to the caller, as Lease answered it. Give
// ID and LeaseID to every later call about it. LeaseExpiry is the expiry
// at lease time: Heartbeat moves the real one.
type LeasedTask struct {
	ID        string
	Namespace string
	Queue     string
	// LeaseID is this attempt's lease.
	LeaseID string
	Payload []byte
	// Attempt is this lease's attempt number, from 1.
	Attempt uint32
	// LeaseExpiry is when the lease is lost unless extended by Heartbeat.
	LeaseExpiry time.Time
	// ExecutionWindow is the lease duration, and each heartbeat's
	// extension.
	ExecutionWindow time.Duration
	// Committed marks a finalisation lease: an earlier attempt committed
	// CommittedResult and lost its lease before completing. Do not run the
	// work again: re-apply its idempotent effects from CommittedResult,
	// then Complete.
	Committed       bool
	CommittedResult []byte
}

// FencingToken identifies the one commit of a task: the task and the
// attempt whose commit won. Key external effects by it (or by TaskID
// alone: a task has at most one commit), so that applying them again, on
// a finalisation lease, has no second effect.
type FencingToken struct {
	TaskID  string
	Attempt uint32
}

// CompleteItem is one completion of CompleteBatch: the arguments of
// Complete.
type CompleteItem struct {
	TaskID  string
	LeaseID string
	Result  []byte
}

// FailResult says what a Fail led to.
type FailResult struct {
	// State is TaskStateWaiting (a retry is scheduled) or TaskStateFailed.
	State TaskState
	// RetryAt is when the retry may be leased; zero unless State is
	// TaskStateWaiting.
	RetryAt time.Time
}
