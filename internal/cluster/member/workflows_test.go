package member_test

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestRemoteDependencyReleasedOnce: in a cluster of three nodes, tasks of
// another queue, and of other partitions of the dependency's own queue,
// that depend on a task are BLOCKED until it completes, and are then
// released exactly once (one DependencyResolved in each one's history),
// with its result in their leases, although the owner of the first
// dependent's partition left before the dependency completed (its new
// owner replays the pending edge and asks again) and another owner of a
// dependent's partition leaves right after it completed.
func TestRemoteDependencyReleasedOnce(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx := t.Context()
	dep, err := submit(ctx, nodes[0].api, &tenurev1.SubmitRequest{Queue: "b", RequestId: "dep"})
	if err != nil {
		t.Fatal(err)
	}
	depID := dep.GetTask().GetTaskId()
	depends := func(queue, requestID string) string {
		t.Helper()
		res, err := submit(ctx, nodes[1].api, &tenurev1.SubmitRequest{Queue: queue, RequestId: requestID, DependsOn: []string{depID}})
		if err != nil {
			t.Fatalf("a task of queue %s depending on %s: %v", queue, depID, err)
		}
		if s := res.GetTask().GetState(); s != tenurev1.TaskState_TASK_STATE_BLOCKED {
			t.Fatalf("a task depending on %s is %v, want BLOCKED", depID, s)
		}
		return res.GetTask().GetTaskId()
	}
	first := depends("a", "first")
	dependents := []string{first}
	// In the dependency's own queue, in other partitions of it.
	for i := 0; len(dependents) < 3 && i < 40; i++ {
		if id := depends("b", fmt.Sprint("same-queue-", i)); partitionOf(t, id) != partitionOf(t, depID) {
			dependents = append(dependents, id)
		}
	}
	if len(dependents) < 3 {
		t.Fatalf("no task of queue b placed outside partition %d", partitionOf(t, depID))
	}
	live := func() *testNode {
		for _, a := range owners(t, db) {
			for _, n := range nodes {
				if n.id == a.Owner {
					return n
				}
			}
		}
		t.Fatal("no live node owns a partition")
		return nil
	}
	state := func(id string) tenurev1.TaskState {
		t.Helper()
		got, err := getTask(ctx, live().api, id)
		if err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
		return got.GetState()
	}
	leave := func(id string) {
		t.Helper()
		for i, n := range nodes {
			if n.id == id {
				n.close()
				nodes = append(nodes[:i:i], nodes[i+1:]...)
				waitMoved(t, db, id)
				return
			}
		}
	}

	// The owner of the first dependent's partition leaves before the
	// dependency completes.
	leave(owners(t, db)[partitionOf(t, first)].Owner)
	for _, id := range dependents {
		if s := state(id); s != tenurev1.TaskState_TASK_STATE_BLOCKED {
			t.Fatalf("task %s is %v before its dependency completed", id, s)
		}
	}
	var leased *tenurev1.LeasedTask
	eventually(t, "the dependency leased", func() bool {
		ls, err := lease(ctx, live().api, "b", 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.GetTaskId() != depID {
				t.Fatalf("leased %s, a dependent, before its dependency completed", l.GetTaskId())
			}
			leased = l
		}
		return leased != nil
	})
	if _, err := live().workers.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: depID, LeaseId: leased.GetLeaseId(), Result: []byte("done")})); err != nil {
		t.Fatal(err)
	}
	// Another owner of a dependent's partition leaves at once, while its
	// watcher may be resolving the edge.
	if len(nodes) > 1 {
		leave(owners(t, db)[partitionOf(t, dependents[len(dependents)-1])].Owner)
	}
	eventually(t, "every dependent released", func() bool {
		for _, id := range dependents {
			if state(id) != tenurev1.TaskState_TASK_STATE_WAITING {
				return false
			}
		}
		return true
	})
	for _, id := range dependents {
		h, err := live().tasks.GetTaskHistory(ctx, connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: id}))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range h.Msg.GetEntries() {
			if e.GetType() == "DependencyResolved" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("task %s has %d DependencyResolved records in its history, want 1", id, n)
		}
	}
	ls, err := lease(ctx, live().api, "a", 1, 0)
	if err != nil || len(ls) != 1 || ls[0].GetTaskId() != first {
		t.Fatalf("lease of a: %v (%v), want %s", ls, err, first)
	}
	if ds := ls[0].GetDependencies(); len(ds) != 1 || ds[0].GetTaskId() != depID || string(ds[0].GetResult()) != "done" {
		t.Fatalf("the lease of %s says of its dependencies %v, want %s with its result", first, ds, depID)
	}
}
