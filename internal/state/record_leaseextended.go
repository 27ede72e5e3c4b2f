package state

import "container/heap"

// LeaseExtended moves the expiry of the current, unexpired lease forward.
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
	cur.LeaseExpiry = r.NewLeaseExpiry
	heap.Fix(&s.expiry, int(t.heapIdx))
	touch(t, lsn, r.At)
	return ""
}
