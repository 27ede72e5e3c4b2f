package state

import (
	"fmt"
	"slices"
)

// Deliveries (docs/design/workflows.md, "Cluster mode"): a record that
// creates tasks for several partitions of a cluster — a workflow batch, a
// commit's spawn — is written in one partition, its home. It creates the
// home's tasks, and the state keeps the others, with their final ids, as
// deliveries, in record order, until TasksDelivered says each is durable
// in its own partition. The home's host delivers them in that order, so
// every dependency exists before a dependent of it is created anywhere.

// Delivery is a task a record of this partition created for another
// partition, not yet known to be durable there.
type Delivery struct {
	// Workflow is the task's workflow ("" for none), in its namespace;
	// Parent the task whose commit spawned it ("" for none).
	Workflow string
	Parent   string
	Task     TaskCreated
	// LSN is the record that created it.
	LSN uint64
}

// deliveries are the pending deliveries of a State: list in record order,
// and the set of their ids.
type deliveries struct {
	list       []Delivery
	ids        map[string]bool
	byWorkflow map[WorkflowKey]int
}

// Deliveries returns the pending deliveries in record order: the first n
// (all for n <= 0). They are shared with the state: read only, and valid
// until the next Apply.
func (s *State) Deliveries(n int) []Delivery {
	l := s.deliveries.list
	if n > 0 && len(l) > n {
		l = l[:n]
	}
	return l
}

// DeliveryCount is the number of pending deliveries.
func (s *State) DeliveryCount() int { return len(s.deliveries.list) }

// Delivering reports whether task id is a pending delivery.
func (s *State) Delivering(id string) bool { return s.deliveries.ids[id] }

// DeliveringRequest returns the pending delivery of request id requestID
// in namespace, or nil.
func (s *State) DeliveringRequest(namespace, requestID string) *Delivery {
	if requestID == "" {
		return nil
	}
	for i := range s.deliveries.list {
		d := &s.deliveries.list[i]
		if d.Task.RequestID == requestID && d.Task.Namespace == namespace {
			return d
		}
	}
	return nil
}

// WorkflowDeliveries counts the pending deliveries of workflow k.
func (s *State) WorkflowDeliveries(k WorkflowKey) int { return s.deliveries.byWorkflow[k] }

// deliver keeps tasks as deliveries of the record at lsn.
func (s *State) deliver(tasks []TaskCreated, workflow, parent string, lsn uint64) {
	if len(tasks) == 0 {
		return
	}
	if s.deliveries.ids == nil {
		s.deliveries.ids, s.deliveries.byWorkflow = make(map[string]bool), make(map[WorkflowKey]int)
	}
	for i := range tasks {
		s.deliveries.list = append(s.deliveries.list, Delivery{Workflow: workflow, Parent: parent, Task: tasks[i], LSN: lsn})
		s.deliveries.ids[tasks[i].TaskID] = true
		s.held += deliveryHeld(&tasks[i])
		if workflow != "" {
			s.deliveries.byWorkflow[WorkflowKey{tasks[i].Namespace, workflow}]++
		}
	}
}

// deliveryHeld is what a pending delivery holds in memory, as HeldBytes
// counts it.
func deliveryHeld(r *TaskCreated) int64 {
	n := 200 + len(r.TaskID) + len(r.Namespace) + len(r.Queue) + len(r.Payload) + len(r.RequestID) + len(r.Kind) + len(r.Key) +
		len(r.Trace.Parent) + len(r.Trace.State)
	for _, d := range r.DependsOn {
		n += 16 + len(d)
	}
	return int64(n)
}

// checkDeliveries says why tasks cannot be kept as deliveries of a record
// that creates created in this partition, or "": each is a task another
// partition can create (its partition checks its dependencies), with an
// id and a request id that neither the record nor a pending delivery
// uses; with a workflow, in its namespace.
func (s *State) checkDeliveries(tasks []TaskCreated, created []TaskCreated, workflow, namespace string) string {
	ids := make(map[string]bool, len(tasks)+len(created))
	reqs := make(map[[2]string]bool, len(tasks)+len(created))
	for i := range created {
		ids[created[i].TaskID] = true
		reqs[[2]string{created[i].Namespace, created[i].RequestID}] = true
	}
	for i := range tasks {
		r := &tasks[i]
		why := r.checkFields()
		switch {
		case why != "":
		case s.Task(r.TaskID) != nil || ids[r.TaskID] || s.deliveries.ids[r.TaskID]:
			why = "task id already exists"
		case r.RequestID != "" && (reqs[[2]string{r.Namespace, r.RequestID}] || s.DeliveringRequest(r.Namespace, r.RequestID) != nil):
			why = fmt.Sprintf("request id %q already used in namespace %q", r.RequestID, r.Namespace)
		case workflow != "" && namespace != "" && r.Namespace != namespace:
			why = fmt.Sprintf("in namespace %q, not the workflow's %q", r.Namespace, namespace)
		}
		if why != "" {
			return fmt.Sprintf("delivery %d (%q): %s", i, r.TaskID, why)
		}
		ids[r.TaskID] = true
		if r.RequestID != "" {
			reqs[[2]string{r.Namespace, r.RequestID}] = true
		}
	}
	return ""
}

// TasksDelivered records that deliveries are durable in their partitions:
// each leaves the pending deliveries. Every id must name a pending
// delivery, so that a delivery is marked once.
type TasksDelivered struct {
	TaskIDs []string
	At      Time
}

// Task is "": the record names tasks of other partitions.
func (*TasksDelivered) Task() string { return "" }

func (r *TasksDelivered) apply(s *State, _ uint64) string {
	if len(r.TaskIDs) == 0 {
		return "no task named"
	}
	done := make(map[string]bool, len(r.TaskIDs))
	for _, id := range r.TaskIDs {
		if !s.deliveries.ids[id] || done[id] {
			return fmt.Sprintf("task %q is not a pending delivery", id)
		}
		done[id] = true
	}
	s.deliveries.list = slices.DeleteFunc(s.deliveries.list, func(d Delivery) bool {
		if done[d.Task.TaskID] {
			delete(s.deliveries.ids, d.Task.TaskID)
			s.held -= deliveryHeld(&d.Task)
			if d.Workflow != "" {
				k := WorkflowKey{d.Task.Namespace, d.Workflow}
				if s.deliveries.byWorkflow[k]--; s.deliveries.byWorkflow[k] == 0 {
					delete(s.deliveries.byWorkflow, k)
				}
			}
			return true
		}
		return false
	})
	if len(s.deliveries.list) == 0 {
		s.deliveries.list = nil
	}
	return ""
}

// deliveryErrors are the ways the deliveries' set of ids is not theirs
// (Invariants).
func (s *State) deliveryErrors() []error {
	var errs []error
	if len(s.deliveries.ids) != len(s.deliveries.list) {
		errs = append(errs, fmt.Errorf("%d pending deliveries, %d ids in their set", len(s.deliveries.list), len(s.deliveries.ids)))
	}
	byWorkflow := map[WorkflowKey]int{}
	for i := range s.deliveries.list {
		d := &s.deliveries.list[i]
		if d.Workflow != "" {
			byWorkflow[WorkflowKey{d.Task.Namespace, d.Workflow}]++
		}
		if !s.deliveries.ids[d.Task.TaskID] {
			errs = append(errs, fmt.Errorf("pending delivery %q is not in the set of ids", d.Task.TaskID))
		}
		if i > 0 && d.LSN < s.deliveries.list[i-1].LSN {
			errs = append(errs, fmt.Errorf("pending delivery %q (lsn %d) after one of lsn %d", d.Task.TaskID, d.LSN, s.deliveries.list[i-1].LSN))
		}
	}
	if len(byWorkflow) != len(s.deliveries.byWorkflow) {
		errs = append(errs, fmt.Errorf("pending deliveries of %d workflows, %d counted", len(byWorkflow), len(s.deliveries.byWorkflow)))
	}
	for k, n := range byWorkflow {
		if s.deliveries.byWorkflow[k] != n {
			errs = append(errs, fmt.Errorf("workflow %v has %d pending deliveries, %d counted", k, n, s.deliveries.byWorkflow[k]))
		}
	}
	return errs
}

// AddDelivery restores a pending delivery of an Image, in record order.
// After an error the Loader refuses everything.
func (l *Loader) AddDelivery(d Delivery) error {
	if l.err != nil {
		return l.err
	}
	why := d.Task.checkFields()
	switch {
	case why != "":
	case l.s.deliveries.ids[d.Task.TaskID]:
		why = "delivered twice"
	case d.LSN == 0:
		why = "no lsn"
	case len(l.s.deliveries.list) > 0 && d.LSN < l.s.deliveries.list[len(l.s.deliveries.list)-1].LSN:
		why = "out of record order"
	}
	if why != "" {
		l.err = fmt.Errorf("%w: delivery of task %q: %s", ErrRestore, d.Task.TaskID, why)
		return l.err
	}
	l.s.deliver([]TaskCreated{d.Task}, d.Workflow, d.Parent, d.LSN)
	return nil
}
