package state

import (
	"container/heap"
	"fmt"
)

// LeaseGranted gives attempt Attempt of a task to a worker until LeaseExpiry.
// It is the only way a task becomes owned. A task with a deadline is leased
// only before it, and never beyond it. On a queue with flow control it
// takes a slot and a token (docs/design/state-machine.md, "Flow control"), and
// does not apply without them; on a queue with key limits, so does the
// task's key, and an ordered key's task only leases in its turn
// (docs/design/keys.md).
type LeaseGranted struct {
	TaskID      string
	LeaseID     string
	WorkerID    string
	Attempt     uint32
	LeaseExpiry Time
	GrantedAt   Time
	// By is who asked: the principal's name ("" without one).
	By string
}

func (r *LeaseGranted) Task() string { return r.TaskID }

func (r *LeaseGranted) apply(s *State, lsn uint64) string {
	t := s.Task(r.TaskID)
	switch {
	case t == nil:
		return "task does not exist"
	case !t.Schedulable():
		return fmt.Sprintf("task is %s and cannot be leased", t.State)
	case t.State == Waiting && s.queue(t).paused != nil:
		return "the task's queue is paused: only COMMITTED tasks may be leased, to be finalised"
	case t.State == Waiting && t.NotBefore > r.GrantedAt:
		return fmt.Sprintf("task is not schedulable before %s", t.NotBefore)
	case r.Attempt != t.Attempt+1:
		return fmt.Sprintf("attempt %d does not follow attempt %d", r.Attempt, t.Attempt)
	case r.LeaseID == "":
		return "lease id is empty"
	case s.byLease(r.LeaseID) != nil:
		return fmt.Sprintf("lease id %q is already in use", r.LeaseID)
	case r.LeaseExpiry <= r.GrantedAt:
		return "lease expiry is not after the grant"
	}
	if d, ok := s.deadlines.of(t); ok {
		switch {
		case r.GrantedAt >= d:
			return fmt.Sprintf("the task's deadline %s has passed", d)
		case r.LeaseExpiry > d:
			return fmt.Sprintf("lease expiry %s is after the task's deadline %s", r.LeaseExpiry, d)
		}
	}
	// Last of the checks: taking a token changes the bucket.
	qi := s.queue(t)
	if l := qi.limits; l != nil {
		if why := l.admit(qi.leases, r.GrantedAt); why != "" {
			return why
		}
		if why := s.admitKey(qi, t, r.GrantedAt); why != "" {
			return why
		}
		l.take(r.GrantedAt)
	}
	s.grantKey(qi, t, r.GrantedAt)
	qi.remove(t)
	t.addExecution(Execution{
		Attempt:     r.Attempt,
		LeaseID:     r.LeaseID,
		WorkerID:    r.WorkerID,
		Status:      ExecLeased,
		Finalize:    t.State == Committed,
		LeasedAt:    r.GrantedAt,
		LeaseExpiry: r.LeaseExpiry,
	})
	t.cur = int32(len(t.Executions) - 1)
	t.Attempt = r.Attempt
	if t.State == Waiting {
		s.transition(t, Leased)
	}
	s.leases.add(hashString(r.LeaseID), t)
	heap.Push(&s.expiry, t)
	qi.leases++
	s.touch(t, lsn, r.GrantedAt)
	return ""
}
