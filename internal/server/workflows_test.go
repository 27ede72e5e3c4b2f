package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
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
		n, err := node.Open(ctx, node.Config{DataDir: t.TempDir(), Snapshots: host.Schedule{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		scope, err := n.Router().Scope(ctx, "", "")
		if err != nil || len(scope) != 1 {
			t.Fatalf("scope: %v %v", scope, err)
		}
		parts = append(parts, numbered{scope[0], uint64(i + 1)})
		scope[0].Do(ctx, false, func(c *coordinator.Coordinator) error {
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
	n0, _ := node.Open(ctx, node.Config{DataDir: t.TempDir(), Snapshots: host.Schedule{Disabled: true}})
	t.Cleanup(func() { n0.Close() })
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

// TestAcrossPartitionsRefused: until dependencies and spawns cross the
// partitions of a cluster, a dependency on a task of another partition, a
// spawn into a queue the committing task's partition does not serve and a
// spawned task's dependency across are refused, naming the field; within
// one partition they are served.
func TestAcrossPartitionsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), apiCallTimeout)
	defer cancel()
	r := &byQueue{}
	for i := range 2 {
		n, err := node.Open(ctx, node.Config{DataDir: t.TempDir(), Snapshots: host.Schedule{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		scope, err := n.Router().Scope(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		r.Router, r.parts[i] = n.Router(), numbered{scope[0], uint64(i + 1)}
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
	refused := func(what, field string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "cluster mode") {
			t.Errorf("%s: %v, want invalid_argument naming %s", what, err, field)
		}
	}
	inB, err := submit("b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = submit("a", inB)
	refused("a dependency on a task of another partition", "depends_on[0]", err)
	_, err = tasks.SubmitBatch(ctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{{Queue: "a", DependsOn: []string{inB}}}}))
	refused("a batch's dependency on a task of another partition", "requests[0].depends_on[0]", err)
	inA, err := submit("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := submit("a", inA); err != nil {
		t.Fatalf("a dependency within the partition: %v", err)
	}
	l, err := workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: "a"}))
	if err != nil || len(l.Msg.GetTasks()) != 1 || l.Msg.GetTasks()[0].GetTaskId() != inA {
		t.Fatalf("lease: %v %v", l, err)
	}
	lease := l.Msg.GetTasks()[0].GetLeaseId()
	commit := func(spawn ...*tenurev1.SubmitRequest) error {
		_, err := workers.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: inA, LeaseId: lease, Spawn: spawn}))
		return err
	}
	refused("a spawn into another partition's queue", "spawn[0].queue", commit(&tenurev1.SubmitRequest{Queue: "b"}))
	refused("a spawned task's dependency across", "spawn[1].depends_on[0]", commit(&tenurev1.SubmitRequest{Queue: "a"}, &tenurev1.SubmitRequest{Queue: "a", DependsOn: []string{inB}}))
	if err := commit(&tenurev1.SubmitRequest{Queue: "a", DependsOn: []string{inA}}); err != nil {
		t.Fatalf("a spawn within the partition: %v", err)
	}
}
