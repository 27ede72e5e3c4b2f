package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/node"
)

// TestPauseHoldsAcrossRestart: a paused queue stays paused after a restart
// that replays the log, and after one that loads a snapshot: nothing is
// leased from it, until it is resumed.
func TestPauseHoldsAcrossRestart(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	dataDir := t.TempDir()
	open := func() *node.Node {
		t.Helper()
		n, err := node.Open(ctx, snapConfig(dataDir, nil, clk))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	lease := func(n *node.Node) int {
		t.Helper()
		ls, err := n.Coordinator().Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(ls)
	}
	n := open()
	for range 3 {
		if _, err := n.Coordinator().Submit(ctx, coordinator.SubmitRequest{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.Coordinator().Pause(ctx, coordinator.PauseRequest{Queue: "q", MustExist: true, Actor: coordinator.Actor{By: "ops", Reason: "incident"}}); err != nil {
		t.Fatal(err)
	}
	if got := lease(n); got != 0 {
		t.Fatalf("leased %d from the paused queue", got)
	}
	n.Close()

	n = open() // replay of the log
	if got := lease(n); got != 0 {
		t.Fatalf("after a replay: leased %d from the paused queue", got)
	}
	if _, err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	n.Close()

	n = open() // the snapshot, then the log after it
	defer n.Close()
	if got := lease(n); got != 0 {
		t.Fatalf("after a snapshot: leased %d from the paused queue", got)
	}
	qs, err := n.Coordinator().Queues(ctx, "default", "q")
	if err != nil || len(qs) != 1 || qs[0].Paused == nil || qs[0].Paused.By != "ops" || qs[0].Waiting() != 3 {
		t.Fatalf("queue after restarts: %+v, %v", qs, err)
	}
	if changed, err := n.Coordinator().Resume(ctx, coordinator.PauseRequest{Queue: "q", MustExist: true}); err != nil || !changed {
		t.Fatalf("Resume: %v, %v", changed, err)
	}
	if got := lease(n); got != 3 {
		t.Fatalf("after resume: leased %d, want 3", got)
	}
}
