package member_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/state"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestWorkflowAcrossThreeNodes: a workflow batch of 30 tasks over three
// queues, each of four partitions spread over three nodes, is written in
// its first task's partition and delivered to the others: every task is
// created exactly once (each leased once, none more), the workflow is
// seen whole through any node once nothing is being delivered, and the
// batch sent again through another node names the same tasks. A delivery
// repeated to a partition of another node (its home's crash before
// TasksDelivered) is answered done and creates nothing; a delivery that
// no node signed is refused. A commit's spawn into another queue is
// created there once.
func TestWorkflowAcrossThreeNodes(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx := t.Context()
	reqs := make([]*tenurev1.SubmitRequest, 30)
	for i := range reqs {
		reqs[i] = &tenurev1.SubmitRequest{Queue: fmt.Sprintf("q%d", i%3+1), RequestId: fmt.Sprintf("t%d", i), Payload: []byte(fmt.Sprint(i))}
	}
	batch := &tenurev1.SubmitBatchRequest{Requests: reqs, WorkflowId: "wf"}
	res, err := nodes[0].tasks.SubmitBatch(ctx, connect.NewRequest(batch))
	if err != nil {
		t.Fatal(err)
	}
	ids := res.Msg.GetTaskIds()
	parts := map[uint64]bool{}
	for _, id := range ids {
		parts[partitionOf(t, id)] = true
	}
	if len(parts) < 6 {
		t.Fatalf("30 tasks over three queues of four partitions landed in %d partitions", len(parts))
	}
	wfs := tenurev1connect.NewWorkflowServiceClient(http.DefaultClient, nodes[2].url)
	eventually(t, "the workflow seen whole, nothing being delivered", func() bool {
		w, err := wfs.GetWorkflow(ctx, connect.NewRequest(&tenurev1.GetWorkflowRequest{WorkflowId: "wf", PageSize: 1}))
		return err == nil && w.Msg.GetWorkflow().GetTotal() == 30 && w.Msg.GetWorkflow().GetDelivering() == 0
	})
	for i, id := range ids {
		got, err := getTask(ctx, nodes[1].api, id)
		if err != nil || string(got.GetPayload()) != fmt.Sprint(i) || got.GetWorkflowId() != "wf" {
			t.Fatalf("task %d (%s) through another node: %v, %v", i, id, got, err)
		}
	}
	again, err := nodes[1].tasks.SubmitBatch(ctx, connect.NewRequest(batch))
	if err != nil || !slices.Equal(again.Msg.GetTaskIds(), ids) || slices.Contains(again.Msg.GetDuplicates(), false) {
		t.Fatalf("the batch sent again through another node: %v, %v; want the same tasks, duplicates", again, err)
	}

	// A repeated delivery, from a node that does not own the partition.
	owner := owners(t, db)[partitionOf(t, ids[1])].Owner
	from := nodes[0]
	if from.id == owner {
		from = nodes[1]
	}
	d := coordinator.Delivered{Workflow: "wf", Tasks: []state.TaskCreated{{TaskID: ids[1], Namespace: "default", Queue: "q2", Payload: []byte("not the first"),
		ExecutionWindow: time.Minute, Retry: state.RetryPolicy{MaxAttempts: 1, Multiplier: 1}, RequestID: "t1", CreatedAt: 1}}}
	if err := from.m.Deliver(ctx, d); err != nil {
		t.Fatalf("a delivery repeated through %s to partition %d of %s: %v", from.id, partitionOf(t, ids[1]), owner, err)
	}
	if got, err := getTask(ctx, nodes[2].api, ids[1]); err != nil || string(got.GetPayload()) != "1" {
		t.Fatalf("the task after a repeated delivery: %v, %v", got, err)
	}
	resp, err := http.Post(nodes[0].url+route.DeliverPath, "application/octet-stream", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unsigned delivery: %s", resp.Status)
	}

	w, err := wfs.WaitWorkflow(ctx, connect.NewRequest(&tenurev1.WaitWorkflowRequest{WorkflowId: "wf"}))
	if err != nil || w.Msg.GetDone() {
		t.Fatalf("wait for the workflow before any task ran: %v, %v; want not done", w, err)
	}

	// Each task leased exactly once, and none other; completed, the
	// workflow is done.
	seen := map[string]int{}
	for q := 1; q <= 3; q++ {
		for {
			ls, err := lease(ctx, nodes[q-1].api, fmt.Sprintf("q%d", q), 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) == 0 {
				break
			}
			for _, l := range ls {
				seen[l.GetTaskId()]++
				if _, err := nodes[q-1].workers.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId()})); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(seen) != len(ids) {
		t.Fatalf("%d tasks leased, want the workflow's %d", len(seen), len(ids))
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("task %s leased %d times", id, seen[id])
		}
	}

	w, err = wfs.WaitWorkflow(ctx, connect.NewRequest(&tenurev1.WaitWorkflowRequest{WorkflowId: "wf", Wait: durationpb.New(5 * time.Second)}))
	if err != nil || !w.Msg.GetDone() || w.Msg.GetWorkflow().GetTasks().GetCompleted() != 30 {
		t.Fatalf("wait for the completed workflow: %v, %v; want done, 30 completed", w, err)
	}

	// A spawn into another queue: created there once.
	if _, err := submit(ctx, nodes[0].api, &tenurev1.SubmitRequest{Queue: "parent", RequestId: "parent"}); err != nil {
		t.Fatal(err)
	}
	ls, err := lease(ctx, nodes[0].api, "parent", 1, time.Second)
	if err != nil || len(ls) != 1 {
		t.Fatalf("lease the parent: %v, %v", ls, err)
	}
	c, err := nodes[0].workers.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: ls[0].GetTaskId(), LeaseId: ls[0].GetLeaseId(),
		Spawn: []*tenurev1.SubmitRequest{{Queue: "child", RequestId: "child", Payload: []byte("c")}}}))
	if err != nil {
		t.Fatal(err)
	}
	child := c.Msg.GetSpawnedTaskIds()[0]
	eventually(t, "the spawned task created in its partition", func() bool {
		got, err := getTask(ctx, nodes[2].api, child)
		return err == nil && got.GetSpawnedBy() == ls[0].GetTaskId()
	})
	if got, err := lease(ctx, nodes[1].api, "child", 10, time.Second); err != nil || len(got) != 1 || got[0].GetTaskId() != child {
		t.Fatalf("the child's queue leases %v, %v; want the child once", got, err)
	}
}

// TestJoinAcrossThreeNodes: a workflow of twelve tasks over three queues
// and a join that depends on all of them, in a queue of its own, placed
// over the partitions of three nodes: the join waits (BLOCKED) until the
// last of them completed, wherever it was delivered, and is then leased
// exactly once, with every dependency's result.
func TestJoinAcrossThreeNodes(t *testing.T) {
	_, nodes := startCluster(t, 3)
	ctx := t.Context()
	var reqs []*tenurev1.SubmitRequest
	var deps []string
	for i := range 12 {
		rid := fmt.Sprintf("c%d", i)
		reqs = append(reqs, &tenurev1.SubmitRequest{Queue: fmt.Sprintf("q%d", i%3+1), RequestId: rid})
		deps = append(deps, rid)
	}
	reqs = append(reqs, &tenurev1.SubmitRequest{Queue: "join", RequestId: "join", DependsOn: deps})
	res, err := nodes[0].tasks.SubmitBatch(ctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: reqs, WorkflowId: "fan"}))
	if err != nil {
		t.Fatal(err)
	}
	join := res.Msg.GetTaskIds()[12]
	done := 0
	for done < 12 {
		for q := 1; q <= 3; q++ {
			ls, err := lease(ctx, nodes[q%3].api, fmt.Sprintf("q%d", q), 100, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				if got, err := lease(ctx, nodes[0].api, "join", 1, 0); err != nil || len(got) != 0 {
					t.Fatalf("the join leased before its dependencies completed: %v, %v", got, err)
				}
				if _, err := nodes[q%3].workers.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId(),
					Result: []byte("r-" + l.GetTaskId())})); err != nil {
					t.Fatal(err)
				}
				done++
			}
		}
	}
	var got []*tenurev1.LeasedTask
	eventually(t, "the join leased", func() bool {
		got, err = lease(ctx, nodes[1].api, "join", 10, 100*time.Millisecond)
		return err == nil && len(got) > 0
	})
	if len(got) != 1 || got[0].GetTaskId() != join || len(got[0].GetDependencies()) != 12 {
		t.Fatalf("the join's lease: %v", got)
	}
	for _, d := range got[0].GetDependencies() {
		if string(d.GetResult()) != "r-"+d.GetTaskId() {
			t.Fatalf("the join's lease says of %s: %q", d.GetTaskId(), d.GetResult())
		}
	}
	if again, err := lease(ctx, nodes[2].api, "join", 10, 500*time.Millisecond); err != nil || len(again) != 0 {
		t.Fatalf("the join leased again: %v, %v", again, err)
	}
}
