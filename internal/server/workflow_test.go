package server_test

// Workflows over the API (docs/design/workflows.md): a batch whose tasks
// depend on each other by request id, BLOCKED until their dependencies
// complete, their results in the dependent's lease, a spawn at commit, and
// what is refused with the field named and nothing created.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestWorkflowOverTheAPI: a workflow's join waits BLOCKED for its two
// dependencies, a commit spawns a task that waits for its parent, and the
// join's lease carries its dependencies' results.
func TestWorkflowOverTheAPI(t *testing.T) {
	e := newAPIEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), apiCallTimeout)
	defer cancel()
	res, err := e.tasks.SubmitBatch(ctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{WorkflowId: "order-7", Requests: []*tenurev1.SubmitRequest{
		{Queue: "notify", Payload: []byte("send"), DependsOn: []string{"resize-1", "resize-2"}},
		{Queue: "resize", RequestId: "resize-1", Payload: []byte("a.jpg")},
		{Queue: "resize", RequestId: "resize-2", Payload: []byte("b.jpg")},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	ids := res.Msg.GetTaskIds()
	join := e.get(t, ids[0])
	if join.GetState() != tenurev1.TaskState_TASK_STATE_BLOCKED || join.GetWorkflowId() != "order-7" ||
		len(join.GetDependencies()) != 2 || join.GetDependencies()[0].GetTaskId() != ids[1] ||
		join.GetDependencies()[0].GetState() != tenurev1.DependencyState_DEPENDENCY_STATE_PENDING {
		t.Fatalf("the join: %v", join)
	}
	// The resizes run; the first spawns a thumbnail task at its commit,
	// which a stale worker's commit of the same task could not.
	if got := e.leaseN(t, "notify", 1); len(got) != 0 {
		t.Fatalf("a BLOCKED task was leased: %v", got)
	}
	rs := e.leaseN(t, "resize", 2)
	if len(rs) != 2 {
		t.Fatalf("leased %d resizes", len(rs))
	}
	c, err := e.worker.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: rs[0].GetTaskId(), LeaseId: rs[0].GetLeaseId(),
		Result: []byte("r0"), Spawn: []*tenurev1.SubmitRequest{{Queue: "thumbs", Payload: []byte("t"), DependsOn: []string{rs[0].GetTaskId()}}}}))
	if err != nil {
		t.Fatal(err)
	}
	spawned := c.Msg.GetSpawnedTaskIds()
	if len(spawned) != 1 {
		t.Fatalf("spawned %v", spawned)
	}
	if th := e.get(t, spawned[0]); th.GetState() != tenurev1.TaskState_TASK_STATE_BLOCKED || th.GetSpawnedBy() != rs[0].GetTaskId() || th.GetWorkflowId() != "order-7" {
		t.Fatalf("the spawned task: %v", th)
	}
	for i, r := range rs {
		if _, err := e.worker.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: r.GetTaskId(), LeaseId: r.GetLeaseId(), Result: []byte{'r', byte('0' + i)}})); err != nil {
			t.Fatal(err)
		}
	}
	n := e.leaseN(t, "notify", 1)
	if len(n) != 1 || n[0].GetWorkflowId() != "order-7" || len(n[0].GetDependencies()) != 2 {
		t.Fatalf("the join's lease: %v", n)
	}
	for i, d := range n[0].GetDependencies() {
		if d.GetTaskId() != ids[i+1] || d.GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED || string(d.GetResult()) != "r"+string(rune('0'+i)) {
			t.Fatalf("dependency %d in the lease: %v", i, d)
		}
	}
	if th := e.get(t, spawned[0]); th.GetState() != tenurev1.TaskState_TASK_STATE_WAITING {
		t.Fatalf("the spawned task after its parent completed: %v", th.GetState())
	}
}

// leaseN leases up to n tasks of queue as worker w, without waiting.
func (e *apiEnv) leaseN(t *testing.T, queue string, n int) []*tenurev1.LeasedTask {
	t.Helper()
	l, err := e.worker.Lease(apiCtx(t), connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: queue, MaxTasks: uint32(n)}))
	if err != nil {
		t.Fatal(err)
	}
	return l.Msg.GetTasks()
}

func TestWorkflowRefusalsOverTheAPI(t *testing.T) {
	e := newAPIEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), apiCallTimeout)
	defer cancel()
	for _, tc := range []struct {
		name, says string
		req        *tenurev1.SubmitBatchRequest
	}{
		{"cycle", "requests[0].depends_on: a cycle", &tenurev1.SubmitBatchRequest{WorkflowId: "w1", Requests: []*tenurev1.SubmitRequest{
			{Queue: "q", RequestId: "a", DependsOn: []string{"b"}}, {Queue: "q", RequestId: "b", DependsOn: []string{"a"}}}}},
		{"unknown", "requests[0].depends_on[0]", &tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{
			{Queue: "q", DependsOn: []string{"no-such-task"}}}}},
		{"policy", "requests[0].on_dependency_failure", &tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{
			{Queue: "q", DependsOn: []string{"x"}, OnDependencyFailure: 9}}}},
		{"workflow id", "workflow_id", &tenurev1.SubmitBatchRequest{WorkflowId: "has space", Requests: []*tenurev1.SubmitRequest{{Queue: "q"}}}},
	} {
		_, err := e.tasks.SubmitBatch(ctx, connect.NewRequest(tc.req))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), tc.says) {
			t.Errorf("%s: %v, want invalid argument naming %s", tc.name, err, tc.says)
		}
	}
	l, err := e.tasks.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{}))
	if err != nil || len(l.Msg.GetTasks()) != 0 {
		t.Fatalf("tasks after the refusals: %v, %v", l.Msg.GetTasks(), err)
	}
}
