package state

import (
	"fmt"
	"math"
)

// TasksSubmitted creates several tasks in one record, all or none: a
// workflow batch (Workflow set), or a batch whose tasks depend on each
// other. Each task may depend on the tasks before it in Tasks and on tasks
// of the state; the i-th is the i-th in the creation order of the record's
// LSN (OrderKey.Seq). A workflow's tasks are all in its namespace.
type TasksSubmitted struct {
	// Workflow is the workflow the tasks join ("" for none), in the
	// namespace of the tasks.
	Workflow string
	Tasks    []TaskCreated
	// By is who asked: the principal's name ("" without one).
	By string
	At Time
}

// Task is "": the record names many tasks, and changes none it does not
// create (a new task only adds to the derived index of its dependencies'
// dependents).
func (*TasksSubmitted) Task() string { return "" }

func (r *TasksSubmitted) apply(s *State, lsn uint64) string {
	if why := checkCreations(s, r.Tasks, r.Workflow); why != "" {
		return why
	}
	var w *Workflow
	if r.Workflow != "" {
		w = s.workflowOf(WorkflowKey{r.Tasks[0].Namespace, r.Workflow}, r.At)
	}
	for i := range r.Tasks {
		r.Tasks[i].create(s, lsn, uint16(i), "", w)
	}
	return ""
}

// checkCreations says why the tasks of one record (a TasksSubmitted, or
// what a commit spawns) cannot all be created in s, in order, or "". A
// task may depend on the tasks before it. With a workflow, every task is
// in the namespace of the first.
func checkCreations(s *State, tasks []TaskCreated, workflow string) string {
	switch {
	case len(tasks) == 0:
		return "no task to create"
	case len(tasks) > math.MaxUint16+1:
		return fmt.Sprintf("%d tasks in one record, over %d", len(tasks), math.MaxUint16+1)
	}
	created := newBatchIDs(len(tasks))
	for i := range tasks {
		r := &tasks[i]
		if workflow != "" && r.Namespace != tasks[0].Namespace {
			return fmt.Sprintf("task %d (%q) is in namespace %q, not the workflow's %q", i, r.TaskID, r.Namespace, tasks[0].Namespace)
		}
		if why := r.check(s, created); why != "" {
			return fmt.Sprintf("task %d (%q): %s", i, r.TaskID, why)
		}
		created.add(r)
	}
	return ""
}
