package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/remoteedges"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// numbered is a partition under another id.
type numbered struct {
	route.Partition
	id uint64
}

func (p numbered) ID() uint64 { return p.id }

// openNumbered opens a node (openUnsnapshotted) and returns it with its one
// partition, numbered id.
func openNumbered(ctx context.Context, t *testing.T, id uint64) (*node.Node, numbered) {
	t.Helper()
	n := openUnsnapshotted(t)
	scope, err := n.Router().Scope(ctx, "", "")
	if err != nil || len(scope) != 1 {
		t.Fatalf("scope: %v %v", scope, err)
	}
	return n, numbered{scope[0], id}
}

// spread scopes every listing to the partitions of two embedded nodes,
// numbered 1 and 2: a namespace of two partitions, as in cluster mode.
type spread struct {
	route.Router
	parts []route.Partition
}

func (r spread) Scope(context.Context, string, string) ([]route.Partition, error) {
	return r.parts, nil
}

func (r spread) Partition(_ context.Context, id uint64) (route.Partition, error) {
	return r.parts[id-1], nil
}

// TestWorkflowAcrossPartitions: a workflow whose tasks are in two
// partitions is one workflow to WorkflowService: its counts added up, its
// tasks paged through one partition after the other, listed once,
// cancelled and retried in both, and done when both parts are.
func TestWorkflowAcrossPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), apiCallTimeout)
	defer cancel()
	var parts []route.Partition
	var cs []*coordinator.Coordinator
	for i := range 2 {
		_, part := openNumbered(ctx, t, uint64(i+1))
		parts = append(parts, part)
		part.Do(ctx, false, func(c *coordinator.Coordinator) error {
			cs = append(cs, c)
			return nil
		}, nil)
	}
	// Three tasks of w in the first partition, two in the second, and x in
	// the second only.
	for i, n := range []int{3, 2} {
		reqs := make([]coordinator.SubmitRequest, n)
		for j := range reqs {
			reqs[j] = coordinator.SubmitRequest{Queue: "q"}
		}
		if _, err := cs[i].SubmitWorkflow(ctx, "w", reqs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs[1].SubmitWorkflow(ctx, "x", []coordinator.SubmitRequest{{Queue: "q"}}); err != nil {
		t.Fatal(err)
	}
	n0 := openUnsnapshotted(t)
	ts := httptest.NewServer(server.New(spread{n0.Router(), parts}, server.Options{}).Handler())
	defer ts.Close()
	wf := tenurev1connect.NewWorkflowServiceClient(ts.Client(), ts.URL)

	var ids []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := wf.GetWorkflow(ctx, connect.NewRequest(&tenurev1.GetWorkflowRequest{WorkflowId: "w", PageSize: 2, PageToken: token}))
		if err != nil || pages > 4 {
			t.Fatalf("page %d: %v", pages, err)
		}
		if w := resp.Msg.GetWorkflow(); w.GetTotal() != 5 || w.GetTasks().GetWaiting() != 5 || w.GetState() != tenurev1.WorkflowState_WORKFLOW_STATE_RUNNING {
			t.Fatalf("the workflow: %v", w)
		}
		for _, task := range resp.Msg.GetTasks() {
			ids = append(ids, task.GetTaskId())
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(ids) != 5 || len(seen) != 5 {
		t.Fatalf("paged through %d tasks (%d different), want the 5 of both partitions: %v", len(ids), len(seen), ids)
	}
	list, err := wf.ListWorkflows(ctx, connect.NewRequest(&tenurev1.ListWorkflowsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ws := list.Msg.GetWorkflows(); len(ws) != 2 || ws[0].GetWorkflowId() != "w" || ws[0].GetTotal() != 5 || ws[1].GetWorkflowId() != "x" {
		t.Fatalf("listed %v", ws)
	}
	page, err := wf.ListWorkflows(ctx, connect.NewRequest(&tenurev1.ListWorkflowsRequest{PageSize: 1}))
	if err != nil || len(page.Msg.GetWorkflows()) != 1 || page.Msg.GetNextPageToken() == "" {
		t.Fatalf("a page of one: %v %v", page, err)
	}
	if page, err = wf.ListWorkflows(ctx, connect.NewRequest(&tenurev1.ListWorkflowsRequest{PageSize: 1, PageToken: page.Msg.GetNextPageToken()})); err != nil ||
		len(page.Msg.GetWorkflows()) != 1 || page.Msg.GetWorkflows()[0].GetWorkflowId() != "x" {
		t.Fatalf("the second page of one: %v %v", page, err)
	}
	c, err := wf.CancelWorkflow(ctx, connect.NewRequest(&tenurev1.CancelWorkflowRequest{WorkflowId: "w", Reason: "test"}))
	if err != nil || c.Msg.GetCancelled() != 5 || c.Msg.GetWorkflow().GetState() != tenurev1.WorkflowState_WORKFLOW_STATE_CANCELLED {
		t.Fatalf("cancel: %v %v", c, err)
	}
	wait, err := wf.WaitWorkflow(ctx, connect.NewRequest(&tenurev1.WaitWorkflowRequest{WorkflowId: "w"}))
	if err != nil || !wait.Msg.GetDone() {
		t.Fatalf("a cancelled workflow is not done: %v %v", wait, err)
	}
	r, err := wf.RetryWorkflow(ctx, connect.NewRequest(&tenurev1.RetryWorkflowRequest{WorkflowId: "w"}))
	if err != nil || r.Msg.GetRetried() != 5 || r.Msg.GetWorkflow().GetTasks().GetWaiting() != 5 {
		t.Fatalf("retry: %v %v", r, err)
	}
	if _, err := wf.GetWorkflow(ctx, connect.NewRequest(&tenurev1.GetWorkflowRequest{WorkflowId: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("no workflow: %v", err)
	}
}

// byQueue routes queue "a" to the first of two partitions and "b" to the
// second, numbered 1 and 2, as a cluster would place two queues, and each
// task to the partition it was created in.
type byQueue struct {
	route.Router
	parts [2]route.Partition
	owner sync.Map // task id → partition index
}

func (r *byQueue) of(queue string) int {
	if queue == "b" {
		return 1
	}
	return 0
}

func (r *byQueue) Place(_ context.Context, _, queue, _ string) (route.Partition, error) {
	return r.parts[r.of(queue)], nil
}

func (r *byQueue) Scope(_ context.Context, _, queue string) ([]route.Partition, error) {
	if queue == "" {
		return r.parts[:], nil
	}
	return []route.Partition{r.parts[r.of(queue)]}, nil
}

func (r *byQueue) Queue(_ context.Context, _, queue string) ([]route.Partition, []route.Peer, error) {
	return []route.Partition{r.parts[r.of(queue)]}, nil, nil
}

func (r *byQueue) Partition(_ context.Context, id uint64) (route.Partition, error) {
	return r.parts[id-1], nil
}

func (r *byQueue) Task(_ context.Context, id string) (route.Partition, error) {
	i, ok := r.owner.Load(id)
	if !ok {
		return nil, &coordinator.FieldError{Field: "task_id", Problem: "not a task id"}
	}
	return r.parts[i.(int)], nil
}

// TestAcrossPartitions: a dependency on a task of another partition is
// served (its edge is remote: the task is BLOCKED until the watcher of its
// partition learns that the dependency completed, and its lease carries
// the dependency's result), in a submit, a batch and a spawn; one on a
// task that does not exist there is refused naming the field; a spawn
// into a queue the committing task's partition does not serve is placed
// in the queue's partition, kept to be delivered there.
func TestAcrossPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), apiCallTimeout)
	defer cancel()
	r := &byQueue{}
	for i := range 2 {
		n, part := openNumbered(ctx, t, uint64(i+1))
		r.Router, r.parts[i] = n.Router(), part
	}
	ts := httptest.NewServer(server.New(r, server.Options{}).Handler())
	defer ts.Close()
	tasks := tenurev1connect.NewTaskServiceClient(ts.Client(), ts.URL)
	workers := tenurev1connect.NewWorkerServiceClient(ts.Client(), ts.URL)
	submit := func(queue string, deps ...string) (string, error) {
		res, err := tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: queue, DependsOn: deps}))
		if err != nil {
			return "", err
		}
		id := res.Msg.GetTask().GetTaskId()
		r.owner.Store(id, r.of(queue))
		return id, nil
	}
	state := func(id string) tenurev1.TaskState {
		t.Helper()
		res, err := tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetTask().GetState()
	}
	lease := func(queue string) *tenurev1.LeasedTask {
		t.Helper()
		l, err := workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: queue}))
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Msg.GetTasks()) == 0 {
			return nil
		}
		return l.Msg.GetTasks()[0]
	}
	inB, err := submit("b")
	if err != nil {
		t.Fatal(err)
	}
	r.owner.Store("missing", 1)
	if _, err := submit("a", "missing"); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "depends_on[0]") || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a dependency on a task of another partition that does not exist: %v, want invalid_argument naming depends_on[0]", err)
	}
	dependent, err := submit("a", inB)
	if err != nil {
		t.Fatalf("a dependency on a task of another partition: %v", err)
	}
	batch, err := tasks.SubmitBatch(ctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{{Queue: "a", DependsOn: []string{inB}}}}))
	if err != nil {
		t.Fatalf("a batch's dependency on a task of another partition: %v", err)
	}
	inBatch := batch.Msg.GetTaskIds()[0]
	r.owner.Store(inBatch, 0)
	for _, id := range []string{dependent, inBatch} {
		if got := state(id); got != tenurev1.TaskState_TASK_STATE_BLOCKED {
			t.Fatalf("task %s depending on a task of another partition is %v, want BLOCKED", id, got)
		}
	}

	// The watcher of partition 1, as a cluster node runs one for each
	// partition it serves.
	coordinatorOf := func() (*coordinator.Coordinator, error) {
		var c *coordinator.Coordinator
		err := r.parts[0].Do(ctx, true, func(x *coordinator.Coordinator) error { c = x; return nil }, nil)
		return c, err
	}
	watch := func() (stop func()) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			remoteedges.Run(ctx, remoteedges.Config{Coordinator: coordinatorOf, Router: r, Poll: 10 * time.Millisecond})
		}()
		return func() { cancel(); <-done }
	}
	stop := watch()
	c, err := coordinatorOf()
	if err != nil {
		t.Fatal(err)
	}
	if deps, err := c.RemoteDependencies(); err != nil || len(deps) != 1 || deps[0] != inB {
		t.Fatalf("partition 1 watches %v (%v), want [%s]", deps, err, inB)
	}
	if l := lease("a"); l != nil {
		t.Fatalf("leased %s before its dependency in another partition completed", l.GetTaskId())
	}
	lb := lease("b")
	if lb == nil || lb.GetTaskId() != inB {
		t.Fatalf("lease of b: %v", lb)
	}
	if _, err := workers.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: inB, LeaseId: lb.GetLeaseId(), Result: []byte("from-b")})); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "both dependents released", func() bool {
		return state(dependent) == tenurev1.TaskState_TASK_STATE_WAITING && state(inBatch) == tenurev1.TaskState_TASK_STATE_WAITING
	})
	if n, err := c.ResolveRemote(ctx, inB, coordinator.RemoteEnd{Outcome: 1, Result: []byte("again")}); err != nil || n != 0 {
		t.Errorf("the completion learned again resolved %d edges (%v), want 0", n, err)
	}
	la := lease("a")
	if la == nil || la.GetTaskId() != dependent {
		t.Fatalf("lease of a: %v, want %s", la, dependent)
	}
	if ds := la.GetDependencies(); len(ds) != 1 || ds[0].GetTaskId() != inB || string(ds[0].GetResult()) != "from-b" ||
		ds[0].GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED {
		t.Fatalf("the lease says of its dependencies %v, want %s COMPLETED with from-b", ds, inB)
	}
	// A spawned task's dependency across partitions is served; a spawn
	// into the other partition's queue is placed there: its id names that
	// partition, and the commit's record keeps it to deliver.
	res, err := workers.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: dependent, LeaseId: la.GetLeaseId(), Spawn: []*tenurev1.SubmitRequest{
		{Queue: "a"}, {Queue: "a", DependsOn: []string{inB}}, {Queue: "b", RequestId: "to-b"}}}))
	if err != nil {
		t.Fatalf("a spawned task's dependency across partitions, and a spawn into the other partition: %v", err)
	}
	if ids := res.Msg.GetSpawnedTaskIds(); len(ids) != 3 || !strings.HasSuffix(ids[2], route.TaskIDSuffix(2)) {
		t.Fatalf("spawned %v, want the third in partition 2", ids)
	}

	// A dependency purged before its end was learned (nobody watched):
	// the edge fails, and the dependent ends DEAD by its policy.
	stop()
	purged, err := submit("b")
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := submit("a", purged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.KillTask(ctx, connect.NewRequest(&tenurev1.KillTaskRequest{TaskId: purged, Reason: "not needed"})); err != nil {
		t.Fatal(err)
	}
	if _, err := tasks.PurgeTasks(ctx, connect.NewRequest(&tenurev1.PurgeTasksRequest{Filter: &tenurev1.TaskFilter{Queue: "b"}})); err != nil {
		t.Fatal(err)
	}
	defer watch()()
	eventually.True(t, "the dependent of a purged task ended", func() bool { return state(orphan) == tenurev1.TaskState_TASK_STATE_DEAD })
	got, err := tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: orphan}))
	if err != nil || got.Msg.GetTask().GetFailureReason() != "dependency_failed: dependency "+purged+" no longer exists" {
		t.Fatalf("the dependent of a purged task: %v, %v", got.Msg.GetTask().GetFailureReason(), err)
	}
}
