package state

import "fmt"

// WorkflowCancelled cancels a workflow: every task of it that has not
// ended ends DEAD with Reason, as TaskDead ends one (a lease held loses
// its authority), and so, by the failure policy, do the tasks outside it
// that depend on them; the workflow is marked cancelled until it is
// retried (docs/design/workflows.md).
type WorkflowCancelled struct {
	Namespace string
	Workflow  string
	Reason    string
	// By is who asked, as given or the principal's name.
	By string
	At Time
}

// Task is "": the record names a workflow, whose tasks it ends.
func (*WorkflowCancelled) Task() string { return "" }

func (r *WorkflowCancelled) apply(s *State, lsn uint64) string {
	w := s.workflows[WorkflowKey{r.Namespace, r.Workflow}]
	if w == nil {
		return fmt.Sprintf("workflow %q of namespace %q does not exist", r.Workflow, r.Namespace)
	}
	reason := "workflow cancelled"
	if r.Reason != "" {
		reason += ": " + r.Reason
	}
	w.Members(func(t *Task) bool {
		if t.State.Terminal() {
			return true
		}
		s.kill(t, reason, reason, r.At)
		s.touchOther(t, lsn, r.At)
		return true
	})
	w.Cancelled = &Pause{By: r.By, Reason: r.Reason, At: r.At}
	s.resolveDependents(lsn, r.At)
	return ""
}
