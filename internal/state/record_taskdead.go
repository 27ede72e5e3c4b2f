package state

import "fmt"

// TaskDead kills a task that is not yet terminal (an administrator's
// decision; no retries).
type TaskDead struct {
	TaskID string
	Reason string
	At     Time
	// By is who asked, as given ("" in records written before it was).
	By string
}

func (r *TaskDead) Task() string { return r.TaskID }

func (r *TaskDead) apply(s *State, lsn uint64) string {
	t := s.Task(r.TaskID)
	switch {
	case t == nil:
		return "task does not exist"
	case t.State.Terminal():
		return fmt.Sprintf("task is already %s", t.State)
	}
	s.kill(t, "task killed", r.Reason, r.At)
	s.touch(t, lsn, r.At)
	s.resolveDependents(lsn, r.At)
	return ""
}

// kill ends t, which has not ended, DEAD with reason: a lease held loses
// its authority (aborted with leaseReason, unless it committed) and a
// task in its queue leaves it. The caller touches t and resolves its
// dependents.
func (s *State) kill(t *Task, leaseReason, reason string, at Time) {
	if cur := t.CurrentLease(); cur != nil {
		if cur.Status != ExecCommitted {
			cur.Status = ExecAborted
			cur.Reason = leaseReason
			cur.FinishedAt = at
		}
		s.dropLease(t)
	} else if t.Schedulable() {
		s.queue(t).remove(t)
	}
	t.progress().FailureReason = reason
	s.transition(t, Dead)
}
