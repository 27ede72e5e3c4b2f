//go:build go1.25

package worker

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/internal/inproc"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// slowBeats answers Heartbeat only when the call's context ends, after
// reporting its arrival.
type slowBeats struct {
	tenurev1connect.UnimplementedWorkerServiceHandler
	arrived chan string
}

func (s *slowBeats) Heartbeat(ctx context.Context, req *connect.Request[tenurev1.HeartbeatRequest]) (*connect.Response[tenurev1.HeartbeatResponse], error) {
	s.arrived <- req.Msg.GetTaskId()
	<-ctx.Done()
	return connect.NewResponse(&tenurev1.HeartbeatResponse{LeaseExpiry: timestamppb.New(time.Now().Add(time.Hour))}), nil
}

// TestKeeperStopEndsHeartbeatInFlight: stop with a heartbeat out ends the
// call and returns once it has returned, without counting the lease as
// lost; a keeper of another lease goes on.
func TestKeeperStopEndsHeartbeatInFlight(t *testing.T) {
	synctest.Test(t, testKeeperStopEndsHeartbeatInFlight)
}

func testKeeperStopEndsHeartbeatInFlight(t *testing.T) {
	srv := &slowBeats{arrived: make(chan string, 10)}
	_, h := tenurev1connect.NewWorkerServiceHandler(srv)
	c, err := client.New("http://tenure.test", client.Options{HTTPClient: inproc.Client(h)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(c, Options{Queues: []string{"q"}, HeartbeatEvery: 0.01, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	go w.beats.run()
	defer w.beats.stopRun()

	start := func(id string) (*keeper, context.Context) {
		now := time.Now()
		task := &client.LeasedTask{ID: id, LeaseID: "l-" + id, ExecutionWindow: 3 * time.Second, LeaseExpiry: now.Add(3 * time.Second)}
		ctx, lose := context.WithCancelCause(context.Background())
		t.Cleanup(func() { lose(nil) })
		k := &keeper{}
		w.keepLease(k, ctx, lose, task, now, &logger{base: w.lg.base, t: task})
		return k, ctx
	}
	a, actx := start("a")
	b, bctx := start("b")
	// Both heartbeats are due after 30ms (1% of the window).
	t0 := time.Now()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case id := <-srv.arrived:
			seen[id] = true
		case <-time.After(time.Minute):
			t.Fatalf("heartbeats arrived for %v; want a and b", seen)
		}
	}
	if at := time.Since(t0); at != 30*time.Millisecond {
		t.Errorf("the heartbeats arrived after %v, want 30ms", at)
	}
	a.stop()
	w.beats.mu.Lock()
	inflight, scheduled := a.inflight, a.idx >= 0
	w.beats.mu.Unlock()
	if inflight || scheduled {
		t.Errorf("after stop: heartbeat in flight %v, still scheduled %v; want neither", inflight, scheduled)
	}
	if actx.Err() != nil || bctx.Err() != nil {
		t.Errorf("stop ended a task's ctx: a %v, b %v", context.Cause(actx), context.Cause(bctx))
	}
	a.stop() // a second stop returns at once
	b.stop()
}
