package state

import "fmt"

// TaskCompleted finishes a task. From LEASED it is commit and done in one
// record; from COMMITTED it finalises the committed result.
type TaskCompleted struct {
	TaskID  string
	LeaseID string
	Result  []byte
	At      Time
	// By is who asked: the principal's name ("" without one).
	By string
}

func (r *TaskCompleted) Task() string { return r.TaskID }

func (r *TaskCompleted) apply(s *State, lsn uint64) string {
	t, cur, why := s.leaseOf(r.TaskID, r.LeaseID)
	switch {
	case cur == nil:
		return why
	case t.State != Leased && t.State != Committed:
		return fmt.Sprintf("task is %s", t.State)
	case r.At >= cur.LeaseExpiry:
		return "lease expired before the completion"
	}
	if t.State == Leased {
		// Commit and done in one record.
		cur.CommittedAt = r.At
		p := t.progress()
		p.CommittedBy, p.Result = r.LeaseID, r.Result
	}
	cur.Status = ExecDone
	cur.FinishedAt = r.At
	s.dropLease(t)
	s.transition(t, Completed)
	s.event(t, EventCompleted, r.At)
	s.touch(t, lsn, r.At)
	return ""
}
