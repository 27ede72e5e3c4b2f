package state

import (
	"container/heap"
	"fmt"
)

// LeaseExtended moves the expiry of the current, unexpired lease forward,
// never beyond the task's deadline.
type LeaseExtended struct {
	TaskID         string
	LeaseID        string
	NewLeaseExpiry Time
	At             Time
	// By is who asked: the principal's name ("" without one).
	By string
}

func (r *LeaseExtended) Task() string { return r.TaskID }

func (r *LeaseExtended) apply(s *State, lsn uint64) string {
	t, cur, why := s.leaseOf(r.TaskID, r.LeaseID)
	switch {
	case cur == nil:
		return why
	case r.At >= cur.LeaseExpiry:
		return "lease expired before the extension"
	case r.NewLeaseExpiry <= cur.LeaseExpiry:
		return "new expiry is not after the current expiry"
	}
	if d, ok := s.deadlines.of(t); ok && r.NewLeaseExpiry > d {
		return fmt.Sprintf("new expiry %s is after the task's deadline %s", r.NewLeaseExpiry, d)
	}
	cur.LeaseExpiry = r.NewLeaseExpiry
	heap.Fix(&s.expiry, int(t.heapIdx))
	touch(t, lsn, r.At)
	return ""
}
