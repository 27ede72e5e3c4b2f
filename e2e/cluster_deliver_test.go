package e2e

// Creating tasks in other partitions (docs/design/workflows.md, "Cluster
// mode") with real processes: a workflow batch over three queues, and a
// spawn into another partition whose home's owner is killed -9 between
// its record and its TasksDelivered.

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestClusterDeliveries: on three nodes with four partitions per queue,
// a workflow of 30 tasks over three queues is created whole, each task
// once (each leased once, none other). Then a task commits spawning a
// task into another queue's partition served by another node, which is
// frozen (SIGSTOP) while the commit's record is written, so that its
// delivery cannot be answered; the home's owner is killed -9, the frozen
// node thawed. The home partition's new owner replays its log and
// delivers again: the spawned task exists once, leased once, its
// partition's log created it in one record, and the home's log marks it
// delivered once, after the new owner's fence — the dead owner had
// written the record and not its TasksDelivered.
func TestClusterDeliveries(t *testing.T) {
	c, _ := newClTest(t, -1)
	c.extraQueues = 5
	const ns = "dl"
	ctx := t.Context()
	clients := sdkEach(t, c.nodes, client.Options{MaxRetries: 20})

	// A workflow over three queues: every task once.
	reqs := make([]client.SubmitRequest, 30)
	for i := range reqs {
		reqs[i] = client.SubmitRequest{Namespace: ns, Queue: fmt.Sprintf("w%d", i%3), RequestID: fmt.Sprintf("t%d", i), Payload: []byte(fmt.Sprint(i))}
	}
	res, err := clients[0].SubmitBatch(ctx, client.SubmitBatchRequest{WorkflowID: "wf", Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string]bool{}
	for _, r := range res {
		parts[r.TaskID[strings.LastIndexByte(r.TaskID, '-'):]] = true
	}
	c.poll("the workflow whole, nothing being delivered", func() (bool, error) {
		p, err := clients[1].GetWorkflow(ctx, client.GetWorkflowRequest{Namespace: ns, WorkflowID: "wf", PageSize: 1})
		return err == nil && p.Workflow.Total == 30 && p.Workflow.Delivering == 0, err
	})
	seen := map[string]int{}
	for q := range 3 {
		for {
			got, err := tasksOf(clients[q].Lease(ctx, client.LeaseRequest{WorkerID: "w", Namespace: ns, Queue: fmt.Sprintf("w%d", q), MaxTasks: 100}))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				break
			}
			for _, lt := range got {
				seen[lt.ID]++
			}
		}
	}
	for i, r := range res {
		if seen[r.TaskID] != 1 {
			t.Fatalf("task %d of the workflow (%s) leased %d times", i, r.TaskID, seen[r.TaskID])
		}
	}
	if len(seen) != 30 || len(parts) < 6 {
		t.Fatalf("%d tasks leased over three queues, the workflow's in %d partitions", len(seen), len(parts))
	}
	t.Logf("workflow: 30 tasks in %d partitions, each created and leased once", len(parts))

	// The parent, and the queue the spawn goes to.
	if _, err := clients[0].Submit(ctx, client.SubmitRequest{Namespace: ns, Queue: "par", RequestID: "parent"}); err != nil {
		t.Fatal(err)
	}
	if _, err := clients[0].Submit(ctx, client.SubmitRequest{Namespace: ns, Queue: "kid", RequestID: "first"}); err != nil {
		t.Fatal(err)
	}
	first, err := tasksOf(clients[0].Lease(ctx, client.LeaseRequest{WorkerID: "w", Namespace: ns, Queue: "kid", Wait: time.Second}))
	if err != nil || len(first) != 1 {
		t.Fatalf("lease the queue's first task: %v, %v", first, err)
	}
	if err := clients[0].Complete(ctx, client.CompleteRequest{TaskID: first[0].ID, LeaseID: first[0].LeaseID}); err != nil {
		t.Fatal(err)
	}
	held, err := tasksOf(clients[0].Lease(ctx, client.LeaseRequest{WorkerID: "w", Namespace: ns, Queue: "par", Wait: time.Second}))
	if err != nil || len(held) != 1 {
		t.Fatalf("lease the parent: %v, %v", held, err)
	}
	parent := held[0]
	ps, err := c.parts()
	if err != nil {
		t.Fatal(err)
	}
	homeID := partitionIDOf(t, parent.ID)
	home := c.nodes[c.node(ps[homeID].owner)]
	// A request id that the router places in a partition of "kid" that
	// another node serves (Router.Place: by the request id's hash, among
	// the queue's partitions in order).
	var rid string
	var kidID uint64
	for i := 0; rid == ""; i++ {
		r := fmt.Sprintf("kid-%d", i)
		h := fnv.New64a()
		h.Write([]byte(ns + "\x00" + r))
		no := h.Sum64() % clPartitions
		for id, p := range ps {
			if p.key == fmt.Sprintf("%s/kid/%d", ns, no) && p.owner != home.id {
				rid, kidID = r, id
			}
		}
	}
	target := c.nodes[c.node(ps[kidID].owner)]
	child := coordinator.DeliveredTaskID(ns, rid, route.TaskIDSuffix(kidID))
	t.Logf("parent %s in partition %d of %s; the child %s goes to partition %d of %s", parent.ID, homeID, home.id, child, kidID, target.id)

	if err := target.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := target.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer thaw()
	if _, err := sdk(t, home.url()).Commit(ctx, client.CommitRequest{TaskID: parent.ID, LeaseID: parent.LeaseID,
		Spawn: []client.SubmitRequest{{Namespace: ns, Queue: "kid", RequestID: rid, Payload: []byte("child")}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the home sends its delivery to the frozen node (not an assertion)
	home.proc.kill9(t)
	thaw()

	// The home partition's new owner delivers.
	c.poll("the spawned task created in its partition", func() (bool, error) {
		for i, n := range c.nodes {
			if n == home {
				continue
			}
			got, err := clients[i].GetTask(ctx, client.GetTaskRequest{TaskID: child})
			if err != nil {
				return false, nil
			}
			return got.SpawnedBy == parent.ID && string(got.Payload) == "child", nil
		}
		return false, nil
	})
	live := clients[(c.node(home.id)+1)%len(c.nodes)]
	kids, err := tasksOf(live.Lease(ctx, client.LeaseRequest{WorkerID: "w", Namespace: ns, Queue: "kid", MaxTasks: 10, Wait: time.Second}))
	if err != nil || len(kids) != 1 || kids[0].ID != child {
		t.Fatalf("the child's queue leases %v, %v; want the child once", kids, err)
	}
	created := 0
	for _, r := range c.partitionLog(kidID) {
		if r.typ == "TasksSubmitted" {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("partition %d's log created the child in %d records, want 1", kidID, created)
	}
	var fence, delivered []uint64
	var spawned uint64
	c.poll("the home's new owner marks the delivery", func() (bool, error) {
		fence, delivered, spawned = nil, nil, 0
		for _, r := range c.partitionLog(homeID) {
			switch {
			case r.typ == "Fence":
				fence = append(fence, r.lsn)
			case r.typ == "TasksDelivered":
				delivered = append(delivered, r.lsn)
			case r.task == parent.ID && (r.typ == "TaskCommitted" || r.typ == "TaskCompleted"):
				spawned = max(spawned, r.lsn)
			}
		}
		return len(delivered) > 0, nil
	})
	if len(delivered) != 1 || spawned == 0 || delivered[0] < fence[len(fence)-1] || fence[len(fence)-1] < spawned {
		t.Fatalf("the home's log: the spawn at lsn %d, fences at %v, TasksDelivered at %v; want one TasksDelivered, after the new owner's fence, after the spawn",
			spawned, fence, delivered)
	}
	ctx2, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
	defer cancel()
	if p, err := live.GetWorkflow(ctx2, client.GetWorkflowRequest{Namespace: ns, WorkflowID: "wf", PageSize: 1}); err != nil || p.Workflow.Total != 30 {
		t.Fatalf("the workflow after the kill: %+v, %v", p, err)
	}
}

// partitionIDOf is the partition a cluster task id names.
func partitionIDOf(t *testing.T, taskID string) uint64 {
	t.Helper()
	var id uint64
	if _, err := fmt.Sscanf(taskID[strings.LastIndex(taskID, "-p"):], "-p%d", &id); err != nil {
		t.Fatalf("task id %q carries no partition: %v", taskID, err)
	}
	return id
}
