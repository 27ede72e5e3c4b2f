package server_test

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestWatchEventsOfWorkflows: a workflow submitted in one record is one
// TasksSubmitted event, which a stream of one of its queues sees with that
// queue's tasks only; a task spawned at a completion is seen by the stream
// of its queue, in the TaskCompleted event, without the parent's result.
func TestWatchEventsOfWorkflows(t *testing.T) {
	t.Parallel()
	e := newEventsEnv(t, node.Config{}, server.Options{})
	_, err := e.tasks.SubmitBatch(apiCtx(t), connect.NewRequest(&tenurev1.SubmitBatchRequest{WorkflowId: "wf", Requests: []*tenurev1.SubmitRequest{
		{Namespace: "a", Queue: "q1", Payload: []byte("first"), RequestId: "r1"},
		{Namespace: "a", Queue: "q2", Payload: []byte("second"), RequestId: "r2", DependsOn: []string{"r1"}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.workers.Lease(apiCtx(t), connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Namespace: "a", Queue: "q1", MaxTasks: 1, Wait: durationpb.New(0)}))
	if err != nil || len(resp.Msg.GetTasks()) != 1 {
		t.Fatalf("lease: %v %v", resp, err)
	}
	lt := resp.Msg.GetTasks()[0]
	if _, err := e.workers.Complete(apiCtx(t), connect.NewRequest(&tenurev1.CompleteRequest{TaskId: lt.GetTaskId(), LeaseId: lt.GetLeaseId(), Result: []byte("secret"),
		Spawn: []*tenurev1.SubmitRequest{{Namespace: "a", Queue: "q3", Payload: []byte("child")}}})); err != nil {
		t.Fatal(err)
	}
	ec := e.events["grpc over h2c"]
	describe := func(f *tenurev1.EventFilter) string {
		var out []string
		for _, ev := range mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: f}).untilCaughtUp() {
			d := fmt.Sprintf("%s %s/%s task=%q", ev.GetType(), ev.GetNamespace(), ev.GetQueue(), ev.GetTaskId())
			for _, c := range append(ev.GetTasksSubmitted().GetTasks(), ev.GetTaskCompleted().GetSpawn()...) {
				d += fmt.Sprintf(" +%s/%s:%s", c.GetNamespace(), c.GetQueue(), c.GetPayload())
			}
			if r := ev.GetTaskCompleted().GetResult(); r != nil {
				d += " result=" + string(r)
			}
			out = append(out, d)
		}
		return fmt.Sprint(out)
	}
	if got, want := describe(&tenurev1.EventFilter{Namespace: "a", Queue: "q2"}), `[TasksSubmitted a/q2 task="" +a/q2:second]`; got != want {
		t.Errorf("queue q2:\n got %s\nwant %s", got, want)
	}
	if got, want := describe(&tenurev1.EventFilter{Namespace: "a", Queue: "q3"}), `[TaskCompleted a/q3 task="" +a/q3:child]`; got != want {
		t.Errorf("queue q3:\n got %s\nwant %s", got, want)
	}
	q1 := fmt.Sprintf(`[TasksSubmitted a/q1 task="" +a/q1:first LeaseGranted a/q1 task=%q TaskCompleted a/q1 task=%q result=secret]`, lt.GetTaskId(), lt.GetTaskId())
	if got := describe(&tenurev1.EventFilter{Namespace: "a", Queue: "q1"}); got != q1 {
		t.Errorf("queue q1:\n got %s\nwant %s", got, q1)
	}
	all := fmt.Sprintf(`[TasksSubmitted a/ task="" +a/q1:first +a/q2:second LeaseGranted a/q1 task=%q TaskCompleted a/q1 task=%q +a/q3:child result=secret]`, lt.GetTaskId(), lt.GetTaskId())
	if got := describe(nil); got != all {
		t.Errorf("everything:\n got %s\nwant %s", got, all)
	}
}

// TestWatchEventsPlaceTasksAfterARestart: a stream that starts after a
// task's creation, on a node that just opened (its feed has learned
// nothing), still names the task's namespace and queue in its later
// events, from the coordinator's state.
func TestWatchEventsPlaceTasksAfterARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir}
	n, err := node.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &eventsEnv{n: n}
	url, hc := h2cServer(t, server.New(n.Router(), server.Options{}))
	e.tasks, e.workers = tenurev1connect.NewTaskServiceClient(hc, url), tenurev1connect.NewWorkerServiceClient(hc, url)
	id := e.submit(t, "a", "q", "x")
	e.work(t, "a", "q")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2, err := node.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	url2, hc2 := h2cServer(t, server.New(n2.Router(), server.Options{Events: n2}))
	ec := tenurev1connect.NewEventServiceClient(hc2, url2, connect.WithGRPC())
	after := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: events.Cursor{{Partition: 0, LSN: 1}}.String(), Filter: &tenurev1.EventFilter{Namespace: "a", Queue: "q"}}).untilCaughtUp()
	if got := fmt.Sprint(types(after)); got != "[LeaseGranted TaskCompleted]" {
		t.Fatalf("events after the creation: %s", got)
	}
	for _, ev := range after {
		if ev.GetTaskId() != id || ev.GetNamespace() != "a" || ev.GetQueue() != "q" {
			t.Fatalf("%v", ev)
		}
	}
}
