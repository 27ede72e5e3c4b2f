package server_test

import (
	"context"
	"net/http/httptest"
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
