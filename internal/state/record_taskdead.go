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
	if cur := t.CurrentLease(); cur != nil {
		if cur.Status != ExecCommitted {
			cur.Status = ExecAborted
			cur.Reason = "task killed"
			cur.FinishedAt = r.At
		}
		s.dropLease(t)
	} else if t.Schedulable() {
		s.queue(t).remove(t)
	}
	t.progress().FailureReason = r.Reason
	s.transition(t, Dead)
	s.touch(t, lsn, r.At)
	s.resolveDependents(lsn, r.At)
	return ""
}
