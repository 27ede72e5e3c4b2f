package state

import "fmt"

// ExecutionStarted records that the worker holding the lease began work.
type ExecutionStarted struct {
	TaskID  string
	LeaseID string
	At      Time
	// By is who asked: the principal's name ("" without one).
	By string
}

func (r *ExecutionStarted) Task() string { return r.TaskID }

func (r *ExecutionStarted) apply(s *State, lsn uint64) string {
	t, cur, why := s.leaseOf(r.TaskID, r.LeaseID)
	switch {
	case cur == nil:
		return why
	case r.At >= cur.LeaseExpiry:
		return "lease expired before the start"
	case cur.Status != ExecLeased:
		return fmt.Sprintf("execution is %s, not LEASED", cur.Status)
	}
	cur.Status = ExecInProgress
	cur.StartedAt = r.At
	s.touch(t, lsn, r.At)
	return ""
}
