package state

import "fmt"

// TaskRetried is an operator's retry of a FAILED or DEAD task: it returns
// to WAITING, due from the retry on (NotBefore = At, so that its waiting
// age counts from the retry, not from its creation), with a fresh budget of
// attempts (its retry policy's MaxAttempts counted from now), and keeps its
// earlier executions.
//
// A task that an attempt committed (one killed while COMMITTED) is refused:
// its effect may have been applied, and running it again could apply it
// twice. So is a COMPLETED task: it is done.
type TaskRetried struct {
	TaskID string
	// By is who asked, Reason why, as given.
	By     string
	Reason string
	At     Time
}

func (r *TaskRetried) Task() string { return r.TaskID }

func (r *TaskRetried) apply(s *State, lsn uint64) string {
	t := s.Task(r.TaskID)
	switch {
	case t == nil:
		return "task does not exist"
	case t.State != Failed && t.State != Dead:
		return fmt.Sprintf("task is %s; only a FAILED or DEAD task can be retried", t.State)
	case t.CommittedBy != "":
		return fmt.Sprintf("lease %q committed the task, so its effect may have been applied", t.CommittedBy)
	}
	if why := s.RetryRefusal(t); why != "" {
		return why
	}
	s.retry(t, lsn, r.At)
	s.touch(t, lsn, r.At)
	return ""
}
