package state

import (
	"errors"
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
	// Deliver holds the tasks of the batch placed in other partitions of
	// a cluster, each with its final id: kept as deliveries until a
	// TasksDelivered (deliveries.go).
	Deliver []TaskCreated
	// Parent is, in the partition a delivery of a spawn reached, the task
	// of another partition whose commit spawned Tasks ("" for none).
	Parent string
}

// Task is "": the record names many tasks, and changes none it does not
// create (a new task only adds to the derived index of its dependencies'
// dependents).
func (*TasksSubmitted) Task() string { return "" }

func (r *TasksSubmitted) apply(s *State, lsn uint64) string {
	if why := r.check(s); why != "" {
		return why
	}
	var w *Workflow
	if r.Workflow != "" && len(r.Tasks) > 0 {
		w = s.workflowOf(WorkflowKey{r.Tasks[0].Namespace, r.Workflow}, r.At)
	}
	for i := range r.Tasks {
		r.Tasks[i].create(s, lsn, uint16(i), r.Parent, w)
	}
	s.deliver(r.Deliver, r.Workflow, "", lsn)
	return ""
}

// check says why r does not apply to s, or "".
func (r *TasksSubmitted) check(s *State) string {
	if len(r.Tasks) == 0 {
		if len(r.Deliver) == 0 {
			return "no task to create"
		}
		return s.checkDeliveries(r.Deliver, nil, r.Workflow, r.Deliver[0].Namespace)
	}
	if why := checkCreations(s, r.Tasks, r.Workflow); why != "" {
		return why
	}
	return s.checkDeliveries(r.Deliver, r.Tasks, r.Workflow, r.Tasks[0].Namespace)
}

// CheckSubmitted reports why r would not apply to s (nil: it would), so
// that a writer can refuse what the state would.
func (s *State) CheckSubmitted(r *TasksSubmitted) error {
	if why := r.check(s); why != "" {
		return errors.New(why)
	}
	return nil
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
