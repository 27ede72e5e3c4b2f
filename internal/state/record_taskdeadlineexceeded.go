package state

import "fmt"

// TaskDeadlineExceeded fails a task whose deadline passed before it was
// COMMITTED, whatever its attempts left: a WAITING task leaves its queue,
// a LEASED one loses its lease (the execution is aborted). The task becomes
// FAILED with FailureReason "deadline_exceeded". A COMMITTED task is
// refused: its effect may be applied, so it is finalised as usual.
type TaskDeadlineExceeded struct {
	TaskID string
	At     Time
}

func (r *TaskDeadlineExceeded) Task() string { return r.TaskID }

func (r *TaskDeadlineExceeded) apply(s *State, lsn uint64) string {
	t := s.Task(r.TaskID)
	if t == nil {
		return "task does not exist"
	}
	if t.State != Waiting && t.State != Leased && t.State != Blocked {
		return fmt.Sprintf("task is %s; only a WAITING, BLOCKED or LEASED task fails at its deadline", t.State)
	}
	d, ok := s.deadlines.of(t)
	switch {
	case !ok:
		return "task has no deadline"
	case r.At < d:
		return fmt.Sprintf("the deadline %s has not passed at %s", d, r.At)
	}
	if cur := t.CurrentLease(); cur != nil {
		cur.Status = ExecAborted
		cur.Reason = ReasonLeaseDeadline
		cur.FinishedAt = r.At
		s.dropLease(t)
	} else if t.State == Waiting {
		s.queue(t).remove(t)
	}
	t.progress().FailureReason = ReasonDeadlineExceeded
	s.transition(t, Failed)
	s.event(t, EventFailed, r.At)
	s.touch(t, lsn, r.At)
	s.resolveDependents(lsn, r.At)
	return ""
}
