package server_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestWatchEventsWorkflow: a stream filtered by a workflow gives exactly
// the events of its tasks — their creation, leases, commits with the
// tasks they spawn into it, completions, and the workflow's cancellation
// — and none of another workflow's or a lone task's in the same queue:
// from the tail as they happen, and from the log after they were written.
func TestWatchEventsWorkflow(t *testing.T) {
	t.Parallel()
	e := newEventsEnv(t, node.Config{}, server.Options{})
	ec := e.events["grpc over h2c"]
	h1 := &http.Client{}
	t.Cleanup(h1.CloseIdleConnections)
	wfs := tenurev1connect.NewWorkflowServiceClient(h1, e.url)
	filter := &tenurev1.EventFilter{Namespace: "a", WorkflowId: "wf1"}
	tail := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "now", Filter: filter})

	batch := func(wf string, reqs ...*tenurev1.SubmitRequest) []string {
		t.Helper()
		r, err := e.tasks.SubmitBatch(apiCtx(t), connect.NewRequest(&tenurev1.SubmitBatchRequest{WorkflowId: wf, Requests: reqs}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.GetTaskIds()
	}
	// wf1: first, then second after it, and one in a queue nobody works;
	// wf2 and a lone task share the queue.
	wf1 := batch("wf1",
		&tenurev1.SubmitRequest{Namespace: "a", Queue: "q", RequestId: "first", Payload: []byte("1")},
		&tenurev1.SubmitRequest{Namespace: "a", Queue: "q", DependsOn: []string{"first"}, Payload: []byte("2")},
		&tenurev1.SubmitRequest{Namespace: "a", Queue: "idle", Payload: []byte("3")})
	wf2 := batch("wf2", &tenurev1.SubmitRequest{Namespace: "a", Queue: "q", Payload: []byte("other")})
	lone := e.submit(t, "a", "q", "lone")

	lease := func(q string, n int) map[string]*tenurev1.LeasedTask {
		t.Helper()
		r, err := e.workers.Lease(apiCtx(t), connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Namespace: "a", Queue: q, MaxTasks: uint32(n)}))
		if err != nil || len(r.Msg.GetTasks()) != n {
			t.Fatalf("lease %d of a/%s: %v %v", n, q, r, err)
		}
		out := map[string]*tenurev1.LeasedTask{}
		for _, lt := range r.Msg.GetTasks() {
			out[lt.GetTaskId()] = lt
		}
		return out
	}
	complete := func(lt *tenurev1.LeasedTask) {
		t.Helper()
		if _, err := e.workers.Complete(apiCtx(t), connect.NewRequest(&tenurev1.CompleteRequest{TaskId: lt.GetTaskId(), LeaseId: lt.GetLeaseId(), Result: []byte("ok")})); err != nil {
			t.Fatal(err)
		}
	}
	got := lease("q", 3) // first, wf2's, lone: second waits for first
	for _, id := range []string{wf1[0], wf2[0], lone} {
		if got[id] == nil {
			t.Fatalf("leased %v, want %s, %s and %s", got, wf1[0], wf2[0], lone)
		}
	}
	// The first commits a spawn, which joins wf1; the lone task spawns
	// one too, which joins none.
	spawn := func(lt *tenurev1.LeasedTask) string {
		t.Helper()
		c, err := e.workers.Commit(apiCtx(t), connect.NewRequest(&tenurev1.CommitRequest{TaskId: lt.GetTaskId(), LeaseId: lt.GetLeaseId(),
			Result: []byte("c"), Spawn: []*tenurev1.SubmitRequest{{Namespace: "a", Queue: "s", Payload: []byte("s")}}}))
		if err != nil || len(c.Msg.GetSpawnedTaskIds()) != 1 {
			t.Fatalf("commit with a spawn: %v %v", c, err)
		}
		return c.Msg.GetSpawnedTaskIds()[0]
	}
	spawned := spawn(got[wf1[0]])
	spawn(got[lone])
	for _, lt := range got {
		complete(lt)
	}
	complete(lease("q", 1)[wf1[1]])
	for _, lt := range lease("s", 2) {
		complete(lt)
	}
	for _, wf := range []string{"wf2", "wf1"} {
		if _, err := wfs.CancelWorkflow(apiCtx(t), connect.NewRequest(&tenurev1.CancelWorkflowRequest{Namespace: "a", WorkflowId: wf, Reason: "done"})); err != nil {
			t.Fatalf("cancel %s: %v", wf, err)
		}
	}

	// What the filter must select, from every event of the namespace.
	all := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: &tenurev1.EventFilter{Namespace: "a"}}).untilCaughtUp()
	mine := map[string]bool{wf1[0]: true, wf1[1]: true, wf1[2]: true, spawned: true}
	var want []string
	for _, ev := range all {
		in := mine[ev.GetTaskId()]
		switch m := ev.GetRecord().(type) {
		case *tenurev1.Event_TasksSubmitted:
			in = m.TasksSubmitted.GetWorkflowId() == "wf1"
		case *tenurev1.Event_WorkflowCancelled:
			in = m.WorkflowCancelled.GetWorkflowId() == "wf1"
		}
		if in {
			want = append(want, describe(ev))
		}
	}
	for _, typ := range []string{"TasksSubmitted", "LeaseGranted", "TaskCommitted", "TaskCompleted", "WorkflowCancelled"} {
		if !slices.ContainsFunc(want, func(s string) bool { return typeOf(s) == typ }) {
			t.Fatalf("the workflow had no %s event: %v", typ, want)
		}
	}
	fromLog := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: filter}).untilCaughtUp()
	if got := describeAll(fromLog); !slices.Equal(got, want) {
		t.Fatalf("from the log, the workflow's stream gave\n%v\nwant\n%v", got, want)
	}
	if got := describeAll(tail.next(len(want))); !slices.Equal(got, want) {
		t.Fatalf("from the tail, the workflow's stream gave\n%v\nwant\n%v", got, want)
	}
	for _, ev := range fromLog {
		if m := ev.GetTaskCommitted(); m != nil && (len(m.GetSpawn()) != 1 || m.GetSpawn()[0].GetTaskId() != spawned) {
			t.Fatalf("the commit of the workflow's task: %v, want its spawn %s", m, spawned)
		}
	}
	// A workflow is named with its namespace.
	if _, err := watch(t, ec, "", &tenurev1.WatchEventsRequest{Filter: &tenurev1.EventFilter{WorkflowId: "wf1"}}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a workflow filter without a namespace: %v, want invalid argument", err)
	}
}

// describe names an event by its position, type and task.
func describe(ev *tenurev1.Event) string {
	return fmt.Sprintf("%d %s %s", ev.GetLsn(), ev.GetType(), ev.GetTaskId())
}

func describeAll(evs []*tenurev1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = describe(ev)
	}
	return out
}

func typeOf(described string) string {
	var lsn int
	var typ string
	_, _ = fmt.Sscanf(described, "%d %s", &lsn, &typ)
	return typ
}
