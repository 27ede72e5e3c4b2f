package state

import "fmt"

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
	// By is who asked: the principal's name ("" without one).
	By string
}

func (r *TaskFailed) Task() string { return r.TaskID }

func (r *TaskFailed) apply(s *State, lsn uint64) string {
	t, cur, why := s.leaseOf(r.TaskID, r.LeaseID)
	switch {
	case cur == nil:
		return why
	case t.State != Leased:
		return fmt.Sprintf("task is %s; only an uncommitted attempt can fail", t.State)
	}
	cur.Status = ExecAborted
	cur.Reason = r.Reason
	cur.FinishedAt = r.At
	s.dropLease(t)
	s.touch(t, lsn, r.At)
	if !r.Permanent && t.AttemptsLeft() {
		t.NotBefore = r.RetryAt
		s.transition(t, Waiting)
		s.queue(t).add(t)
		return ""
	}
	t.progress().FailureReason = r.Reason
	s.transition(t, Failed)
	s.event(t, EventFailed, r.At)
	s.resolveDependents(lsn, r.At)
	return ""
}
