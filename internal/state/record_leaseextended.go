package state

import (
	"container/heap"
	"fmt"
)

// LeaseExtended moves the expiry of the current, unexpired lease forward,
// never beyond the task's deadline: a heartbeat. One that carries a
// progress report (Report) keeps it as the lease's last, and may leave the
// expiry where it is (a heartbeat at the deadline, or in the same instant
// as the one before).
type LeaseExtended struct {
	TaskID         string
	LeaseID        string
	NewLeaseExpiry Time
	At             Time
	// By is who asked: the principal's name ("" without one).
	By string
	// Report is the progress the worker reported with the heartbeat; nil
	// for none (the last report stands).
	Report *Report
}

func (r *LeaseExtended) Task() string { return r.TaskID }

func (r *LeaseExtended) apply(s *State, lsn uint64) string {
	t, cur, why := s.leaseOf(r.TaskID, r.LeaseID)
	switch {
	case cur == nil:
		return why
	case r.At >= cur.LeaseExpiry:
		return "lease expired before the extension"
	case r.Report == nil && r.NewLeaseExpiry <= cur.LeaseExpiry:
		return "new expiry is not after the current expiry"
	case r.NewLeaseExpiry < cur.LeaseExpiry:
		return "new expiry is before the current expiry"
	case r.Report != nil && checkReport(r.Report) != "":
		return checkReport(r.Report)
	}
	if d, ok := s.deadlines.of(t); ok && r.NewLeaseExpiry > d {
		return fmt.Sprintf("new expiry %s is after the task's deadline %s", r.NewLeaseExpiry, d)
	}
	if r.NewLeaseExpiry != cur.LeaseExpiry {
		cur.LeaseExpiry = r.NewLeaseExpiry
		heap.Fix(&s.expiry, int(t.heapIdx))
	}
	if r.Report != nil {
		s.setReport(t, LastReport{Report: *r.Report, At: r.At})
	}
	s.touch(t, lsn, r.At)
	return ""
}
