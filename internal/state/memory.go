package state

import "unsafe"

// What a State holds in memory, as it accounts it (HeldBytes): a figure
// derived from its content alone — each task's strings, payload and
// progress, its trace context and its lease's last progress report, each
// queue that has tasks, each schedule — so that replaying
// the same log, from its start or from a snapshot, gives the same figure
// on every node, whatever the allocator did. It is an estimate of the Go
// heap the state keeps alive, calibrated against it (TestHeldBytesTracksTheHeap):
// the fixed costs below are what a task, a progress, an execution, a
// queue and a schedule take beyond their variable parts, index entries
// included. What the state keeps that no content says is left out: the
// slab's and the id indexes' room for the most tasks it ever held (they
// never shrink), and the shared policies and queue keys
// (docs/design/state-machine.md, "Memory per task").
const (
	// taskHeld is a task's slab entry (136 bytes), its entries in the id
	// and request-id indexes, the creation order and its queue's heap, and
	// the rounding of its one allocation of id, request id and payload.
	taskHeld = 192
	// progressHeld is a Progress of its own (208 bytes, its first
	// execution inline) and the first array of its record history.
	progressHeld = 240
	// executionHeld is each execution past the first (an array of them).
	executionHeld = int64(unsafe.Sizeof(Execution{}))
	// historyHeld is each entry of a record history past the first four.
	historyHeld = 8
	// queueHeld is the index of a queue while it has tasks: its heaps,
	// counts and recent event counts.
	queueHeld = int64(unsafe.Sizeof(queueIndex{})) + int64(unsafe.Sizeof(QueueKey{}))
	// scheduleHeld is a schedule with its recent decisions.
	scheduleHeld = int64(unsafe.Sizeof(Schedule{})) + RecentFires*int64(unsafe.Sizeof(Fire{}))
	// besideHeld is an entry of a map of what the state keeps beside some
	// tasks (beside.go): the task's pointer and the map's share of a
	// bucket, beside the value.
	besideHeld = 16
	// keyIndexHeld is a queue's key index (keys.go) with its maps.
	keyIndexHeld = int64(unsafe.Sizeof(keyIndex{})) + 2*96
	// keyStateHeld is the state of a key (keys.go) beyond its name: the
	// struct, its entry in the key map and in a heap of keys.
	keyStateHeld = int64(unsafe.Sizeof(keyState{})) + 40 + 8
	// keyedTaskHeld is what a task with a key holds beyond the key's
	// bytes (in its own allocation): its entry in the key map of its
	// queue and in its key's heap of open tasks.
	keyedTaskHeld = besideHeld + int64(unsafe.Sizeof("")) + int64(unsafe.Sizeof(openSlot{}))
)

// NewKeyHeldBytes is what HeldBytes grows by at most for the key of a new
// task: its share of the task, and the key's state if the key has none
// yet (0 for no key).
func NewKeyHeldBytes(key string) int64 {
	if key == "" {
		return 0
	}
	return heldByKeyedTask(key) + heldByKeyState(key)
}

// heldByKeyState is what the state of a key named name holds.
func heldByKeyState(name string) int64 { return keyStateHeld + int64(len(name)) }

// heldByKeyWeight is what the weight of key holds.
func heldByKeyWeight(key string) int64 { return besideHeld + 8 + int64(len(key)) }

// heldByKeyedTask is what a task's key costs it.
func heldByKeyedTask(key string) int64 { return keyedTaskHeld + int64(len(key)) }

// HeldBytes is what the state holds in memory, as it accounts it: a pure
// function of its content (see the constants above), kept up to date as
// records apply.
func (s *State) HeldBytes() int64 { return s.held }

// NewTaskHeldBytes is what HeldBytes grows by when a TaskCreated with an
// id, request id and payload of these lengths applies (its queue aside), so
// that a coordinator can tell before the append whether a submit fits a
// budget.
func NewTaskHeldBytes(idLen, requestIDLen, payloadLen int) int64 {
	return taskHeld + int64(idLen) + int64(requestIDLen) + int64(payloadLen)
}

// heldByTask is what t holds: its own part and its progress's, as last
// accounted (Progress.held).
func heldByTask(t *Task) int64 {
	return NewTaskHeldBytes(len(t.ID), len(t.RequestID), len(t.Payload)) + int64(t.Progress.held)
}

// heldByProgress is what p holds, computed from its content; 0 for the
// shared empty progress.
func heldByProgress(p *Progress) int64 {
	if p == &noProgress {
		return 0
	}
	n := int64(progressHeld) + int64(len(p.Result)) + int64(len(p.CommittedBy)) + int64(len(p.FailureReason))
	if len(p.Executions) > 1 {
		n += int64(len(p.Executions)) * executionHeld
	}
	for i := range p.Executions {
		e := &p.Executions[i]
		n += int64(len(e.LeaseID)) + int64(len(e.WorkerID)) + int64(len(e.Reason))
	}
	if len(p.History) > 4 {
		n += int64(len(p.History)-4) * historyHeld
	}
	return n
}

// NewScheduleHeldBytes is what a schedule of key k, definition d and
// creator by holds (HeldBytes), so that a coordinator can tell before the
// append whether creating or updating it fits a budget.
func NewScheduleHeldBytes(k ScheduleKey, d ScheduleDef, by string) int64 {
	return scheduleHeld + int64(len(k.Namespace)+len(k.Queue)+len(k.Name)) +
		int64(len(d.Cron)+len(d.TimeZone)+len(d.Payload)) + int64(len(by))
}

// heldBySchedule is what sc holds.
func heldBySchedule(sc *Schedule) int64 { return NewScheduleHeldBytes(sc.Key, sc.Def, sc.CreatedBy) }

// heldByTrace is what a task's trace context holds beside it.
func heldByTrace(tc TraceContext) int64 {
	return besideHeld + int64(unsafe.Sizeof(tc)) + int64(len(tc.Parent)+len(tc.State))
}

// heldByReport is what the last progress report of a lease holds beside
// its task.
func heldByReport(r Report) int64 {
	return besideHeld + int64(unsafe.Sizeof(LastReport{})) + int64(len(r.Message))
}

// heldByQueue is what a queue's index holds while it has tasks.
func heldByQueue(k QueueKey) int64 {
	return queueHeld + 2*int64(len(k.Namespace)+len(k.Queue))
}

// account brings t's progress's share of HeldBytes up to date after a
// record changed it.
func (s *State) account(t *Task) {
	p := t.Progress
	if p == &noProgress {
		return
	}
	n := heldByProgress(p)
	s.held += n - int64(p.held)
	p.held = uint32(n)
}
