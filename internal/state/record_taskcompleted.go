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
	// Spawn holds the tasks the commit spawns, created by this record
	// after the completion (State.spawn). Only a completion that commits
	// (from LEASED) may spawn: a finalisation's commit spawned already.
	Spawn []TaskCreated
	// Deliver holds the spawned tasks placed in other partitions of a
	// cluster, each with its final id: kept as deliveries until a
	// TasksDelivered (deliveries.go).
	Deliver []TaskCreated
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
	case len(r.Spawn)+len(r.Deliver) > 0 && t.State != Leased:
		return "a finalisation spawns nothing: the commit spawned what it spawned"
	}
	if why := s.checkSpawn(t, r.Spawn, r.Deliver); why != "" {
		return why
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
	s.resolveDependents(lsn, r.At)
	s.spawn(t, r.Spawn, r.Deliver, lsn)
	return ""
}
