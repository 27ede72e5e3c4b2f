package state

import (
	"time"
	"unsafe"
)

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
	// Dead is terminal: killed by an administrator, or ended by a
	// dependency that failed (docs/design/workflows.md).
	Dead
	// Blocked: waiting for its dependencies to complete; no lease, in no
	// queue heap. Released to Waiting when the last one completes.
	Blocked

	// NumStates sizes the arrays indexed by TaskState: the states are
	// Waiting to Blocked.
	NumStates = Blocked + 1
)

var taskStateNames = [...]string{"UNSPECIFIED", "WAITING", "LEASED", "COMMITTED", "COMPLETED", "FAILED", "DEAD", "BLOCKED"}

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
	// ExecSnoozed: the worker snoozed the task (TaskSnoozed) before a
	// commit. The attempt did not count: the next lease has its number.
	ExecSnoozed
)

var execStatusNames = [...]string{"UNSPECIFIED", "LEASED", "IN_PROGRESS", "COMMITTED", "DONE", "ABORTED", "SNOOZED"}

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
	// Reason says why the execution was aborted or snoozed, if it was.
	Reason string
}

// Task is the authoritative record of one task, derived only from records.
// Callers outside this package must treat a *Task as read-only.
//
// A State holds one Task per task it knows, in its slab (slab.go), so its
// size matters (136 bytes). What most tasks share, or what a task that was
// never leased does not use, is behind one pointer each, embedded so that
// its fields read as the task's own (t.Namespace, t.Window, t.Result):
//   - QueueKey: the namespace and queue, one copy per queue;
//   - Policy: kind, execution window and retry policy, one copy per
//     distinct policy (most tasks of a kind share one);
//   - Progress: executions, result, commit, failure reason, attempt base
//     and the record history past the creation, allocated at the first
//     lease (or the first record that sets one of them); until then every
//     task points at one shared empty Progress.
//
// Nothing writes through these pointers once the task is in a State. A
// decoder building a task for a Loader may set them to structs of its own
// (a nil Progress means none); the Loader replaces them by the shared
// copies. See docs/design/state-machine.md ("Memory per task").
type Task struct {
	ID string
	*QueueKey
	Payload []byte
	*Policy
	RequestID string
	// NotBefore is the earliest lease time while Waiting (a retry moves it).
	NotBefore  Time
	CreatedAt  Time
	UpdatedAt  Time
	CreatedLSN uint64
	*Progress

	Priority int32
	State    TaskState
	// delayed says which heap of its queue holds a schedulable task.
	delayed bool
	// keyed says the task has a key (State.KeyOf; docs/design/keys.md).
	keyed bool
	// graph says the task has a node in its State's graph (graph.go):
	// edges, dependents, a workflow or a parent. It fills what would be
	// padding.
	graph bool
	// Attempt is the number of attempts so far: the leases granted, less
	// those a snooze ended (TaskSnoozed gives the attempt back).
	Attempt uint32
	// cur indexes Executions for the current lease, -1 when unleased.
	cur int32
	// heapIdx is the task's position in whichever heap holds it (queue
	// ready/delayed heap while schedulable, expiry heap while leased).
	heapIdx int32
	// pos is the task's position in its State's slab (slab.go).
	pos uint32
}

// Policy is what a task's submitter chose for all its attempts: its kind,
// execution window and retry policy. Tasks with equal policies share one
// copy (State.policy).
type Policy struct {
	// Kind says what kind of work the task is, for workers to route it by
	// ("" for none).
	Kind   string
	Window time.Duration
	Retry  RetryPolicy
}

// Progress is what leases have made of a task. A task that no record has
// given any of it points at noProgress, shared and always empty; the
// first record that sets a field gives the task its own (Task.progress).
type Progress struct {
	Executions []Execution
	// Result is the committed (or completed) result.
	Result []byte
	// CommittedBy is the lease id whose commit won ("" before any commit).
	CommittedBy   string
	FailureReason string
	// History lists every record that touched the task, in log order,
	// once a record after its creation did; nil before (Task.LSNs is then
	// the creation alone). Read it through Task.LSNs.
	History []uint64
	// AttemptBase is Attempt when the task was last retried by an operator
	// (TaskRetried), 0 before: the retry policy's budget counts the
	// attempts after it.
	AttemptBase uint32
	// held is this progress's share of its State's HeldBytes, as last
	// accounted (State.account); it fills what would be padding.
	held uint32
	// first holds the first execution, so that a first lease needs one
	// allocation (this struct) rather than two: Executions is first[:1:1]
	// until a second lease moves it to an array of its own.
	first [1]Execution
}

// noProgress is the Progress of every task that has none of its own. It
// is never written (Invariants checks that it stays empty).
var noProgress Progress

// empty reports whether p holds nothing.
func (p *Progress) empty() bool {
	return len(p.Executions) == 0 && p.Result == nil && p.CommittedBy == "" && p.FailureReason == "" && p.AttemptBase == 0 && len(p.History) == 0
}

// LSNs lists every record that touched the task, in log order, starting
// with its creation. Like the task, it is only valid until the next Apply.
func (t *Task) LSNs() []uint64 {
	if len(t.History) > 0 {
		return t.History
	}
	return unsafe.Slice(&t.CreatedLSN, 1)
}

// touched appends lsn to t's record history.
func (t *Task) touched(lsn uint64) {
	p := t.progress()
	if len(p.History) == 0 {
		p.History = append(make([]uint64, 0, 4), t.CreatedLSN)
	}
	p.History = append(p.History, lsn)
}

// progress returns t's own Progress, allocating it if t still shares
// noProgress. Every write to a Progress field goes through it.
func (t *Task) progress() *Progress {
	if t.Progress == &noProgress {
		t.Progress = new(Progress)
	}
	return t.Progress
}

// addExecution appends e to t's executions.
func (t *Task) addExecution(e Execution) {
	p := t.progress()
	if len(p.Executions) == 0 {
		p.first[0] = e
		p.Executions = p.first[:1:1]
		return
	}
	p.Executions = append(p.Executions, e)
	p.first = [1]Execution{} // no longer used: let go of its strings
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

// Clone returns a deep copy that shares nothing with the state, in a
// canonical form: its own QueueKey, Policy and Progress, whatever the task
// shares (so two states with the same content export equal clones).
func (t *Task) Clone() *Task {
	c := *t
	k, p := *t.QueueKey, *t.Policy
	c.QueueKey, c.Policy = &k, &p
	c.Progress = &Progress{
		Executions:    append([]Execution(nil), t.Executions...),
		Result:        cloneBytes(t.Result),
		CommittedBy:   t.CommittedBy,
		FailureReason: t.FailureReason,
		History:       append([]uint64(nil), t.LSNs()...),
		AttemptBase:   t.AttemptBase,
	}
	c.Payload = cloneBytes(t.Payload)
	c.heapIdx = -1
	c.delayed = false
	c.keyed = false
	c.graph = false
	c.pos = 0
	return &c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
