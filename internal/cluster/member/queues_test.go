package member_test

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// TestQueueStatsAndPauseAcrossPartitions: queue statistics add up every
// partition of the queue, whichever node is asked; a pause through one node
// holds in every partition, and still holds after the partitions of a
// node that leaves move to the others.
func TestQueueStatsAndPauseAcrossPartitions(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx := t.Context()
	qc := func(n *testNode) tenurev1connect.QueueServiceClient {
		return tenurev1connect.NewQueueServiceClient(http.DefaultClient, n.url)
	}
	submitMany(t, ctx, nodes[1].api, 0, 20)
	spread(t, db, 3)
	for _, n := range nodes {
		resp, err := qc(n).GetQueue(ctx, connect.NewRequest(&tenurev1.GetQueueRequest{Queue: "q"}))
		if err != nil {
			t.Fatalf("GetQueue through %s: %v", n.id, err)
		}
		q := resp.Msg.GetQueue()
		if q.GetTasks().GetWaiting() != 20 || q.GetLastHour().GetSubmitted() != 20 || q.GetPartitions() != 4 {
			t.Fatalf("through %s: %d waiting, %d submitted, %d partitions; want 20, 20, 4", n.id, q.GetTasks().GetWaiting(), q.GetLastHour().GetSubmitted(), q.GetPartitions())
		}
	}
	if _, err := qc(nodes[2]).PauseQueue(ctx, connect.NewRequest(&tenurev1.PauseQueueRequest{Queue: "q", RequestedBy: "ops"})); err != nil {
		t.Fatal(err)
	}
	paused := func(n *testNode) {
		t.Helper()
		resp, err := qc(n).GetQueue(ctx, connect.NewRequest(&tenurev1.GetQueueRequest{Queue: "q"}))
		if err != nil || !resp.Msg.GetQueue().GetPaused() || resp.Msg.GetQueue().GetPausedPartitions() != 4 {
			t.Fatalf("through %s: %v, %v; want paused in all 4 partitions", n.id, resp, err)
		}
		ls, err := lease(ctx, n.api, "q", 20, 0)
		if err != nil || len(ls) != 0 {
			t.Fatalf("lease through %s from the paused queue: %d tasks, %v", n.id, len(ls), err)
		}
	}
	for _, n := range nodes {
		paused(n)
	}
	nodes[0].close()
	eventually(t, "n1's partitions moved", func() bool {
		for _, a := range owners(t, db) {
			if a.Owner == "n1" || a.Owner == "" {
				return false
			}
		}
		return true
	})
	// The database says the partitions moved; each node learns it at its
	// next refresh, and until then may still forward to n1 and answer
	// unavailable (retry), as a client would.
	for _, n := range nodes[1:] {
		eventually(t, "routing through "+n.id+" past n1", func() bool {
			_, err := qc(n).GetQueue(ctx, connect.NewRequest(&tenurev1.GetQueueRequest{Queue: "q"}))
			return connect.CodeOf(err) != connect.CodeUnavailable
		})
	}
	paused(nodes[1])
	paused(nodes[2])
	if _, err := qc(nodes[1]).ResumeQueue(ctx, connect.NewRequest(&tenurev1.ResumeQueueRequest{Queue: "q"})); err != nil {
		t.Fatal(err)
	}
	// A queue with one task: three of its four partitions know it only by
	// the pause, and forget it at the resume; pause and resume still work.
	if _, err := submit(ctx, nodes[1].api, &tenurev1.SubmitRequest{Queue: "lonely"}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"pause", "resume"} {
		var err error
		if op == "pause" {
			_, err = qc(nodes[2]).PauseQueue(ctx, connect.NewRequest(&tenurev1.PauseQueueRequest{Queue: "lonely"}))
		} else {
			_, err = qc(nodes[2]).ResumeQueue(ctx, connect.NewRequest(&tenurev1.ResumeQueueRequest{Queue: "lonely"}))
		}
		if err != nil {
			t.Fatalf("%s of a queue with one task: %v", op, err)
		}
	}
	got := 0
	eventually(t, "all 20 tasks leased after the resume", func() bool {
		ls, err := lease(ctx, nodes[2].api, "q", 20, 0)
		if err == nil {
			got += len(ls)
		}
		return got == 20
	})
}

// TestNewQueueKnownThroughEveryNode: a queue created through one node (its
// partitions in the database) is known at once through another, however
// long before that node would read the partition map again by itself.
func TestNewQueueKnownThroughEveryNode(t *testing.T) {
	_, db := clustertest.DB(t)
	startNode(t, db, "n1")
	b := startNodeWith(t, db, "n2", 10*time.Second) // reads the map when it starts, then when asked (or in 10s)
	ctx := t.Context()
	// What a submit through n1 to a new queue does first; n2 takes no
	// part in it.
	if err := partition.New(db).EnsureQueue(ctx, "default", "fresh", 4); err != nil {
		t.Fatal(err)
	}
	scope, err := b.m.Scope(ctx, "default", "fresh")
	if err != nil || len(scope) != 4 {
		t.Fatalf("n2's scope of the queue created through n1: %d partitions, %v; want 4", len(scope), err)
	}
	if scope, err := b.m.Scope(ctx, "default", "no-such-queue"); err != nil || len(scope) != 0 {
		t.Fatalf("n2's scope of a queue no node created: %d partitions, %v; want none", len(scope), err)
	}
}
