package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
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

// keyedSource is the event source of a cluster node in small: one
// partition of one queue, a/q, its records in memory (memLog), whose
// Lookup answers from where, or fails as unavailable while fail is set.
type keyedSource struct {
	feed  *events.Feed
	where map[string]events.Target
	fail  atomic.Bool

	mu    sync.Mutex
	asked [][]string
}

func newKeyedSource(recs []state.Record, where map[string]events.Target) (*keyedSource, error) {
	k := &keyedSource{where: where}
	var l memLog
	for _, r := range recs {
		typ, b, err := record.Encode(nil, r)
		if err != nil {
			return nil, err
		}
		l = append(l, wal.Entry{Type: uint16(typ), Payload: b})
	}
	k.feed = events.NewFeed(events.FeedConfig{Partition: 7, Key: &events.Target{Namespace: "a", Queue: "q"}, Polled: true, Lookup: k.lookup})
	k.feed.Attach(l)
	return k, nil
}

func (k *keyedSource) Feeds(context.Context, string, string) ([]*events.Feed, error) {
	return []*events.Feed{k.feed}, nil
}

func (k *keyedSource) lookup(_ context.Context, ids []string, out []events.Target) error {
	k.mu.Lock()
	k.asked = append(k.asked, append([]string(nil), ids...))
	k.mu.Unlock()
	if k.fail.Load() {
		return fmt.Errorf("%w: partition 7 has no serving owner yet; retry", coordinator.ErrUnavailable)
	}
	for i, id := range ids {
		out[i] = k.where[id]
	}
	return nil
}

// lookups returns what Lookup was asked since the last call.
func (k *keyedSource) lookups() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := fmt.Sprint(k.asked)
	k.asked = nil
	return s
}

// memLog is a log of records in memory, from LSN 1.
type memLog []wal.Entry

func (l memLog) First(context.Context) (uint64, error) { return 1, nil }
func (l memLog) Last(context.Context) (uint64, error)  { return uint64(len(l)), nil }
func (l memLog) Open(_ context.Context, from uint64) (events.Reader, error) {
	return &memReader{l: l, next: from}, nil
}

type memReader struct {
	l    memLog
	next uint64
}

func (r *memReader) Read(_ context.Context, max int, fn func(uint64, wal.Entry) error) (int, error) {
	n := 0
	for ; n < max && r.next <= uint64(len(r.l)); n++ {
		if err := fn(r.next, r.l[r.next-1]); err != nil {
			return n, err
		}
		r.next++
	}
	return n, nil
}

func (r *memReader) Close() error { return nil }

// TestWatchEventsWorkflowOfAPartitionOfOneQueue: over the partition of
// one queue (cluster mode), whose feed learned none of its tasks (they
// were created before the stream started), a workflow filter gives the
// events of the workflow's tasks, completions without spawns included,
// and none of another workflow's or of a lone task: the feed asks its
// Lookup where they are, once per batch, each task once, and only for a
// stream with a workflow filter. A look-up that fails ends the stream as
// unavailable, having sent nothing of the batch: resumed from its cursor,
// the stream gives every event it should.
func TestWatchEventsWorkflowOfAPartitionOfOneQueue(t *testing.T) {
	t.Parallel()
	src, err := newKeyedSource([]state.Record{
		&state.LeaseGranted{TaskID: "t1", LeaseID: "l1", WorkerID: "w", Attempt: 1},
		&state.LeaseGranted{TaskID: "t3", LeaseID: "l3", WorkerID: "w", Attempt: 1},
		&state.LeaseGranted{TaskID: "lone", LeaseID: "l4", WorkerID: "w", Attempt: 1},
		&state.TaskCompleted{TaskID: "t1", LeaseID: "l1"},
		&state.LeaseGranted{TaskID: "t2", LeaseID: "l2", WorkerID: "w", Attempt: 1},
		&state.TaskCompleted{TaskID: "t3", LeaseID: "l3"},
		&state.TaskCompleted{TaskID: "t2", LeaseID: "l2"},
	}, map[string]events.Target{
		"t1": {Namespace: "a", Queue: "q", Workflow: "wf"}, "t2": {Namespace: "a", Queue: "q", Workflow: "wf"},
		"t3": {Namespace: "a", Queue: "q", Workflow: "wf2"}, "lone": {Namespace: "a", Queue: "q"},
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(t.Context(), node.Config{DataDir: t.TempDir(), Sync: wal.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	url, hc := h2cServer(t, server.New(n.Router(), server.Options{Events: src}))
	ec := tenurev1connect.NewEventServiceClient(hc, url, connect.WithGRPC())
	describe := func(evs []*tenurev1.Event) string {
		var out []string
		for _, ev := range evs {
			out = append(out, fmt.Sprintf("%s %s %s/%s", ev.GetType(), ev.GetTaskId(), ev.GetNamespace(), ev.GetQueue()))
		}
		return fmt.Sprint(out)
	}

	// A stream without a workflow filter looks nothing up.
	if got := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: &tenurev1.EventFilter{Namespace: "a"}}).untilCaughtUp(); len(got) != 7 || src.lookups() != "[]" {
		t.Fatalf("a stream of namespace a gave %s, looked up %s; want the 7 events, no look-up", describe(got), src.lookups())
	}

	// The look-up fails: the stream ends, unavailable, with nothing sent.
	src.fail.Store(true)
	filter := &tenurev1.EventFilter{Namespace: "a", WorkflowId: "wf"}
	failed := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: filter})
	start := failed.cursor
	var got []*tenurev1.Event
	for failed.s.Receive() {
		got = append(got, failed.s.Msg().GetEvents()...)
	}
	if len(got) != 0 || connect.CodeOf(failed.s.Err()) != connect.CodeUnavailable {
		t.Fatalf("a stream whose look-up failed gave %s, ended with %v; want nothing, unavailable", describe(got), failed.s.Err())
	}
	if got := src.lookups(); got != "[[t1 t3 lone t2]]" {
		t.Fatalf("looked up %s, want [[t1 t3 lone t2]]: the batch's tasks each once", got)
	}

	// Resumed from its cursor once the look-up answers.
	src.fail.Store(false)
	want := "[LeaseGranted t1 a/q TaskCompleted t1 a/q LeaseGranted t2 a/q TaskCompleted t2 a/q]"
	resumed := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: start, Filter: filter})
	if got := describe(resumed.untilCaughtUp()); got != want {
		t.Fatalf("resumed from %q: %s, want %s", start, got, want)
	}
	if got := src.lookups(); got != "[[t1 t3 lone t2]]" {
		t.Fatalf("looked up %s, want [[t1 t3 lone t2]]", got)
	}
	// While it reads on, the feed keeps what it found: another stream
	// asks nothing.
	if got := describe(mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: filter}).untilCaughtUp()); got != want {
		t.Fatalf("a second stream: %s, want %s", got, want)
	}
	if got := src.lookups(); got != "[]" {
		t.Fatalf("a second stream, while the first reads the feed, looked up %s; want nothing", got)
	}
}
