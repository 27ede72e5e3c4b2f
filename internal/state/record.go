package state

import (
	"fmt"
	"time"
)

// Time is an absolute instant in Unix nanoseconds. Records carry every time
// they need as a Time chosen by the coordinator before the append, so apply
// never reads a clock and replay is deterministic.
type Time int64

// TimeOf converts a time.Time to a Time.
func TimeOf(t time.Time) Time { return Time(t.UnixNano()) }

// Std converts t to a time.Time in UTC. The zero Time is the zero time.Time.
func (t Time) Std() time.Time {
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(t)).UTC()
}

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

func (t Time) String() string { return t.Std().Format(time.RFC3339Nano) }

// RecordType numbers are part of the on-disk format: never reuse or renumber
// one. A removed type stays reserved here.
type RecordType uint16

const (
	TypeTaskCreated      RecordType = 1
	TypeLeaseGranted     RecordType = 2
	TypeLeaseExtended    RecordType = 3
	TypeLeaseExpired     RecordType = 4
	TypeExecutionStarted RecordType = 5
	TypeTaskCommitted    RecordType = 6
	TypeTaskCompleted    RecordType = 7
	TypeTaskFailed       RecordType = 8
	TypeTaskCancelled    RecordType = 9
	TypeTaskDead         RecordType = 10
	// TypeFence is appended by a node that gains ownership of a partition in
	// cluster mode, before anything else; it carries the node's epoch.
	TypeFence RecordType = 11
	// TypeTasksPurged drops finished tasks older than the retention period
	// (appended by the coordinator before a snapshot).
	TypeTasksPurged RecordType = 12
)

var typeNames = map[RecordType]string{
	TypeTaskCreated:      "TaskCreated",
	TypeLeaseGranted:     "LeaseGranted",
	TypeLeaseExtended:    "LeaseExtended",
	TypeLeaseExpired:     "LeaseExpired",
	TypeExecutionStarted: "ExecutionStarted",
	TypeTaskCommitted:    "TaskCommitted",
	TypeTaskCompleted:    "TaskCompleted",
	TypeTaskFailed:       "TaskFailed",
	TypeTaskCancelled:    "TaskCancelled",
	TypeTaskDead:         "TaskDead",
	TypeFence:            "Fence",
	TypeTasksPurged:      "TasksPurged",
}

func (t RecordType) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("RecordType(%d)", uint16(t))
}

// Record is one fact in the log. Every mutation of State is exactly one
// Record applied by State.Apply.
type Record interface {
	Type() RecordType
	// Task is the id of the task the record touches ("" for Fence and
	// TasksPurged).
	Task() string
}

// RetryPolicy decides what a failed attempt leads to.
type RetryPolicy struct {
	// MaxAttempts is the number of leases a task may be granted before a
	// failure or an expiry fails it for good. At least 1. A committed task
	// is finalised whatever its attempt count.
	MaxAttempts uint32
	// InitialBackoff is the wait before the second attempt.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between attempts.
	MaxBackoff time.Duration
	// Multiplier grows the wait after each attempt (>= 1).
	Multiplier float64
}

// Backoff is the wait before the attempt that follows attempt n (n >= 1):
// InitialBackoff * Multiplier^(n-1), capped at MaxBackoff.
func (p RetryPolicy) Backoff(n uint32) time.Duration {
	d := float64(p.InitialBackoff)
	for i := uint32(1); i < n; i++ {
		d *= p.Multiplier
		if d >= float64(p.MaxBackoff) {
			return p.MaxBackoff
		}
	}
	if d > float64(p.MaxBackoff) {
		return p.MaxBackoff
	}
	return time.Duration(d)
}

// TaskCreated introduces a task; it enters WAITING with attempt 0.
type TaskCreated struct {
	TaskID    string
	Namespace string
	Queue     string
	Payload   []byte
	// ExecutionWindow is the lease duration granted per attempt and per
	// heartbeat.
	ExecutionWindow time.Duration
	Retry           RetryPolicy
	// RequestID, when set, makes the submission idempotent within the
	// namespace.
	RequestID string
	// NotBefore is the earliest time the task may be leased (0: at once).
	NotBefore Time
	// Priority orders leasing within a queue: higher first.
	Priority  int32
	CreatedAt Time
}

// LeaseGranted gives attempt Attempt of a task to a worker until LeaseExpiry.
// It is the only way a task becomes owned.
type LeaseGranted struct {
	TaskID      string
	LeaseID     string
	WorkerID    string
	Attempt     uint32
	LeaseExpiry Time
	GrantedAt   Time
}

// LeaseExtended moves the expiry of the current, unexpired lease forward.
type LeaseExtended struct {
	TaskID         string
	LeaseID        string
	NewLeaseExpiry Time
	At             Time
}

// LeaseExpired revokes the current lease because time ran out. An
// uncommitted task goes back to WAITING (not before RetryAt) or, when the
// expired attempt was its last, to FAILED. A committed task stays COMMITTED
// without a lease and is offered again only to be finalised.
type LeaseExpired struct {
	TaskID  string
	LeaseID string
	At      Time
	// RetryAt is when the task may be leased again if attempts remain.
	RetryAt Time
}

// ExecutionStarted records that the worker holding the lease began work.
type ExecutionStarted struct {
	TaskID  string
	LeaseID string
	At      Time
}

// TaskCommitted is the idempotency boundary: the first valid commit of a task
// wins, and only its attempt may apply external effects.
type TaskCommitted struct {
	TaskID  string
	LeaseID string
	Result  []byte
	At      Time
}

// TaskCompleted finishes a task. From LEASED it is commit and done in one
// record; from COMMITTED it finalises the committed result.
type TaskCompleted struct {
	TaskID  string
	LeaseID string
	Result  []byte
	At      Time
}

// TaskFailed ends an attempt that failed before commit. With attempts left
// and Permanent unset, the task waits until RetryAt; otherwise it is FAILED.
type TaskFailed struct {
	TaskID  string
	LeaseID string
	Reason  string
	RetryAt Time
	// Permanent says the worker asked for no further attempts.
	Permanent bool
	At        Time
}

// TaskCancelled records an action rejected because its lease had lost
// authority. It changes no task state.
type TaskCancelled struct {
	TaskID  string
	LeaseID string
	Reason  string
	At      Time
}

// TaskDead kills a task that is not yet terminal (an administrator's
// decision; no retries).
type TaskDead struct {
	TaskID string
	Reason string
	At     Time
}

// Fence marks the start of a new owner's epoch of a partition (cluster mode).
type Fence struct {
	Epoch  uint64
	NodeID string
	At     Time
}

// TasksPurged removes every terminal (COMPLETED, FAILED or DEAD) task whose
// UpdatedAt is before Before: from the task table, from the request-id index
// (so its request id may be used again) and from the creation order. Tasks
// that are not terminal are never touched. Retention is a record, not a side
// effect of snapshotting, because it changes behaviour (request-id
// deduplication): a replay of the full log must drop the same tasks at the
// same point.
type TasksPurged struct {
	// Before is the cut-off: the coordinator's clock minus the retention
	// period when it decided the purge.
	Before Time
	At     Time
}

func (*TaskCreated) Type() RecordType      { return TypeTaskCreated }
func (*LeaseGranted) Type() RecordType     { return TypeLeaseGranted }
func (*LeaseExtended) Type() RecordType    { return TypeLeaseExtended }
func (*LeaseExpired) Type() RecordType     { return TypeLeaseExpired }
func (*ExecutionStarted) Type() RecordType { return TypeExecutionStarted }
func (*TaskCommitted) Type() RecordType    { return TypeTaskCommitted }
func (*TaskCompleted) Type() RecordType    { return TypeTaskCompleted }
func (*TaskFailed) Type() RecordType       { return TypeTaskFailed }
func (*TaskCancelled) Type() RecordType    { return TypeTaskCancelled }
func (*TaskDead) Type() RecordType         { return TypeTaskDead }
func (*Fence) Type() RecordType            { return TypeFence }
func (*TasksPurged) Type() RecordType      { return TypeTasksPurged }

func (r *TaskCreated) Task() string      { return r.TaskID }
func (r *LeaseGranted) Task() string     { return r.TaskID }
func (r *LeaseExtended) Task() string    { return r.TaskID }
func (r *LeaseExpired) Task() string     { return r.TaskID }
func (r *ExecutionStarted) Task() string { return r.TaskID }
func (r *TaskCommitted) Task() string    { return r.TaskID }
func (r *TaskCompleted) Task() string    { return r.TaskID }
func (r *TaskFailed) Task() string       { return r.TaskID }
func (r *TaskCancelled) Task() string    { return r.TaskID }
func (r *TaskDead) Task() string         { return r.TaskID }
func (*Fence) Task() string              { return "" }
func (*TasksPurged) Task() string        { return "" }
