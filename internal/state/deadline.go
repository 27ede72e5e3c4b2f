package state

import (
	"container/heap"
	"errors"
	"fmt"
)

// ReasonDeadlineExceeded is the FailureReason of a task failed by
// TaskDeadlineExceeded.
const ReasonDeadlineExceeded = "deadline_exceeded"

// ReasonLeaseDeadline is the Reason of an execution whose lease
// TaskDeadlineExceeded ended.
const ReasonLeaseDeadline = "deadline exceeded"

// deadlineIndex holds the deadlines of the tasks that have one and are
// still WAITING or LEASED, beside the tasks rather than in Task, so that
// only those tasks pay for it (docs/design/state-machine.md, "Time"): a map from
// task to its entry, and a heap of the entries by deadline, so that the
// next deadline is at hand and the tasks past theirs are found without a
// scan. A task leaves the index when it is COMMITTED or finished.
type deadlineIndex struct {
	m map[*Task]*deadlineEntry
	posHeap[*deadlineEntry]
}

type deadlineEntry struct {
	t   *Task
	at  Time
	pos int32
}

func (x *deadlineIndex) Less(i, j int) bool {
	a, b := x.items[i], x.items[j]
	if a.at != b.at {
		return a.at < b.at
	}
	return a.t.CreatedLSN < b.t.CreatedLSN
}

func (e *deadlineEntry) heapPos() *int32 { return &e.pos }

// add gives t the deadline at.
func (x *deadlineIndex) add(t *Task, at Time) {
	if x.m == nil {
		x.m = make(map[*Task]*deadlineEntry)
	}
	e := &deadlineEntry{t: t, at: at}
	x.m[t] = e
	heap.Push(x, e)
}

// remove drops t's deadline, if it has one.
func (x *deadlineIndex) remove(t *Task) {
	e := x.m[t]
	if e == nil {
		return
	}
	heap.Remove(x, int(e.pos))
	delete(x.m, t)
}

// of returns t's deadline, if it has one.
func (x *deadlineIndex) of(t *Task) (Time, bool) {
	if len(x.m) == 0 {
		return 0, false
	}
	if e := x.m[t]; e != nil {
		return e.at, true
	}
	return 0, false
}

// Deadline returns the deadline of the task with id, if the task has one in
// force: it was submitted with one and is still WAITING or LEASED (a
// COMMITTED or finished task has none any more).
func (s *State) Deadline(id string) (Time, bool) {
	t := s.Task(id)
	if t == nil {
		return 0, false
	}
	return s.deadlines.of(t)
}

// DeadlineOf is Deadline for a task of the state, without looking it up.
func (s *State) DeadlineOf(t *Task) (Time, bool) { return s.deadlines.of(t) }

// NextDeadline is the earliest deadline in force, if any task has one.
func (s *State) NextDeadline() (Time, bool) {
	if len(s.deadlines.items) == 0 {
		return 0, false
	}
	return s.deadlines.items[0].at, true
}

// PastDeadline returns up to max tasks whose deadline is at or before now,
// in no particular order.
func (s *State) PastDeadline(now Time, max int) []*Task {
	var out []*Task
	h := s.deadlines.items
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h) || len(out) >= max || h[i].at > now {
			return
		}
		out = append(out, h[i].t)
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return out
}

// deadlineErrors checks the deadline index: each entry is in the heap at its
// position, in heap order, for a task of the state that is WAITING or
// LEASED, whose current lease (if any) does not outlive the deadline.
func (s *State) deadlineErrors() []error {
	var errs []error
	x := &s.deadlines
	if len(x.m) != len(x.items) {
		errs = append(errs, fmt.Errorf("deadline index has %d tasks and %d heap entries", len(x.m), len(x.items)))
	}
	for i, e := range x.items {
		t := e.t
		switch {
		case int(e.pos) != i || x.m[t] != e:
			errs = append(errs, fmt.Errorf("deadline heap entry %d (task %q) is not indexed at its position", i, t.ID))
		case s.Task(t.ID) != t:
			errs = append(errs, fmt.Errorf("deadline heap entry %d (task %q) is not in the task table", i, t.ID))
		case t.State != Waiting && t.State != Leased && t.State != Blocked:
			errs = append(errs, fmt.Errorf("task %q: %s but has a deadline in the index", t.ID, t.State))
		}
		if cur := t.CurrentLease(); cur != nil && cur.LeaseExpiry > e.at {
			errs = append(errs, fmt.Errorf("task %q: lease %q expires at %s, after the deadline %s", t.ID, cur.LeaseID, cur.LeaseExpiry, e.at))
		}
		if i > 0 && x.Less(i, (i-1)/2) {
			errs = append(errs, errors.New("deadline heap is out of order"))
		}
	}
	return errs
}
