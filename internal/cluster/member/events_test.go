package member_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestEventsMergeEveryPartition: a stream through one node reads every
// partition of the cluster, whoever owns it, each in LSN order with none
// missing, and goes on where it was when a partition's owner leaves and
// the partition moves; a stream from its cursor resumes after it.
func TestEventsMergeEveryPartition(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	submitMany(t, ctx, nodes[1].api, 0, 40)
	spread(t, db, 3)
	ec := tenurev1connect.NewEventServiceClient(http.DefaultClient, nodes[2].url, connect.WithProtoJSON())
	s, err := ec.WatchEvents(ctx, connect.NewRequest(&tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: &tenurev1.EventFilter{Namespace: "default", Queue: "q"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next := map[uint64]uint64{} // partition → the next lsn expected
	created := map[string]bool{}
	var cursor string
	receive := func(want int, what string) {
		for len(created) < want {
			if !s.Receive() {
				t.Fatalf("%s: the stream ended after %d tasks: %v", what, len(created), s.Err())
			}
			for _, ev := range s.Msg().GetEvents() {
				if n := max(next[ev.GetPartition()], 1); ev.GetLsn() != n {
					t.Fatalf("%s: partition %d gave lsn %d (%s), want %d", what, ev.GetPartition(), ev.GetLsn(), ev.GetType(), n)
				}
				next[ev.GetPartition()] = ev.GetLsn() + 1
				if ev.GetType() == "TaskCreated" {
					if ev.GetNamespace() != "default" || ev.GetQueue() != "q" || created[string(ev.GetTaskCreated().GetPayload())] {
						t.Fatalf("%s: %v", what, ev)
					}
					created[string(ev.GetTaskCreated().GetPayload())] = true
				}
				cursor = ev.GetCursor()
			}
		}
	}
	receive(40, "before")
	if len(next) != 4 {
		t.Fatalf("the stream read %d partitions, want the queue's 4", len(next))
	}
	// n1 leaves; its partitions move, fenced, to the others.
	nodes[0].close()
	waitMoved(t, db, "n1")
	submitMany(t, ctx, nodes[1].api, 40, 40)
	receive(80, "after n1 left")

	// From the cursor of the last event: nothing of before.
	c, err := events.ParseCursor(cursor)
	if err != nil || len(c) != 4 {
		t.Fatalf("cursor %q: %v, %v", cursor, c.Describe(), err)
	}
	again, err := ec.WatchEvents(ctx, connect.NewRequest(&tenurev1.WatchEventsRequest{Cursor: cursor, Filter: &tenurev1.EventFilter{Namespace: "default", Queue: "q"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	submitMany(t, ctx, nodes[1].api, 80, 1)
	for again.Receive() {
		for _, ev := range again.Msg().GetEvents() {
			if ev.GetLsn() < c.Of(ev.GetPartition())+1 {
				t.Fatalf("a stream from %v gave lsn %d of partition %d", c.Describe(), ev.GetLsn(), ev.GetPartition())
			}
			if ev.GetType() == "TaskCreated" {
				if string(ev.GetTaskCreated().GetPayload()) != "80" {
					t.Fatalf("a stream from the cursor gave %v", ev)
				}
				return
			}
		}
	}
	t.Fatalf("the stream from the cursor ended: %v", again.Err())
}

// TestEventsWorkflowFilter: streams filtered by a workflow, opened after
// its tasks were created — one from now, one later from a cursor taken
// after the creation, through two nodes that each serve some of the
// workflow's partitions and not others — give every later event of each
// of its tasks (their leases and completions, a completion's spawn into
// the workflow and the spawned task's events), each once, and nothing of
// another workflow, of a lone task in the same partitions, or of the
// workflow of the same id in another namespace: each node asks its own
// partitions' coordinators, and the other nodes, for the workflow of the
// tasks whose creation its streams did not read.
func TestEventsWorkflowFilter(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	batch := func(namespace, wf string, reqs ...*tenurev1.SubmitRequest) []string {
		t.Helper()
		res, err := nodes[0].tasks.SubmitBatch(ctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: reqs, WorkflowId: wf}))
		if err != nil {
			t.Fatalf("submit workflow %s/%s: %v", namespace, wf, err)
		}
		wfs := tenurev1connect.NewWorkflowServiceClient(http.DefaultClient, nodes[1].url)
		eventually(t, "workflow "+namespace+"/"+wf+" delivered whole", func() bool {
			w, err := wfs.GetWorkflow(ctx, connect.NewRequest(&tenurev1.GetWorkflowRequest{Namespace: namespace, WorkflowId: wf, PageSize: 1}))
			return err == nil && w.Msg.GetWorkflow().GetTotal() == uint64(len(reqs)) && w.Msg.GetWorkflow().GetDelivering() == 0
		})
		return res.Msg.GetTaskIds()
	}
	tasks := func(namespace, prefix string, queues, n int) []*tenurev1.SubmitRequest {
		reqs := make([]*tenurev1.SubmitRequest, n)
		for i := range reqs {
			reqs[i] = &tenurev1.SubmitRequest{Namespace: namespace, Queue: fmt.Sprintf("q%d", i%queues+1), RequestId: fmt.Sprint(prefix, i), Payload: []byte(fmt.Sprint(prefix, i))}
		}
		return reqs
	}
	// The workflow, another one and lone tasks in the same queues; the
	// workflow of the same id in namespace ns2; one in a queue of its own.
	wf := batch("default", "wf", tasks("default", "w", 3, 24)...)
	other := batch("default", "other", tasks("default", "o", 3, 6)...)
	var lone []string
	for _, r := range tasks("default", "l", 3, 6) {
		res, err := submit(ctx, nodes[1].api, r)
		if err != nil {
			t.Fatal(err)
		}
		lone = append(lone, res.GetTask().GetTaskId())
	}
	batch("ns2", "wf", tasks("ns2", "n", 1, 6)...)
	early := tasks("default", "e", 1, 4)
	for _, r := range early {
		r.Queue = "early"
	}
	batch("default", "early", early...)

	// Two nodes that each serve some of the workflow's partitions, and
	// not others.
	own := owners(t, db)
	a := own[partitionOf(t, wf[0])].Owner
	var b string
	for _, id := range wf {
		if o := own[partitionOf(t, id)].Owner; o != a {
			b = o
			break
		}
	}
	if b == "" {
		t.Fatalf("every partition of the workflow is %s's: the test needs two owners", a)
	}
	nodeOf := func(id string) *testNode {
		for _, n := range nodes {
			if n.id == id {
				return n
			}
		}
		t.Fatalf("no node %s", id)
		return nil
	}
	filter := &tenurev1.EventFilter{Namespace: "default", WorkflowId: "wf"}
	watch := func(n *testNode, cursor string, f *tenurev1.EventFilter) (*connect.ServerStreamForClient[tenurev1.WatchEventsResponse], string) {
		t.Helper()
		ec := tenurev1connect.NewEventServiceClient(http.DefaultClient, n.url, connect.WithProtoJSON())
		s, err := ec.WatchEvents(ctx, connect.NewRequest(&tenurev1.WatchEventsRequest{Cursor: cursor, Filter: f}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		// Its first answer, the cursor it starts from, says it is open.
		if !s.Receive() {
			t.Fatalf("a stream through %s from %q: %v", n.id, cursor, s.Err())
		}
		return s, s.Msg().GetCursor()
	}
	fromNow, _ := watch(nodeOf(a), "now", filter)
	plain, after := watch(nodeOf(b), "now", &tenurev1.EventFilter{Namespace: "default"})
	plain.Close()

	var child string // the task a completion spawned
	leaseAll := func(n *testNode, namespace, queue string, complete func(*tenurev1.LeasedTask) *tenurev1.CompleteRequest) {
		t.Helper()
		for {
			res, err := n.workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Namespace: namespace, Queue: queue, MaxTasks: 100, Wait: durationpb.New(0)}))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Msg.GetTasks()) == 0 {
				return
			}
			for _, l := range res.Msg.GetTasks() {
				req := &tenurev1.CompleteRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId()}
				if complete != nil {
					req = complete(l)
				}
				res, err := n.workers.Complete(ctx, connect.NewRequest(req))
				if err != nil {
					t.Fatalf("complete %s: %v", l.GetTaskId(), err)
				}
				if ids := res.Msg.GetSpawnedTaskIds(); len(ids) > 0 {
					child = ids[0]
				}
			}
		}
	}
	// Before the second workflow stream opens, from the cursor taken
	// above: another namespace's workflow of the same id, and another
	// workflow, worked.
	leaseAll(nodes[0], "ns2", "q1", nil)
	leaseAll(nodes[1], "default", "early", nil)
	fromCursor, _ := watch(nodeOf(b), after, filter)

	// Every task of the queues worked, mixed; the workflow's first task
	// spawns a task into it, worked too once it is created.
	for q := 1; q <= 3; q++ {
		leaseAll(nodes[q-1], "default", fmt.Sprintf("q%d", q), func(l *tenurev1.LeasedTask) *tenurev1.CompleteRequest {
			req := &tenurev1.CompleteRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId()}
			if l.GetTaskId() == wf[0] {
				req.Spawn = []*tenurev1.SubmitRequest{{Queue: "q2", RequestId: "child", Payload: []byte("child")}}
			}
			return req
		})
	}
	if child == "" {
		t.Fatalf("the completion of %s spawned nothing", wf[0])
	}
	eventually(t, "the spawned task completed", func() bool {
		if tk, err := getTask(ctx, nodes[1].api, child); err == nil && tk.GetState() == tenurev1.TaskState_TASK_STATE_COMPLETED {
			return true
		}
		leaseAll(nodes[1], "default", "q2", nil)
		return false
	})

	// Only a node may ask where tasks are.
	resp, err := http.Post(nodes[0].url+route.WherePath, "application/json", strings.NewReader(`{"task_ids":["`+wf[1]+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unsigned look-up: %s, want 401", resp.Status)
	}

	outside := map[string]string{}
	for _, id := range other {
		outside[id] = "of workflow other"
	}
	for _, id := range lone {
		outside[id] = "a lone task"
	}
	for name, s := range map[string]*connect.ServerStreamForClient[tenurev1.WatchEventsResponse]{"from now": fromNow, "from a cursor after the creation": fromCursor} {
		want := map[string]bool{}
		for _, id := range append(wf, child) {
			want[id+" LeaseGranted"], want[id+" TaskCompleted"] = true, true
		}
		seen := map[string]bool{}
		for len(want) > 0 {
			if !s.Receive() {
				t.Fatalf("the stream %s ended with %d events missing (%v): %v", name, len(want), want, s.Err())
			}
			for _, ev := range s.Msg().GetEvents() {
				at := fmt.Sprint(ev.GetPartition(), "/", ev.GetLsn())
				if seen[at] {
					t.Fatalf("the stream %s gave %s twice", name, at)
				}
				seen[at] = true
				if ev.GetNamespace() != "default" {
					t.Fatalf("the stream %s gave an event of namespace %q: %v", name, ev.GetNamespace(), ev)
				}
				id := ev.GetTaskId()
				if why, ok := outside[id]; ok {
					t.Fatalf("the stream %s gave an event of %s (%s): %v", name, id, why, ev)
				}
				if sub := ev.GetTasksSubmitted(); sub != nil {
					// The spawn, delivered to another partition.
					if sub.GetWorkflowId() != "wf" || len(sub.GetTasks()) != 1 || sub.GetTasks()[0].GetTaskId() != child {
						t.Fatalf("the stream %s gave %v", name, ev)
					}
					continue
				}
				if !want[id+" "+ev.GetType()] {
					t.Fatalf("the stream %s gave %s of %s, not an event it waits for", name, ev.GetType(), id)
				}
				delete(want, id+" "+ev.GetType())
			}
		}
	}
}
