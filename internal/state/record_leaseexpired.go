package state

import "fmt"

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

func (r *LeaseExpired) Task() string { return r.TaskID }

func (r *LeaseExpired) apply(s *State, lsn uint64) string {
	t, cur, why := s.leaseOf(r.TaskID, r.LeaseID)
	switch {
	case cur == nil:
		return why
	case r.At < cur.LeaseExpiry:
		return fmt.Sprintf("lease is not expired at %s (expiry %s)", r.At, cur.LeaseExpiry)
	}
	if cur.Status != ExecCommitted {
		cur.Status = ExecAborted
		cur.Reason = ReasonLeaseExpired
		cur.FinishedAt = r.At
	}
	s.dropLease(t)
	s.touch(t, lsn, r.At)
	s.event(t, EventLeaseExpired, r.At)
	switch {
	case t.State == Committed:
		s.queue(t).add(t) // offered again, only to be finalised
	case t.AttemptsLeft():
		t.NotBefore = r.RetryAt
		s.transition(t, Waiting)
		s.queue(t).add(t)
	default:
		t.progress().FailureReason = fmt.Sprintf("lease expired on the last attempt (%d of %d)", t.Attempt-t.AttemptBase, t.Retry.MaxAttempts)
		s.transition(t, Failed)
		s.event(t, EventFailed, r.At)
		s.resolveDependents(lsn, r.At)
	}
	return ""
}
