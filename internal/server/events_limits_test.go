package server_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/auth/authtest"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestWatchEventsRetention: a cursor older than the log is refused with
// the oldest cursor, from which a stream opens; one past the log's end is
// refused as invalid.
func TestWatchEventsRetention(t *testing.T) {
	t.Parallel()
	e := newEventsEnv(t, node.Config{SegmentBytes: 1024, Snapshots: host.Schedule{Disabled: true}}, server.Options{})
	for i := range 40 {
		e.submit(t, "a", "q", fmt.Sprintf("task %d with a payload to fill segments", i))
	}
	for range 2 {
		if _, err := e.admin.Snapshot(apiCtx(t), connect.NewRequest(&tenurev1.SnapshotRequest{})); err != nil {
			t.Fatal(err)
		}
		e.submit(t, "a", "q", "between snapshots, to move past the first")
	}
	if _, err := e.admin.Snapshot(apiCtx(t), connect.NewRequest(&tenurev1.SnapshotRequest{})); err != nil {
		t.Fatal(err)
	}
	first := e.n.WALFirstLSN()
	if first <= 1 {
		t.Fatalf("the log still starts at lsn %d: the test needs a compacted log", first)
	}
	ec := e.events["connect+json over HTTP/1.1"]
	_, err := watch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: events.Cursor{{Partition: 0, LSN: 3}}.String()})
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeOutOfRange {
		t.Fatalf("an expired cursor: %v, want out_of_range", err)
	}
	d := detailOf(t, ce)
	oldest, perr := events.ParseCursor(d.GetOldestCursor())
	if d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_CURSOR_EXPIRED || perr != nil || oldest.Of(0) != first-1 {
		t.Fatalf("detail %v (oldest %v, %v); want CURSOR_EXPIRED and the oldest cursor at lsn %d", d, oldest.Describe(), perr, first-1)
	}
	evs := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: d.GetOldestCursor()}).untilCaughtUp()
	checkDense(t, evs, first, e.n.Coordinator().Stats().LastLSN)
	// "oldest" starts there too.
	if w := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: "oldest"}); w.cursor != d.GetOldestCursor() {
		t.Fatalf("oldest starts at %s, the expired cursor's oldest is %s", w.cursor, d.GetOldestCursor())
	}

	_, err = watch(t, ec, "", &tenurev1.WatchEventsRequest{Cursor: events.Cursor{{Partition: 0, LSN: 1 << 40}}.String()})
	checkField(t, err, connect.CodeInvalidArgument, "cursor")
}

// TestWatchEventsLimit: streams past --max-event-streams are refused at
// once; a stream that ends makes room.
func TestWatchEventsLimit(t *testing.T) {
	t.Parallel()
	e := newEventsEnv(t, node.Config{}, server.Options{Load: server.LoadLimits{MaxEventStreams: 2}})
	ec := e.events["grpc over h2c"]
	w1 := mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{})
	mustWatch(t, ec, "", &tenurev1.WatchEventsRequest{})
	_, err := watch(t, ec, "", &tenurev1.WatchEventsRequest{})
	checkField(t, err, connect.CodeResourceExhausted, "streams")
	w1.close()
	// The server sees the first stream end once its context does.
	deadline := time.Now().Add(30 * time.Second)
	for {
		w, err := watch(t, ec, "", &tenurev1.WatchEventsRequest{})
		if err == nil {
			w.close()
			break
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("after a stream ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchEventsAuth: a token scoped to a namespace watches its namespace
// only, and never sees another namespace's events; watching everything
// needs namespace *.
func TestWatchEventsAuth(t *testing.T) {
	t.Parallel()
	url, hc, tok := authServer(t)
	admin, err := client.New(url, client.Options{Token: tok.Setup, Protocol: client.ProtocolGRPC})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{authtest.InNamespace, authtest.OutNamespace, authtest.InNamespace} {
		if _, err := admin.Submit(apiCtx(t), client.SubmitRequest{Namespace: ns, Queue: authtest.InQueue, Payload: []byte(ns)}); err != nil {
			t.Fatal(err)
		}
	}
	ec := tenurev1connect.NewEventServiceClient(hc, url, connect.WithGRPC())
	reader := tok.Scoped[auth.Reader]
	in := mustWatch(t, ec, reader, &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: &tenurev1.EventFilter{Namespace: authtest.InNamespace}}).untilCaughtUp()
	if len(in) != 2 {
		t.Fatalf("the scoped reader saw %d events of its namespace, want 2: %v", len(in), in)
	}
	for _, ev := range in {
		if ev.GetNamespace() != authtest.InNamespace || string(ev.GetTaskCreated().GetPayload()) != authtest.InNamespace {
			t.Fatalf("the scoped reader saw %v", ev)
		}
	}
	for _, f := range []*tenurev1.EventFilter{nil, {Namespace: authtest.OutNamespace}, {TaskId: "whatever"},
		{Namespace: authtest.OutNamespace, WorkflowId: "wf"}, {WorkflowId: "wf"}} {
		_, err := watch(t, ec, reader, &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: f})
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("a scoped reader watching %v: %v, want permission_denied", f, err)
		}
	}
	// A workflow filter is decided by its namespace.
	if wf := mustWatch(t, ec, reader, &tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: &tenurev1.EventFilter{Namespace: authtest.InNamespace, WorkflowId: "wf"}}).untilCaughtUp(); len(wf) != 0 {
		t.Fatalf("a workflow nobody submitted had events: %v", wf)
	}
	if _, err := watch(t, ec, tok.Scoped[auth.Worker], &tenurev1.WatchEventsRequest{Filter: &tenurev1.EventFilter{Namespace: authtest.InNamespace}}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a worker token watching: %v, want permission_denied", err)
	}
	if _, err := watch(t, ec, "", &tenurev1.WatchEventsRequest{}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("no token: %v, want unauthenticated", err)
	}
	every := mustWatch(t, ec, tok.Star[auth.Reader], &tenurev1.WatchEventsRequest{Cursor: "oldest"}).untilCaughtUp()
	if len(every) != 3 {
		t.Fatalf("a reader of namespace * saw %d events, want 3", len(every))
	}
}
