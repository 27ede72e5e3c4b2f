package state

import (
	"strings"
	"testing"
)

// TestDeliveries: a TasksSubmitted creates its own tasks and keeps the
// others as deliveries, in record order, counted by workflow; a delivery
// whose id or request id the record or a pending delivery uses is
// refused; TasksDelivered takes a delivery out once, and a second one of
// the same id is refused.
func TestDeliveries(t *testing.T) {
	remote := func(id, rid string) TaskCreated {
		r := *created(id)
		r.RequestID = rid
		return r
	}
	s := run(t, &TasksSubmitted{Workflow: "w", Tasks: []TaskCreated{*created("a-p1")},
		Deliver: []TaskCreated{remote("b-p2", "rb"), remote("c-p3", "rc")}, At: sec})
	if s.Task("b-p2") != nil || !s.Delivering("b-p2") || s.DeliveryCount() != 2 || s.WorkflowDeliveries(WorkflowKey{"default", "w"}) != 2 {
		t.Fatalf("after the record: %d deliveries, b delivering %v", s.DeliveryCount(), s.Delivering("b-p2"))
	}
	if d := s.DeliveringRequest("default", "rc"); d == nil || d.Task.TaskID != "c-p3" || d.Workflow != "w" || d.LSN != 1 {
		t.Fatalf("the delivery of request rc: %+v", d)
	}
	for _, bad := range []*TasksSubmitted{
		{Tasks: []TaskCreated{*created("x-p1")}, Deliver: []TaskCreated{remote("b-p2", "")}, At: sec},
		{Tasks: []TaskCreated{*created("y-p1")}, Deliver: []TaskCreated{remote("z-p2", "rb")}, At: sec},
		{Tasks: []TaskCreated{*created("v-p1")}, Deliver: []TaskCreated{remote("v-p1", "")}, At: sec},
	} {
		if err := s.Apply(2, bad); err == nil {
			t.Fatalf("%+v applied", bad.Deliver)
		}
	}
	run2 := func(r Record) error { return s.Apply(s.LastLSN()+1, r) }
	if err := run2(&TasksDelivered{TaskIDs: []string{"c-p3"}, At: 2 * sec}); err != nil {
		t.Fatal(err)
	}
	if err := run2(&TasksDelivered{TaskIDs: []string{"c-p3"}, At: 2 * sec}); err == nil || !strings.Contains(err.Error(), "not a pending delivery") {
		t.Fatalf("a second TasksDelivered of c: %v", err)
	}
	if s.DeliveryCount() != 1 || s.Deliveries(0)[0].Task.TaskID != "b-p2" || s.WorkflowDeliveries(WorkflowKey{"default", "w"}) != 1 {
		t.Fatalf("after c was delivered: %+v", s.Deliveries(0))
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
	// In the partition a delivery of a spawn reaches, its tasks are
	// spawned by a task of another partition.
	p2 := run(t, &TasksSubmitted{Workflow: "w", Parent: "a-p1", Tasks: []TaskCreated{remote("b-p2", "rb")}, At: sec})
	if g := p2.Graph(p2.Task("b-p2")); g.Parent != "a-p1" || g.Workflow != "w" {
		t.Fatalf("the delivered task's graph: %+v", g)
	}
}
