package member_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/events"
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
	// A workflow filter is refused here, not served with gaps.
	wf, err := ec.WatchEvents(ctx, connect.NewRequest(&tenurev1.WatchEventsRequest{Cursor: "oldest", Filter: &tenurev1.EventFilter{Namespace: "default", WorkflowId: "wf"}}))
	if err == nil {
		wf.Receive()
		err = wf.Err()
		wf.Close()
	}
	if connect.CodeOf(err) != connect.CodeUnimplemented || !strings.Contains(err.Error(), "filter.workflow_id") {
		t.Fatalf("a workflow filter in cluster mode: %v, want unimplemented naming filter.workflow_id", err)
	}
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
