package state

import "fmt"

// TaskSnoozed ends an uncommitted attempt at the worker's request and puts
// the task back to WAITING until NotBefore, without using up an attempt:
// the snoozed execution is SNOOZED, the task's attempt counter goes back by
// one, and the next lease has the same attempt number again. The retry
// policy's budget and backoff are untouched, so a task may snooze any
// number of times (the coordinator bounds how many: Limits.MaxSnoozes).
type TaskSnoozed struct {
	TaskID  string
	LeaseID string
	// NotBefore is when the task may be leased again (at or after At).
	NotBefore Time
	// Reason is why, as the worker said ("" for none); the snoozed
	// execution keeps it.
	Reason string
	At     Time
	// By is who asked: the principal's name ("" without one).
	By string
}

func (r *TaskSnoozed) Task() string { return r.TaskID }

func (r *TaskSnoozed) apply(s *State, lsn uint64) string {
	t, cur, why := s.leaseOf(r.TaskID, r.LeaseID)
	switch {
	case cur == nil:
		return why
	case t.State != Leased:
		return fmt.Sprintf("task is %s; only an uncommitted attempt can snooze", t.State)
	case r.At >= cur.LeaseExpiry:
		return "lease expired before the snooze"
	case r.NotBefore < r.At:
		return fmt.Sprintf("not before %s is before the snooze at %s", r.NotBefore, r.At)
	}
	cur.Status = ExecSnoozed
	cur.Reason = r.Reason
	cur.FinishedAt = r.At
	s.dropLease(t)
	s.touch(t, lsn, r.At)
	t.Attempt-- // the attempt did not count: the next lease has its number
	t.NotBefore = r.NotBefore
	s.transition(t, Waiting)
	s.queue(t).add(t)
	return ""
}
