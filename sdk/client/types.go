package client

import (
	"fmt"
	"strconv"
	"time"
)

// enumName is the name of value v of an enum whose names are names, or
// "Type(v)" for a value this SDK does not know.
func enumName(names []string, v uint8, typ string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}

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
	// TaskStateDead is terminal: killed with KillTask, or ended by a task
	// it depends on that failed (FailureReason "dependency_failed: ...").
	TaskStateDead
	// TaskStateBlocked: waiting for the tasks it depends on
	// (Task.Dependencies) to complete; then WAITING.
	TaskStateBlocked
)

var taskStateNames = [...]string{"UNSPECIFIED", "WAITING", "LEASED", "COMMITTED", "COMPLETED", "FAILED", "DEAD", "BLOCKED"}

// String returns the state's name as the API spells it without its
// prefix: "WAITING", "LEASED", ...
func (s TaskState) String() string { return enumName(taskStateNames[:], uint8(s), "TaskState") }

// Ended reports whether the task has ended: COMPLETED, FAILED or DEAD.
func (s TaskState) Ended() bool {
	return s == TaskStateCompleted || s == TaskStateFailed || s == TaskStateDead
}

// DependencyFailure says what a task does when a task it depends on ends
// FAILED or DEAD (SubmitRequest.OnDependencyFailure). The values are the
// API's enum numbers (tenure.v1.DependencyFailure).
type DependencyFailure uint8

const (
	// DependencyFailureDefault is DependencyFailureDead.
	DependencyFailureDefault DependencyFailure = iota
	// DependencyFailureDead ends the task DEAD at once, and its own
	// dependents with it.
	DependencyFailureDead
	// DependencyFailureRun runs the task once every task it depends on has
	// ended, however; its lease says how each ended.
	DependencyFailureRun
)

// DependencyState is what a task knows of a task it depends on. The
// values are the API's enum numbers (tenure.v1.DependencyState).
type DependencyState uint8

const (
	DependencyStateUnspecified DependencyState = iota
	// DependencyStatePending: it has not ended.
	DependencyStatePending
	// DependencyStateCompleted: it ended COMPLETED.
	DependencyStateCompleted
	// DependencyStateFailed: it ended FAILED or DEAD.
	DependencyStateFailed
)

var dependencyStateNames = [...]string{"UNSPECIFIED", "PENDING", "COMPLETED", "FAILED"}

// String returns the state's name as the API spells it without its
// prefix: "PENDING", "COMPLETED", "FAILED".
func (s DependencyState) String() string {
	return enumName(dependencyStateNames[:], uint8(s), "DependencyState")
}

// Dependency is a task another depends on (Task.Dependencies).
type Dependency struct {
	TaskID string
	State  DependencyState
}

// DependencyResult is a task a leased task depended on, as it ended
// (LeasedTask.Dependencies): its inputs.
type DependencyResult struct {
	TaskID string
	// State is how it ended: COMPLETED, or for a task that runs anyway
	// (DependencyFailureRun) FAILED or DEAD; unspecified if it is no
	// longer kept.
	State TaskState
	// Result is its result when it completed, unless ResultOmitted: it was
	// left out to keep the lease within the payload limit (read it with
	// GetTask).
	Result        []byte
	ResultOmitted bool
}

// ExecutionStatus is the status of one attempt:
//
//	LEASED -> IN_PROGRESS -> COMMITTED -> DONE, or ABORTED, or SNOOZED
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
	// ExecutionStatusSnoozed: the worker snoozed the task; it runs again
	// later, and this attempt did not count (the next execution has the
	// same attempt number). See Execution.Reason.
	ExecutionStatusSnoozed
)

var executionStatusNames = [...]string{"UNSPECIFIED", "LEASED", "IN_PROGRESS", "COMMITTED", "DONE", "ABORTED", "SNOOZED"}

// String returns the status's name as the API spells it without its
// prefix: "LEASED", "IN_PROGRESS", ...
func (s ExecutionStatus) String() string {
	return enumName(executionStatusNames[:], uint8(s), "ExecutionStatus")
}

// Task is a task as the server knows it (GetTask, ListTasks, Submit).
// Times the server did not set are zero.
type Task struct {
	ID        string
	Namespace string
	Queue     string
	// Kind says what kind of work the task is ("" for none): a typed
	// task's Kind(), which workers route it by.
	Kind string
	// Key is the task's key, for the flow control of its queue's keys
	// ("" for none; SubmitRequest.Key).
	Key     string
	Payload []byte
	State   TaskState
	// Attempt is the number of leases granted so far (0 before the first),
	// over the task's whole life: an operator's retry does not reset it.
	Attempt uint32
	// AttemptsUsed is the attempts used of the budget in force: the leases
	// since the task was created or since an operator's last retry gave it
	// a fresh budget. RetryPolicy.MaxAttempts limits it; it equals Attempt
	// for a task never retried.
	AttemptsUsed uint32
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
	// Deadline is when the task fails (FailureReason "deadline_exceeded")
	// unless an attempt committed it by then. Zero without one, and once the
	// task is COMMITTED or finished (it no longer applies).
	Deadline time.Time
	// TraceContext is the W3C trace context the task was submitted with
	// (zero: none).
	TraceContext TraceContext
	// Progress is the last progress the worker holding the current lease
	// reported; nil without a lease or a report.
	Progress *Progress
	// WorkflowID is the workflow the task belongs to ("" for none),
	// SpawnedBy the task whose commit spawned it ("" for none).
	WorkflowID string
	SpawnedBy  string
	// Dependencies are the tasks it depends on, with what it knows of
	// each: a BLOCKED task waits for those pending.
	Dependencies        []Dependency
	OnDependencyFailure DependencyFailure
}

// TraceContext is a W3C trace context: the traceparent and tracestate of
// the span a task was submitted from.
type TraceContext struct {
	Traceparent string
	Tracestate  string
}

// Progress is what a worker reported about the attempt it runs.
type Progress struct {
	// Message is a short description ("copying part 3 of 8"); "" for none.
	Message string
	// Percent is the share of the work done, 0 to 100, if HasPercent.
	Percent    uint32
	HasPercent bool
	// ReportedAt is when the server received it.
	ReportedAt time.Time
}

// String is the progress as "40% copying", "40%" or "copying".
func (p Progress) String() string {
	switch {
	case p.HasPercent && p.Message != "":
		return fmt.Sprintf("%d%% %s", p.Percent, p.Message)
	case p.HasPercent:
		return fmt.Sprintf("%d%%", p.Percent)
	}
	return p.Message
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

// SubmitRequest describes one task: a typed one (Args), or a kind and a
// payload of your own. Zero fields take the type's SubmitOptions, if it
// has them, then the server's defaults: namespace "default", a 30s
// execution window, the default retry policy, leasable at once, priority
// 0.
type SubmitRequest struct {
	// Args is a typed task (see Args): its Kind() is the task's kind, and
	// its value, encoded by Options.Codec, the task's payload; Kind and
	// Payload are then left unset.
	Args      Args
	Namespace string
	Queue     string // required, unless Args's SubmitOptions gives it
	// Kind says what kind of work the task is, for workers to route it by
	// ("" for none): 1 to 128 bytes of letters, digits and . _ - : /.
	Kind    string
	Payload []byte
	// RequestID makes the submission idempotent within the namespace. Empty:
	// the SDK generates a random one, which covers the SDK's own retries
	// only.
	RequestID       string
	ExecutionWindow time.Duration
	// Retry is the task's retry policy; nil takes the server's default.
	Retry     *RetryPolicy
	NotBefore time.Time
	Priority  int32
	// Deadline, if set, is when the task fails (FailureReason
	// "deadline_exceeded") unless an attempt committed it by then, whatever
	// its attempts left; no lease outlives it. It must be in the future and
	// leave at least the server's minimum execution window (100ms) after
	// NotBefore. Zero: none.
	Deadline time.Time
	// Timeout, if set, makes the deadline the server's time of the submit
	// plus Timeout, instead of Deadline (set one of them at most). Zero:
	// none.
	Timeout time.Duration
	// DependsOn names the tasks this one depends on: it is BLOCKED, and
	// not leased, until every one of them is COMPLETED. Task ids or, in a
	// SubmitBatch (or a spawn), the RequestID of another task of the same
	// batch.
	DependsOn []string
	// OnDependencyFailure says what a dependency that fails does to it.
	OnDependencyFailure DependencyFailure
	// Key is the task's key, usually the id of one of your entities (a
	// customer, an account): the queue's key limits
	// (SetQueueLimitsRequest.KeyMaxConcurrency, KeyRate, KeyOrdered, Fair)
	// hold each key's tasks. 1 to 128 bytes of UTF-8 without spaces or
	// control characters; "" for none.
	Key string
}

// SubmitBatchRequest holds the tasks of one SubmitBatch call.
type SubmitBatchRequest struct {
	// Requests are the tasks, up to 1000 (the server's default limit).
	Requests []SubmitRequest
	// WorkflowID, if set, makes the batch a workflow: its tasks are
	// created all or none, in one record, and the id names them from then
	// on (docs/guides/workflows.md).
	WorkflowID string
	// ReturnTasks reads every whole task back, in SubmitResult.Task, with
	// a GetTask call per task once the batch is submitted (eight at a
	// time). The server answers a SubmitBatch with each task's id only: it
	// does not encode and send every payload back, which saves a large
	// share of the CPU of a batch on both sides.
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

// GetTaskRequest names the task GetTask answers.
type GetTaskRequest struct {
	TaskID string // required
}

// ListTasksRequest selects the tasks of ListTasks and ListTasksPage. Zero
// fields: all namespaces, all queues, any state, the server's default
// page size (100).
type ListTasksRequest struct {
	Namespace string
	Queue     string
	State     TaskState
	// PageSize is the most tasks one call answers (ListTasks makes as many
	// calls as the loop asks for).
	PageSize int
	// PageToken is where the listing starts: the NextPageToken of an
	// earlier page, with the same filters; empty for the first page.
	PageToken string
}

// TaskPage is one page of a listing (ListTasksPage).
type TaskPage struct {
	Tasks []Task
	// NextPageToken continues the listing after Tasks (ListTasksRequest.
	// PageToken); "" on the last page.
	NextPageToken string
}

// GetTaskHistoryRequest names the task GetTaskHistory answers.
type GetTaskHistoryRequest struct {
	TaskID string // required
}

// KillTaskRequest names the task KillTask moves to DEAD.
type KillTaskRequest struct {
	TaskID string // required
	// Reason says why; it becomes the task's FailureReason and is kept in
	// the record (the task's history).
	Reason string
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy.
	RequestedBy string
}

// HistoryEntry is one log record that touched a task (GetTaskHistory).
type HistoryEntry struct {
	// LSN is the record's sequence number within its partition's log.
	LSN uint64
	// Type is the record type: "TaskCreated", "LeaseGranted",
	// "LeaseExtended", "LeaseExpired", "ExecutionStarted", "TaskCommitted",
	// "TaskCompleted", "TaskFailed", "TaskCancelled", "TaskDead",
	// "TaskRetried" or "TaskDeadlineExceeded".
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
	Queue     string // required, unless Queues is set
	// Queues, in place of Queue, leases from any of these queues of the
	// namespace (1 to 32): one call, one long poll, for a worker that
	// serves several queues. The order rotates from call to call, so that
	// a busy queue does not starve the others.
	Queues   []string
	MaxTasks int // default (0) 1; the server's limit is 1000 unless configured otherwise
	// Wait is how long to long-poll when no task is ready (0: answer at
	// once; the server caps it at 30s).
	Wait time.Duration
}

// LeaseResult is what a Lease answers: the tasks leased and, when none
// was because the queue is paused, how it was paused.
type LeaseResult struct {
	// Tasks are the tasks leased, up to MaxTasks (nil for none).
	Tasks []LeasedTask
	// Paused is set when nothing was leased and the queue is paused (with
	// Queues: all of them; this is the first one's pause): who paused it,
	// when and why. Leasing again leases nothing until it is resumed.
	Paused *QueuePause
}

// LeasedTask is one task leased to the caller, as Lease answered it. Give
// ID and LeaseID to every later call about it. LeaseExpiry is the expiry
// at lease time: Heartbeat moves the real one.
type LeasedTask struct {
	ID        string
	Namespace string
	Queue     string
	// Kind says what kind of work the task is ("" for none).
	Kind string
	// Key is the task's key ("" for none).
	Key string
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
	// Deadline is the task's deadline (zero: none): no heartbeat extends
	// the lease beyond it, and the task fails there unless committed.
	Deadline time.Time
	// TraceContext is the trace context the task was submitted with (zero:
	// none): the span of this attempt continues the submitter's trace.
	TraceContext TraceContext
	// WorkflowID is the workflow the task belongs to ("" for none).
	WorkflowID string
	// Dependencies are the tasks it depended on, as they ended, with their
	// results: its inputs.
	Dependencies []DependencyResult
}

// FencingToken identifies the one commit of a task: the task and the
// attempt whose commit won. Key external effects by it (or by TaskID
// alone: a task has at most one commit), so that applying them again, on
// a finalisation lease, has no second effect.
type FencingToken struct {
	TaskID  string
	Attempt uint32
}

// StartRequest names the leased task whose work began (Start).
type StartRequest struct {
	TaskID  string // required
	LeaseID string // required: the attempt's lease
}

// HeartbeatRequest names the leased task whose lease Heartbeat extends.
type HeartbeatRequest struct {
	TaskID  string // required
	LeaseID string // required: the attempt's lease
	// Progress, when set, is the work's progress (its ReportedAt is the
	// server's to set): it replaces the lease's last report.
	Progress *Progress
}

// HeartbeatResult is what a Heartbeat answers.
type HeartbeatResult struct {
	// LeaseExpiry is when the lease now expires, unless extended again.
	LeaseExpiry time.Time
}

// CommitRequest commits an attempt's result (Commit).
type CommitRequest struct {
	TaskID  string // required
	LeaseID string // required: the attempt's lease
	// Result is the task's one result, once the commit wins. At most 1 MiB
	// (the server's default limit).
	Result []byte
	// Spawn holds the tasks the commit spawns — children, and
	// continuations that depend on them (DependsOn naming their RequestIDs,
	// task ids, or this task) — created with the commit, only if it wins
	// (docs/guides/workflows.md).
	Spawn []SubmitRequest
}

// CompleteRequest finishes a leased task (Complete), or one item of a
// CompleteBatch.
type CompleteRequest struct {
	TaskID  string // required
	LeaseID string // required: the attempt's lease
	// Result is the task's result when it completes from LEASED; ignored
	// when it was committed (the committed result stands).
	Result []byte
	// Spawn holds the tasks the completion spawns, as CommitRequest.Spawn;
	// only a completion that commits (from LEASED) may spawn.
	Spawn []SubmitRequest
}

// WaitTaskRequest names the task to wait for (WaitTask).
type WaitTaskRequest struct {
	TaskID string // required
	// Wait is how long to wait for it to end: 0 answers at once; at most
	// 30s (the server's default limit).
	Wait time.Duration
}

// CompleteBatchRequest holds the completions of one CompleteBatch and,
// optionally, the lease that follows them.
type CompleteBatchRequest struct {
	// Items are the completions, each as Complete would make it: 1 to
	// 1000 (the server's default limit).
	Items []CompleteRequest
	// Lease, if set, leases after the items are applied, as Lease would.
	Lease *LeaseRequest
}

// CompleteBatchResult is what a CompleteBatch answers.
type CompleteBatchResult struct {
	// Errors holds each item's answer, in the order of the items: nil for
	// one that completed.
	Errors []error
	// Leased holds the tasks the request's Lease leased (nil for none).
	Leased []LeasedTask
}

// FailRequest ends an attempt that failed before it committed (Fail).
type FailRequest struct {
	TaskID  string // required
	LeaseID string // required: the attempt's lease
	// Reason says why, for people: it is kept with the execution, and as
	// the task's FailureReason if it fails for good. At most 4 KiB.
	Reason string
	// Permanent fails the task for good, whatever attempts it has left.
	// Otherwise it is retried per its retry policy.
	Permanent bool
}

// FailResult says what a Fail led to.
type FailResult struct {
	// State is TaskStateWaiting (a retry is scheduled) or TaskStateFailed.
	State TaskState
	// RetryAt is when the retry may be leased; zero unless State is
	// TaskStateWaiting.
	RetryAt time.Time
}

// SnoozeRequest asks to run a leased task again later (Snooze).
type SnoozeRequest struct {
	TaskID  string // required
	LeaseID string // required: the attempt's lease
	// Delay is how long the task waits before it may be leased again: 0
	// up to the server's limit (24h by default).
	Delay time.Duration
	// Reason says why, for people: the snoozed execution keeps it. At most
	// 4 KiB.
	Reason string
}

// SnoozeResult says when the snoozed task runs again.
type SnoozeResult struct {
	// NotBefore is when the task may be leased again.
	NotBefore time.Time
}

// RetryTaskRequest names the task RetryTask returns to WAITING.
type RetryTaskRequest struct {
	TaskID string // required
	// Reason says why; it is kept in the record (the task's history).
	Reason string
	// RequestedBy says who asks, kept in the record. Empty:
	// Options.RequestedBy. It is what the caller declares: a server with
	// authentication on records the token's name instead.
	RequestedBy string
}

// TaskFilter selects the tasks of a bulk action (RetryTasks, KillTasks,
// PurgeTasks): every field set must match. A filter with no field set is
// refused (ErrInvalidArgument) unless All is set, so that an empty filter
// never acts on every task by mistake; All with another field is refused
// too.
type TaskFilter struct {
	// Namespace selects the tasks of one namespace ("": every namespace).
	Namespace string
	// Queue selects the tasks of one queue, in Namespace or, without it,
	// in every namespace.
	Queue string
	// State selects the tasks in one state; it must be one the action
	// applies to (TaskStateUnspecified: any of those).
	State TaskState
	// CreatedBefore selects the tasks created before it (zero: any time).
	CreatedBefore time.Time
	// All selects every task the action applies to, explicitly; only
	// without the other fields.
	All bool
}

// BulkRequest is the request of RetryTasks, KillTasks and PurgeTasks.
type BulkRequest struct {
	Filter TaskFilter
	// Reason says why; it is kept in each record (and, for KillTasks, as
	// each task's FailureReason).
	Reason string
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy.
	RequestedBy string
}

// BulkResult counts what a bulk action did.
type BulkResult struct {
	// Changed counts the tasks retried, killed or purged.
	Changed uint64
	// Skipped counts the tasks the filter selected that the action does
	// not apply to: for RetryTasks those COMPLETED, not finished, or
	// committed before they were killed; for KillTasks those already
	// finished; for PurgeTasks those not finished.
	Skipped uint64
}

// Queue describes one queue at the time of the answer (ListQueues,
// GetQueue). Its statistics are counters the server keeps as it goes; in
// cluster mode they add up every partition of the queue.
type Queue struct {
	Namespace string
	Queue     string
	// Tasks counts the queue's tasks by state.
	Tasks TaskCounts
	// OldestWaitingAge is how long the oldest waiting task that is due has
	// waited since it became due (its creation, or the end of its delay or
	// backoff), to the millisecond; 0 when no waiting task is due.
	OldestWaitingAge time.Duration
	// ActiveLeases counts the leases held now: LEASED tasks, and COMMITTED
	// ones being finalised.
	ActiveLeases uint64
	// Paused is set while the queue is paused (in cluster mode: in every
	// partition); Pause says who paused it, when and why (nil when no
	// partition is paused).
	Paused bool
	Pause  *QueuePause
	// LastMinute, Last5Minutes and LastHour count events over windows made
	// of buckets: "last minute" covers between 50 and 60 seconds (10-second
	// buckets), "last 5 minutes" between 4 and 5 minutes and "last hour"
	// between 59 and 60 minutes (1-minute buckets).
	LastMinute   QueueEvents
	Last5Minutes QueueEvents
	LastHour     QueueEvents
	// PerMinute holds the events of each of the last 60 minutes, oldest
	// first; the last is the current minute.
	PerMinute []QueueEvents
	// Partitions is the number of partitions the queue spans (1 in
	// embedded mode), PausedPartitions how many of them are paused: fewer
	// than Partitions while a pause or resume is under way, or after one
	// failed part way (repeat it).
	Partitions       uint32
	PausedPartitions uint32
	// Limits is the queue's flow control, queue-wide as set (nil: none);
	// LimitedPartitions how many partitions have limits: fewer than
	// Partitions while a change is under way, or after one failed part
	// way (repeat it).
	Limits            *QueueLimits
	LimitedPartitions uint32
	// Keys describes the queue's keys (nil: no task with a key, and no
	// key limits), and KeyWeights the fair weights of those with a weight
	// other than 1 (QueueLimits.Fair), ordered by key.
	Keys       *QueueKeys
	KeyWeights []KeyWeight
}

// QueueKeys describes the keys of a queue (SubmitRequest.Key).
type QueueKeys struct {
	// Keys counts the keys with an unfinished task.
	Keys uint64
	// HeldByConcurrency, HeldByRate and HeldByOrder count the keys with
	// waiting tasks that a key limit holds back: their key max
	// concurrency, an empty token bucket, or (KeyOrdered) their oldest
	// unfinished task not done yet.
	HeldByConcurrency, HeldByRate, HeldByOrder uint64
	// Top lists the keys with the most waiting tasks, then the most
	// leased (GetQueue: 10; ListQueuesRequest.TopKeys).
	Top []KeySummary
}

// KeySummary is one key of a queue.
type KeySummary struct {
	Key string
	// Waiting counts its unfinished tasks that hold no lease; Leased its
	// live leases.
	Waiting, Leased uint64
	// Held says what holds it back now: "" (nothing), "concurrency",
	// "rate" or "order".
	Held string
}

// QueueLimits is a queue's flow control, queue-wide as set (in cluster
// mode each partition holds its tasks to its share, and the shares add up
// to these). A zero limit is none.
type QueueLimits struct {
	// MaxConcurrency is the most leases of the queue live at once.
	MaxConcurrency uint32
	// Rate is the most leases granted per second on average, Burst the
	// most at once after a quiet spell (a token bucket).
	Rate  float64
	Burst uint32
	// RequestedBy, Reason and SetAt say who set them, why and when.
	RequestedBy string
	Reason      string
	SetAt       time.Time
	// The limits of the queue's keys, whole in every partition:
	// KeyMaxConcurrency leases of one key at once, KeyRate per second
	// with bursts of KeyBurst per key, KeyOrdered (a key's tasks one at a
	// time, in creation order) and Fair (turns across the keys).
	KeyMaxConcurrency uint32
	KeyRate           float64
	KeyBurst          uint32
	KeyOrdered        bool
	Fair              bool
}

// KeyWeight is the fair weight of one key of a queue: with Fair, a key
// of weight w takes w turns for one of a key of weight 1.
type KeyWeight struct {
	Key    string
	Weight uint32
}

// TaskCounts counts tasks by state.
type TaskCounts struct {
	Waiting, Leased, Committed, Completed, Failed, Dead uint64
	// Blocked counts the tasks waiting for the tasks they depend on.
	Blocked uint64
}

// QueueEvents counts what happened to a queue's tasks in some interval.
type QueueEvents struct {
	// Submitted counts the tasks submitted.
	Submitted uint64
	// Completed and Failed count the tasks that became COMPLETED and
	// FAILED (attempts ran out, or failed permanently).
	Completed uint64
	Failed    uint64
	// LeaseExpired counts the leases that expired, whatever followed.
	LeaseExpired uint64
}

// QueuePause says who paused a queue, when and why (in cluster mode: the
// earliest pause of its partitions).
type QueuePause struct {
	RequestedBy string
	Reason      string
	PausedAt    time.Time
}

// GetQueueRequest names the queue GetQueue answers.
type GetQueueRequest struct {
	Namespace string // default "default"
	Queue     string // required
}

// ListQueuesRequest selects the queues ListQueues lists.
type ListQueuesRequest struct {
	// Namespace lists the queues of one namespace ("": every namespace).
	Namespace string
	// Queue lists the one queue of that name (with Namespace).
	Queue string
	// TopKeys also lists, for each queue with keys, up to this many of
	// its keys with the most waiting tasks (Queue.Keys.Top; at most 100).
	TopKeys uint32
}

// PauseQueueRequest names the queue PauseQueue pauses.
type PauseQueueRequest struct {
	Namespace string // default "default"
	Queue     string // required
	// Reason says why; it is kept in the record and shown in Queue.Pause.
	Reason string
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy.
	RequestedBy string
}

// ResumeQueueRequest names the queue ResumeQueue resumes.
type ResumeQueueRequest struct {
	Namespace string // default "default"
	Queue     string // required
	// Reason says why; it is kept in the record.
	Reason string
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy.
	RequestedBy string
}

// SetQueueLimitsRequest names a queue and the limits SetQueueLimits sets
// or clears. Each limit is set (non-nil), cleared, or, with neither, kept
// as it is; a request sets or clears at least one.
type SetQueueLimitsRequest struct {
	Namespace string // default "default"
	Queue     string // required
	// MaxConcurrency: at most this many leases live at once, across all
	// workers (1 to 1000000; in cluster mode at least the queue's
	// partitions). 0 is refused: clear the limit, or pause the queue.
	MaxConcurrency *uint32
	// Rate: at most this many leases per second on average (more than 0,
	// at most 1000000, to the thousandth).
	Rate *float64
	// Burst: the leases a full bucket grants at once (1 to 1000000, only
	// with a rate). Nil with a new rate: the queue's burst if it has a
	// rate, otherwise the rate rounded up, at least 1 per partition.
	Burst *uint32
	// ClearMaxConcurrency removes the max concurrency; ClearRate the rate
	// and its burst.
	ClearMaxConcurrency bool
	ClearRate           bool
	// The limits of the queue's keys (SubmitRequest.Key), never split
	// over partitions: KeyMaxConcurrency leases of one key at once (1 to
	// 1000000), KeyRate leases of one key per second with bursts of
	// KeyBurst (as Rate and Burst), cleared by ClearKeyMaxConcurrency and
	// ClearKeyRate; KeyOrdered runs a key's tasks one at a time in
	// creation order (refused with a KeyMaxConcurrency above 1); Fair
	// takes turns across the keys. Nil: kept as it is.
	KeyMaxConcurrency      *uint32
	KeyRate                *float64
	KeyBurst               *uint32
	ClearKeyMaxConcurrency bool
	ClearKeyRate           bool
	KeyOrdered             *bool
	Fair                   *bool
	// KeyWeights sets the fair weight of each key it names (1 to 1000; 1
	// removes the key's weight); ClearKeyWeights removes every weight
	// first. The other keys keep theirs.
	KeyWeights      []KeyWeight
	ClearKeyWeights bool
	// Reason says why; it is kept in the record and shown in Queue.Limits.
	Reason string
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy.
	RequestedBy string
}

// QueueControlResult says what PauseQueue, ResumeQueue or SetQueueLimits
// did.
type QueueControlResult struct {
	// Changed is false when the queue was already paused (PauseQueue),
	// running (ResumeQueue) or had these limits (SetQueueLimits): nothing
	// was written.
	Changed bool
	// Queue is the queue as it is afterwards.
	Queue Queue
}

// OverlapPolicy says what a schedule's tick does while the task of its
// previous fire is not finished (not COMPLETED, FAILED or DEAD). The values
// are the API's enum numbers (tenure.v1.OverlapPolicy).
type OverlapPolicy uint8

const (
	// OverlapUnspecified: in a ScheduleRequest, the default (OverlapSkip).
	OverlapUnspecified OverlapPolicy = iota
	// OverlapSkip skips the tick (FireOutcomeSkipped, reason "overlap").
	OverlapSkip
	// OverlapAllow fires it anyway.
	OverlapAllow
	// OverlapBufferOne holds the first such tick (FireOutcomeHeld) and
	// fires it once the previous task finishes; ticks that come due while
	// one is held are skipped.
	OverlapBufferOne
)

var overlapNames = [...]string{"UNSPECIFIED", "SKIP", "ALLOW", "BUFFER_ONE"}

// String returns the policy's name as the API spells it without its
// prefix: "SKIP", "ALLOW", "BUFFER_ONE".
func (o OverlapPolicy) String() string { return enumName(overlapNames[:], uint8(o), "OverlapPolicy") }

// FireOutcome is what became of a schedule's tick. The values are the
// API's enum numbers (tenure.v1.FireOutcome).
type FireOutcome uint8

const (
	// FireOutcomeUnspecified is not an outcome.
	FireOutcomeUnspecified FireOutcome = iota
	// FireOutcomeFired: a task was submitted for the tick.
	FireOutcomeFired
	// FireOutcomeSkipped: the ticks from Tick up to (not including) Until
	// were not fired; Reason says why.
	FireOutcomeSkipped
	// FireOutcomeHeld: the tick waits for the previous task to finish
	// (OverlapBufferOne).
	FireOutcomeHeld
	// FireOutcomeBackfilled: a task was submitted for a past tick by
	// BackfillSchedule.
	FireOutcomeBackfilled
)

var fireOutcomeNames = [...]string{"UNSPECIFIED", "FIRED", "SKIPPED", "HELD", "BACKFILLED"}

// String returns the outcome's name as the API spells it without its
// prefix: "FIRED", "SKIPPED", ...
func (o FireOutcome) String() string { return enumName(fireOutcomeNames[:], uint8(o), "FireOutcome") }

// Schedule is a schedule as the server knows it: it submits a task to its
// queue at each tick of its cron expression (GetSchedule, ListSchedules).
type Schedule struct {
	// Namespace, Queue and Name name it: the name is unique within the
	// namespace and the queue its tasks go to.
	Namespace string
	Queue     string
	Name      string
	// Cron is the expression as given; TimeZone the IANA zone it is read
	// in ("" for UTC).
	Cron     string
	TimeZone string
	Overlap  OverlapPolicy
	// CatchUpWindow is how late a tick may still fire: one found due
	// longer ago (the server was down) is skipped.
	CatchUpWindow time.Duration
	// The task each fire submits, the server's defaults filled in.
	Kind            string
	Payload         []byte
	ExecutionWindow time.Duration
	RetryPolicy     RetryPolicy
	Priority        int32
	// Paused is set while the schedule is paused; Pause says who paused
	// it, when and why.
	Paused bool
	Pause  *QueuePause
	// NextFires holds the next fire times (up to 5); none while paused.
	NextFires []time.Time
	// Recent holds the latest decisions about its ticks (up to 20), oldest
	// first.
	Recent []ScheduleFire
	// HeldTick is the tick held back by OverlapBufferOne (zero: none).
	HeldTick time.Time
	// WaitingForTask is set while due ticks wait for the task of the last
	// fire to finish, as the overlap policy says: that task. The ticks due
	// from WaitingSince until it finishes are skipped then ("overlap"),
	// and NextFires, the ticks to come, too while it runs on.
	WaitingForTask string
	WaitingSince   time.Time
	CreatedAt      time.Time
	CreatedBy      string
	UpdatedAt      time.Time
}

// ScheduleFire is one decision about a schedule's ticks.
type ScheduleFire struct {
	// Tick is the tick's nominal time; for FireOutcomeSkipped the first
	// tick of the range, which ends before Until.
	Tick    time.Time
	Until   time.Time
	Outcome FireOutcome
	// Reason says why ticks were skipped: "catch_up_window", "overlap",
	// "paused" or "updated".
	Reason string
	// TaskID is the task submitted (FireOutcomeFired, FireOutcomeBackfilled);
	// TaskState its state now (TaskStateUnspecified once the server no
	// longer holds it).
	TaskID    string
	TaskState TaskState
	// At is when the decision was made.
	At time.Time
}

// ScheduleRequest defines a schedule, for CreateSchedule and
// UpdateSchedule (which replaces the whole definition). Zero fields take
// the server's defaults: namespace "default", UTC, OverlapSkip, a catch-up
// window of 1h, and a task's defaults as in SubmitRequest.
type ScheduleRequest struct {
	Namespace string
	Queue     string // required: the queue its tasks go to
	Name      string // required: unique within namespace and queue
	// Cron is required: 5 fields (minute hour day-of-month month
	// day-of-week), 6 with seconds first, or a descriptor such as @daily
	// or @every 90s.
	Cron string
	// TimeZone is an IANA name such as Europe/Berlin ("": UTC).
	TimeZone      string
	Overlap       OverlapPolicy
	CatchUpWindow time.Duration
	// The task each fire submits: a typed one (Args, as in SubmitRequest:
	// its kind, its encoded value as the payload, its SubmitOptions for
	// the unset fields), or a kind ("" for none) and a payload of your
	// own; the rest as in SubmitRequest.
	Args            Args
	Kind            string
	Payload         []byte
	ExecutionWindow time.Duration
	Retry           *RetryPolicy
	Priority        int32
	// Reason says why (UpdateSchedule only); it is kept in the record.
	Reason string
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy (kept as
	// the schedule's CreatedBy by CreateSchedule).
	RequestedBy string
}

// CreateScheduleResult is what CreateSchedule answers.
type CreateScheduleResult struct {
	// Schedule is the schedule as created (or as it was, if Created is
	// false).
	Schedule Schedule
	// Created is false when the schedule existed with the same definition:
	// nothing was written (a retried create).
	Created bool
}

// GetScheduleRequest names the schedule GetSchedule answers.
type GetScheduleRequest struct {
	Namespace string // default "default"
	Queue     string // required
	Name      string // required
}

// ListSchedulesRequest selects the schedules ListSchedules lists.
type ListSchedulesRequest struct {
	// Namespace and Queue select the schedules of one namespace and one
	// queue ("": every one).
	Namespace string
	Queue     string
}

// ScheduleControlRequest names the schedule PauseSchedule,
// ResumeSchedule or DeleteSchedule acts on.
type ScheduleControlRequest struct {
	Namespace string // default "default"
	Queue     string // required
	Name      string // required
	// Reason says why; it is kept in the record.
	Reason string
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy.
	RequestedBy string
}

// ScheduleControlResult says what PauseSchedule or ResumeSchedule did.
type ScheduleControlResult struct {
	// Changed is false when the schedule was already paused
	// (PauseSchedule) or running (ResumeSchedule): nothing was written.
	Changed bool
	// Schedule is the schedule as it is afterwards.
	Schedule Schedule
}

// BackfillRequest names a schedule and the past range of its ticks that
// BackfillSchedule fires.
type BackfillRequest struct {
	Namespace string // default "default"
	Queue     string // required
	Name      string // required
	// Start and End bound the range, both included; End must not be in
	// the future, and must be before the schedule's next undecided tick.
	Start time.Time
	End   time.Time
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy.
	RequestedBy string
}

// BackfillResult says what a backfill did.
type BackfillResult struct {
	// Fired lists the ticks fired, one task each (FireOutcomeBackfilled),
	// in tick order.
	Fired []ScheduleFire
	// AlreadyFired counts the ticks of the range that had fired before
	// (or are held): nothing was submitted for them.
	AlreadyFired int
}

// WorkflowState sums up the states of a workflow's tasks. The values are
// the API's enum numbers (tenure.v1.WorkflowState).
type WorkflowState uint8

const (
	// WorkflowStateUnspecified is not a state.
	WorkflowStateUnspecified WorkflowState = iota
	// WorkflowStateRunning: a task of it has not ended.
	WorkflowStateRunning
	// WorkflowStateCompleted: every task of it COMPLETED.
	WorkflowStateCompleted
	// WorkflowStateFailed: every task of it ended, and one FAILED or is
	// DEAD.
	WorkflowStateFailed
	// WorkflowStateCancelled: it was cancelled (CancelWorkflow) and not
	// retried since.
	WorkflowStateCancelled
)

var workflowStateNames = [...]string{"UNSPECIFIED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"}

// String returns the state's name as the API spells it without its
// prefix: "RUNNING", "COMPLETED", ...
func (s WorkflowState) String() string {
	return enumName(workflowStateNames[:], uint8(s), "WorkflowState")
}

// Ended reports whether every task of the workflow has ended.
func (s WorkflowState) Ended() bool {
	return s == WorkflowStateCompleted || s == WorkflowStateFailed || s == WorkflowStateCancelled
}

// Workflow is a workflow: the tasks of one SubmitBatch with a WorkflowID,
// and those they spawned.
type Workflow struct {
	Namespace string
	ID        string
	State     WorkflowState
	// Tasks counts its tasks by state, Total in all.
	Tasks TaskCounts
	Total uint64
	// Delivering counts, in cluster mode, its tasks that the partition
	// whose record created them is still delivering to their own
	// partitions: not in Tasks or Total yet (docs/guides/workflows.md).
	Delivering uint64
	// CreatedAt is when it was submitted, UpdatedAt when a task of it
	// last changed.
	CreatedAt time.Time
	UpdatedAt time.Time
	// Cancel says who cancelled it, when and why, while it is CANCELLED.
	Cancel *WorkflowCancel
}

// WorkflowCancel says who cancelled a workflow, when and why.
type WorkflowCancel struct {
	RequestedBy string
	Reason      string
	At          time.Time
}

// GetWorkflowRequest names a workflow and a page of its tasks.
type GetWorkflowRequest struct {
	Namespace  string // default "default"
	WorkflowID string // required
	// PageSize is how many tasks one page holds (0: the server's default,
	// 100; at most its limit, 1000).
	PageSize int
	// PageToken continues a listing (WorkflowPage.NextPageToken).
	PageToken string
}

// WorkflowPage is a workflow and one page of its tasks.
type WorkflowPage struct {
	Workflow Workflow
	// Tasks are its tasks in creation order, each after the tasks it
	// depends on (Task.Dependencies) and the task that spawned it
	// (Task.SpawnedBy): the graph.
	Tasks []Task
	// NextPageToken continues the tasks (GetWorkflowRequest.PageToken);
	// "" on the last page.
	NextPageToken string
}

// ListWorkflowsRequest selects the workflows ListWorkflows lists.
type ListWorkflowsRequest struct {
	// Namespace lists the workflows of one namespace ("": every one).
	Namespace string
}

// WorkflowControlRequest names the workflow CancelWorkflow or
// RetryWorkflow acts on.
type WorkflowControlRequest struct {
	Namespace  string // default "default"
	WorkflowID string // required
	// Reason says why; it is kept in the record (and, by a cancel, in each
	// task's FailureReason).
	Reason string
	// RequestedBy says who asks, as RetryTaskRequest.RequestedBy.
	RequestedBy string
}

// WorkflowControlResult is a workflow after CancelWorkflow or
// RetryWorkflow, and how many of its tasks the call ended or retried.
type WorkflowControlResult struct {
	Workflow Workflow
	Tasks    uint64
}

// WaitWorkflowRequest names the workflow WaitWorkflow waits for.
type WaitWorkflowRequest struct {
	Namespace  string // default "default"
	WorkflowID string // required
	// Wait is how long to wait for its last task to end (0: answer at
	// once; at most the server's limit, 30s by default).
	Wait time.Duration
}
