package state

import "fmt"

// WorkflowRetried retries a workflow: every task of it that is FAILED or
// DEAD and that no attempt committed is retried as TaskRetried retries one,
// in creation order, so that a task's dependencies of the workflow are
// retried before it; a task whose dependency cannot run again (a failed
// one under DepDead that is not retried) stays as it is. The workflow's
// cancel mark is cleared (docs/design/workflows.md).
type WorkflowRetried struct {
	Namespace string
	Workflow  string
	Reason    string
	// By is who asked, as given or the principal's name.
	By string
	At Time
}

// Task is "": the record names a workflow, whose tasks it retries.
func (*WorkflowRetried) Task() string { return "" }

func (r *WorkflowRetried) apply(s *State, lsn uint64) string {
	w := s.workflows[WorkflowKey{r.Namespace, r.Workflow}]
	if w == nil {
		return fmt.Sprintf("workflow %q of namespace %q does not exist", r.Workflow, r.Namespace)
	}
	w.Members(func(t *Task) bool {
		if (t.State == Failed || t.State == Dead) && t.CommittedBy == "" && s.retry(t, lsn, r.At) {
			s.touchOther(t, lsn, r.At)
		}
		return true
	})
	w.Cancelled = nil
	return ""
}

// retry retries t, a FAILED or DEAD task no attempt committed, at lsn, as
// TaskRetried does, unless a dependency refuses it (RetryRefusal): it
// reports whether it did.
func (s *State) retry(t *Task, lsn uint64, at Time) bool {
	to := Waiting
	if len(s.Edges(t)) > 0 {
		states, pending, why := s.evaluate(t)
		if why != "" {
			return false
		}
		to = s.reblock(t, states, pending)
	}
	t.progress().AttemptBase = t.Attempt
	t.NotBefore = at
	t.progress().FailureReason = ""
	s.transition(t, to)
	if to == Waiting {
		s.queue(t).add(t)
	} else {
		s.watchRemote(t, s.graph[t])
	}
	return true
}
