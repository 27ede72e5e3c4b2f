package state

import "fmt"

// TaskCommitted is the idempotency boundary: the first valid commit of a task
// wins, and only its attempt may apply external effects.
type TaskCommitted struct {
	TaskID  string
	LeaseID string
	Result  []byte
	At      Time
	// By is who asked: the principal's name ("" without one).
	By string
	// Spawn holds the tasks the commit spawns, created by this record
	// after the commit (State.spawn).
	Spawn []TaskCreated
	// Deliver holds the spawned tasks placed in other partitions of a
	// cluster, each with its final id: kept as deliveries until a
	// TasksDelivered (deliveries.go).
	Deliver []TaskCreated
}

func (r *TaskCommitted) Task() string { return r.TaskID }

func (r *TaskCommitted) apply(s *State, lsn uint64) string {
	t, cur, why := s.leaseOf(r.TaskID, r.LeaseID)
	switch {
	case cur == nil:
		return why
	case t.State != Leased || t.CommittedBy != "":
		return fmt.Sprintf("task is %s and already committed by lease %q", t.State, t.CommittedBy)
	case r.At >= cur.LeaseExpiry:
		return "lease expired before the commit"
	}
	if why := s.checkSpawn(t, r.Spawn, r.Deliver); why != "" {
		return why
	}
	cur.Status = ExecCommitted
	cur.CommittedAt = r.At
	p := t.progress()
	p.CommittedBy, p.Result = r.LeaseID, r.Result
	s.transition(t, Committed)
	s.touch(t, lsn, r.At)
	s.spawn(t, r.Spawn, r.Deliver, lsn)
	return ""
}
