package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/wal"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// eventsEnv is a node serving events, with clients of every protocol.
type eventsEnv struct {
	n       *node.Node
	url     string
	tasks   tenurev1connect.TaskServiceClient
	workers tenurev1connect.WorkerServiceClient
	admin   tenurev1connect.AdminServiceClient
	// events by protocol: connect (JSON, HTTP/1.1) and grpc (h2c).
	events map[string]tenurev1connect.EventServiceClient
}

func newEventsEnv(t *testing.T, cfg node.Config, opts server.Options) *eventsEnv {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.Sync = wal.SyncNone
	n, err := node.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	opts.Snapshots, opts.Events = n, n
	url, h2c := h2cServer(t, server.New(n.Router(), opts))
	h1 := &http.Client{}
	t.Cleanup(h1.CloseIdleConnections)
	return &eventsEnv{
		n: n, url: url,
		tasks:   tenurev1connect.NewTaskServiceClient(h2c, url),
		workers: tenurev1connect.NewWorkerServiceClient(h2c, url),
		admin:   tenurev1connect.NewAdminServiceClient(h2c, url),
		events: map[string]tenurev1connect.EventServiceClient{
			"connect+json over HTTP/1.1": tenurev1connect.NewEventServiceClient(h1, url, connect.WithProtoJSON()),
			"grpc over h2c":              tenurev1connect.NewEventServiceClient(h2c, url, connect.WithGRPC()),
		},
	}
}

func (e *eventsEnv) submit(t *testing.T, ns, q string, payload string) string {
	t.Helper()
	resp, err := e.tasks.Submit(apiCtx(t), connect.NewRequest(&tenurev1.SubmitRequest{Namespace: ns, Queue: q, Payload: []byte(payload)}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg.GetTask().GetTaskId()
}

// work leases one task of ns/q and completes it.
func (e *eventsEnv) work(t *testing.T, ns, q string) string {
	t.Helper()
	resp, err := e.workers.Lease(apiCtx(t), connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Namespace: ns, Queue: q, MaxTasks: 1, Wait: durationpb.New(0)}))
	if err != nil || len(resp.Msg.GetTasks()) != 1 {
		t.Fatalf("lease %s/%s: %v %v", ns, q, resp, err)
	}
	lt := resp.Msg.GetTasks()[0]
	if _, err := e.workers.Complete(apiCtx(t), connect.NewRequest(&tenurev1.CompleteRequest{TaskId: lt.GetTaskId(), LeaseId: lt.GetLeaseId(), Result: []byte("done")})); err != nil {
		t.Fatal(err)
	}
	return lt.GetTaskId()
}

// watcher is an open stream.
type watcher struct {
	t      *testing.T
	s      *connect.ServerStreamForClient[tenurev1.WatchEventsResponse]
	cancel context.CancelFunc
	cursor string // after the last answer
}

func watch(t *testing.T, ec tenurev1connect.EventServiceClient, token string, req *tenurev1.WatchEventsRequest) (*watcher, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	r := connect.NewRequest(req)
	if token != "" {
		r.Header().Set("Authorization", "Bearer "+token)
	}
	s, err := ec.WatchEvents(ctx, r)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &watcher{t: t, s: s, cancel: cancel}
	t.Cleanup(w.close)
	// The first answer: the cursor the stream starts from, or its refusal.
	if !s.Receive() {
		w.close()
		return nil, s.Err()
	}
	if len(s.Msg().GetEvents()) != 0 || s.Msg().GetCursor() == "" {
		t.Fatalf("the first answer of a stream is %v, want a cursor and no event", s.Msg())
	}
	w.cursor = s.Msg().GetCursor()
	return w, nil
}

func mustWatch(t *testing.T, ec tenurev1connect.EventServiceClient, token string, req *tenurev1.WatchEventsRequest) *watcher {
	t.Helper()
	w, err := watch(t, ec, token, req)
	if err != nil {
		t.Fatalf("WatchEvents(%v): %v", req, err)
	}
	return w
}

func (w *watcher) close() {
	w.cancel()
	w.s.Close()
}

// untilCaughtUp returns the events up to the first answer that says the
// stream caught up.
func (w *watcher) untilCaughtUp() []*tenurev1.Event {
	w.t.Helper()
	var out []*tenurev1.Event
	for w.s.Receive() {
		m := w.s.Msg()
		out = append(out, m.GetEvents()...)
		w.cursor = m.GetCursor()
		if len(m.GetEvents()) > 0 && m.GetCursor() != m.GetEvents()[len(m.GetEvents())-1].GetCursor() {
			// Records the filter skipped after the last event may move it.
			last, _ := events.ParseCursor(m.GetEvents()[len(m.GetEvents())-1].GetCursor())
			after, _ := events.ParseCursor(m.GetCursor())
			if after.Of(0) < last.Of(0) {
				w.t.Fatalf("an answer's cursor %v is before its last event's %v", after.Describe(), last.Describe())
			}
		}
		if m.GetCaughtUp() {
			return out
		}
	}
	w.t.Fatalf("the stream ended before it caught up: %v", w.s.Err())
	return nil
}

// next returns the next n events, however many answers they take.
func (w *watcher) next(n int) []*tenurev1.Event {
	w.t.Helper()
	var out []*tenurev1.Event
	for len(out) < n && w.s.Receive() {
		out = append(out, w.s.Msg().GetEvents()...)
	}
	if len(out) < n {
		w.t.Fatalf("the stream ended after %d of %d events: %v", len(out), n, w.s.Err())
	}
	return out
}

func types(evs []*tenurev1.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.GetType()
	}
	return out
}

// checkDense checks that evs are records from through to, one each, in
// order, each with the cursor at itself.
func checkDense(t *testing.T, evs []*tenurev1.Event, from, to uint64) {
	t.Helper()
	if uint64(len(evs)) != to-from+1 {
		t.Fatalf("%d events, want lsn %d..%d: %v", len(evs), from, to, types(evs))
	}
	for i, e := range evs {
		c, err := events.ParseCursor(e.GetCursor())
		if want := from + uint64(i); e.GetLsn() != want || err != nil || c.Of(0) != want || e.GetAt() == nil {
			t.Fatalf("event %d: lsn %d, cursor %v (%v), at %v; want lsn %d", i, e.GetLsn(), c.Describe(), err, e.GetAt(), want)
		}
	}
}

// TestWatchEvents: over Connect JSON on HTTP/1.1 and over gRPC, a stream
// from the oldest record gives every record once, in order, with its
// fields; a stream from any event's cursor resumes exactly after it; a
// stream from now gives what comes next, as it comes.
func TestWatchEvents(t *testing.T) {
	t.Parallel()
	e := newEventsEnv(t, node.Config{}, server.Options{})
	a1 := e.submit(t, "a", "q1", "first")
	e.submit(t, "a", "q2", "second")
	e.submit(t, "b", "q1", "third")
	done := e.work(t, "a", "q1")
	if done != a1 {
		t.Fatalf("leased %s, want %s", done, a1)
	}
	last := e.n.Coordinator().Stats().LastLSN
	for proto, ec := range e.events {
		t.Run(proto, func(t *testing.T) { checkWatchFromEveryCursor(t, ec, a1, last) })
	}

	// From now: nothing of before, then what comes, as it comes.
	for proto, ec := range e.events {
		live := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{})
		if c, _ := events.ParseCursor(live.cursor); c.Of(0) < last {
			t.Fatalf("%s: a stream from now starts at %v, before lsn %d", proto, c.Describe(), last)
		}
		id := e.submit(t, "b", "q9", "live "+proto)
		got := live.next(1)
		if got[0].GetType() != "TaskCreated" || got[0].GetTaskId() != id || string(got[0].GetTaskCreated().GetPayload()) != "live "+proto {
			t.Fatalf("%s: live event %v", proto, got[0])
		}
		live.close()
	}
}

// checkWatchFromEveryCursor checks a stream from the oldest record of the
// log TestWatchEvents wrote (a1's life and two other submits), and a stream
// from each event's cursor.
func checkWatchFromEveryCursor(t *testing.T, ec tenurev1connect.EventServiceClient, a1 string, last uint64) {
	t.Helper()
	all := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest"}).untilCaughtUp()
	checkDense(t, all, 1, last)
	if got := fmt.Sprint(types(all)); got != "[TaskCreated TaskCreated TaskCreated LeaseGranted TaskCompleted]" {
		t.Fatalf("types %s", got)
	}
	tc := all[0]
	if tc.GetTaskId() != a1 || tc.GetNamespace() != "a" || tc.GetQueue() != "q1" || string(tc.GetTaskCreated().GetPayload()) != "first" ||
		tc.GetTaskCreated().GetRetryPolicy().GetMaxAttempts() == 0 {
		t.Fatalf("TaskCreated: %v", tc)
	}
	// The lease and completion name their task's namespace and
	// queue, which their records do not carry.
	for _, ev := range all[3:] {
		if ev.GetTaskId() != a1 || ev.GetNamespace() != "a" || ev.GetQueue() != "q1" {
			t.Fatalf("%s: %v", ev.GetType(), ev)
		}
	}
	if r := all[4].GetTaskCompleted(); string(r.GetResult()) != "done" || r.GetLeaseId() != all[3].GetLeaseGranted().GetLeaseId() {
		t.Fatalf("TaskCompleted: %v", all[4])
	}

	// From each event's cursor, exactly the events after it.
	for k := range all {
		rest := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: all[k].GetCursor()})
		if rest.cursor != all[k].GetCursor() {
			t.Fatalf("a stream from %s starts at %s", all[k].GetCursor(), rest.cursor)
		}
		if k+1 < len(all) {
			checkDense(t, rest.untilCaughtUp(), uint64(k+2), last)
		}
		rest.close()
	}
}

// TestWatchEventsFilters: each field of the filter selects what it says;
// the cursor of a filtered stream moves past what it skips.
func TestWatchEventsFilters(t *testing.T) {
	t.Parallel()
	e := newEventsEnv(t, node.Config{}, server.Options{})
	ta := e.submit(t, "a", "q1", "x")
	e.submit(t, "a", "q2", "x")
	e.submit(t, "b", "q1", "x")
	e.work(t, "a", "q1")
	e.work(t, "b", "q1")
	last := e.n.Coordinator().Stats().LastLSN
	ec := e.events["grpc over h2c"]
	for _, c := range []struct {
		name   string
		filter *tenurev1.EventFilter
		want   string
	}{
		{"namespace", &tenurev1.EventFilter{Namespace: "a"}, "[a/q1 TaskCreated a/q2 TaskCreated a/q1 LeaseGranted a/q1 TaskCompleted]"},
		{"queue", &tenurev1.EventFilter{Namespace: "a", Queue: "q1"}, "[a/q1 TaskCreated a/q1 LeaseGranted a/q1 TaskCompleted]"},
		{"task", &tenurev1.EventFilter{TaskId: ta}, "[a/q1 TaskCreated a/q1 LeaseGranted a/q1 TaskCompleted]"},
		{"types", &tenurev1.EventFilter{Types: []string{"TaskCompleted"}}, "[a/q1 TaskCompleted b/q1 TaskCompleted]"},
		{"namespace and types", &tenurev1.EventFilter{Namespace: "b", Types: []string{"TaskCreated", "LeaseGranted"}}, "[b/q1 TaskCreated b/q1 LeaseGranted]"},
		{"nothing", &tenurev1.EventFilter{Namespace: "c"}, "[]"},
	} {
		evs := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: c.filter})
		got := evs.untilCaughtUp()
		var desc []string
		for _, ev := range got {
			desc = append(desc, ev.GetNamespace()+"/"+ev.GetQueue()+" "+ev.GetType())
		}
		if fmt.Sprint(desc) != c.want && !(c.want == "[]" && len(desc) == 0) {
			t.Errorf("%s: got %v, want %s", c.name, desc, c.want)
		}
		if cur, _ := events.ParseCursor(evs.cursor); cur.Of(0) != last {
			t.Errorf("%s: the caught-up cursor is at %v, want lsn %d: skipped records move it", c.name, cur.Describe(), last)
		}
	}

	for _, c := range []struct {
		filter *tenurev1.EventFilter
		field  string
	}{
		{&tenurev1.EventFilter{Types: []string{"TaskCreated", "NoSuchRecord"}}, "filter.types[1]"},
		{&tenurev1.EventFilter{Queue: "q1"}, "filter.namespace"},
	} {
		_, err := watch(t, ec, "", &tenurev1.WatchEventsRequest{Filter: c.filter})
		checkField(t, err, connect.CodeInvalidArgument, c.field)
	}
	_, err := watch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "not a cursor"})
	checkField(t, err, connect.CodeInvalidArgument, "cursor")
}

// checkField checks that err is code with a detail naming field.
func checkField(t *testing.T, err error, code connect.Code, field string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code {
		t.Fatalf("got %v, want %v naming %s", err, code, field)
	}
	d := detailOf(t, ce)
	if d.GetField() != field {
		t.Fatalf("%v names field %q, want %q", err, d.GetField(), field)
	}
}

func detailOf(t *testing.T, ce *connect.Error) *tenurev1.ErrorDetail {
	t.Helper()
	d := apitest.ErrorDetail(ce)
	if d == nil {
		t.Fatalf("%v carries no ErrorDetail", ce)
	}
	return d
}
