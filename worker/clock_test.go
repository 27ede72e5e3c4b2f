package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/worker"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// oneLease is a WorkerService that leases one task, "t1" under lease "l1",
// whose lease and every heartbeat's extension run on clock: a lease lasts
// window from the clock's now. Each Heartbeat is reported on beats; while
// failBeats is set it is answered with an internal error (which the client
// does not retry). Every report (Commit, Complete, CompleteBatch, Fail) is
// recorded.
type oneLease struct {
	tenurev1connect.UnimplementedWorkerServiceHandler
	clock  clock.Clock
	window time.Duration
	beats  chan string

	mu        sync.Mutex
	leased    bool
	failBeats bool
	reports   []string
}

func (s *oneLease) Lease(ctx context.Context, _ *connect.Request[tenurev1.LeaseRequest]) (*connect.Response[tenurev1.LeaseResponse], error) {
	s.mu.Lock()
	first := !s.leased
	s.leased = true
	s.mu.Unlock()
	if !first {
		<-ctx.Done() // nothing more to lease: long-poll until the worker stops
		return connect.NewResponse(&tenurev1.LeaseResponse{}), nil
	}
	return connect.NewResponse(&tenurev1.LeaseResponse{Tasks: []*tenurev1.LeasedTask{{
		TaskId: "t1", LeaseId: "l1", Queue: "q", Attempt: 1,
		LeaseExpiry:     timestamppb.New(s.clock.Now().Add(s.window)),
		ExecutionWindow: durationpb.New(s.window),
	}}}), nil
}

func (s *oneLease) Heartbeat(_ context.Context, req *connect.Request[tenurev1.HeartbeatRequest]) (*connect.Response[tenurev1.HeartbeatResponse], error) {
	s.beats <- req.Msg.GetLeaseId()
	s.mu.Lock()
	fail := s.failBeats
	s.mu.Unlock()
	if fail {
		return nil, connect.NewError(connect.CodeInternal, errors.New("heartbeat refused by the test"))
	}
	return connect.NewResponse(&tenurev1.HeartbeatResponse{LeaseExpiry: timestamppb.New(s.clock.Now().Add(s.window))}), nil
}

func (s *oneLease) report(name string) {
	s.mu.Lock()
	s.reports = append(s.reports, name)
	s.mu.Unlock()
}

func (s *oneLease) Commit(context.Context, *connect.Request[tenurev1.CommitRequest]) (*connect.Response[tenurev1.CommitResponse], error) {
	s.report("Commit")
	return connect.NewResponse(&tenurev1.CommitResponse{}), nil
}

func (s *oneLease) Complete(context.Context, *connect.Request[tenurev1.CompleteRequest]) (*connect.Response[tenurev1.CompleteResponse], error) {
	s.report("Complete")
	return connect.NewResponse(&tenurev1.CompleteResponse{}), nil
}

func (s *oneLease) CompleteBatch(_ context.Context, req *connect.Request[tenurev1.CompleteBatchRequest]) (*connect.Response[tenurev1.CompleteBatchResponse], error) {
	s.report("CompleteBatch")
	return connect.NewResponse(&tenurev1.CompleteBatchResponse{Results: make([]*tenurev1.CompleteResult, len(req.Msg.GetItems()))}), nil
}

func (s *oneLease) Fail(context.Context, *connect.Request[tenurev1.FailRequest]) (*connect.Response[tenurev1.FailResponse], error) {
	s.report("Fail")
	return connect.NewResponse(&tenurev1.FailResponse{}), nil
}

// serveOneLease serves a oneLease on fake's clock, with a 30s window, and
// returns it with a client of it (on the same clock, no retries).
func serveOneLease(t *testing.T, fake *clock.Fake) (*oneLease, *client.Client) {
	t.Helper()
	srv := &oneLease{clock: fake, window: 30 * time.Second, beats: make(chan string, 10)}
	_, h := tenurev1connect.NewWorkerServiceHandler(srv)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, client.Options{MaxRetries: -1, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

// recordHandler sends every log record to records, whatever its level.
type recordHandler struct{ records chan slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.records <- r.Clone()
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// TestHeartbeatsOnTheClock drives a worker's heartbeats with a fake clock,
// without sleeping. The lease lasts 30s; the worker heartbeats every 10s
// (a third of the window) and gives the lease up 2s (its safety margin)
// before its deadline. One heartbeat, due 10s after the lease, extends the
// lease to 40s, so the worker's local deadline moves from 28s to 38s: at 29s
// the handler still runs and the worker heartbeats again. From then on
// every heartbeat fails; the worker retries every 5s, and at 38s, with no
// successful heartbeat since 10s, it ends the handler's ctx, as lost, and
// reports nothing for the task.
func TestHeartbeatsOnTheClock(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	fake := clock.NewFake(t0)
	srv, c := serveOneLease(t, fake)
	records := make(chan slog.Record, 100)
	started := make(chan context.Context, 1)
	// The handler also returns when the test ends, so that a failed test
	// stops its worker without waiting for the shutdown grace, which only
	// the fake clock could end.
	testEnded := make(chan struct{})
	startWorker(t, c, "q", func(ctx context.Context, task *worker.Task) ([]byte, error) {
		started <- ctx
		select {
		case <-ctx.Done():
		case <-testEnded:
		}
		return []byte("discarded"), nil
	}, worker.Options{Clock: fake, Logger: slog.New(recordHandler{records})})
	t.Cleanup(func() { close(testEnded) }) // runs before the worker is stopped

	hctx := recv(t, started, "the handler to start")
	// parked waits until the worker waits on the fake clock for its next
	// heartbeat, failing if the handler's ctx ends first.
	parked := func() {
		t.Helper()
		waiting := make(chan struct{})
		go func() {
			fake.WaitForTimers(1)
			close(waiting)
		}()
		select {
		case <-waiting:
		case <-hctx.Done():
			t.Fatalf("the handler's ctx ended (%v) before the first heartbeat", context.Cause(hctx))
		case <-time.After(30 * time.Second):
			t.Fatalf("the worker never waited for its first heartbeat on the fake clock")
		}
	}
	// waitLog returns the next record with message msg.
	waitLog := func(msg string) slog.Record {
		t.Helper()
		for {
			if r := recv(t, records, "the log record "+msg); r.Message == msg {
				return r
			}
		}
	}
	// beat waits for the next heartbeat, failing if the handler's ctx ends
	// first.
	beat := func(at string) {
		t.Helper()
		select {
		case lease := <-srv.beats:
			if lease != "l1" {
				t.Fatalf("%s: heartbeat of lease %q, want l1", at, lease)
			}
		case <-hctx.Done():
			t.Fatalf("%s: the handler's ctx ended (%v) instead of a heartbeat", at, context.Cause(hctx))
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no heartbeat", at)
		}
	}
	noBeat := func(at string) {
		t.Helper()
		select {
		case <-srv.beats:
			t.Fatalf("%s: an unexpected heartbeat", at)
		default:
		}
	}

	parked()
	fake.Advance(10 * time.Second)
	beat("at 10s")
	extended := waitLog("heartbeat: lease extended")
	attrs := map[string]time.Time{}
	extended.Attrs(func(a slog.Attr) bool {
		if v, ok := a.Value.Any().(time.Time); ok {
			attrs[a.Key] = v
		}
		return true
	})
	if !extended.Time.Equal(t0.Add(10*time.Second)) || !attrs["lease_expiry"].Equal(t0.Add(40*time.Second)) ||
		!attrs["local_deadline"].Equal(t0.Add(38*time.Second)) {
		t.Fatalf("after the heartbeat at 10s: record at %v with %v; want at 10s, expiry 40s, local deadline 38s (t0 %v)", extended.Time, attrs, t0)
	}
	noBeat("at 10s, after the first heartbeat")

	srv.mu.Lock()
	srv.failBeats = true
	srv.mu.Unlock()
	// Past the first lease's local deadline (28s): the extended lease holds.
	fake.Advance(19 * time.Second)
	beat("at 29s")
	waitLog("heartbeat failed; retrying")
	if hctx.Err() != nil {
		t.Fatalf("at 29s: the handler's ctx ended (%v); the heartbeat at 10s extended the lease to 38s", context.Cause(hctx))
	}
	fake.Advance(5 * time.Second)
	beat("at 34s (a failed heartbeat is retried after half the interval)")
	waitLog("heartbeat failed; retrying")
	if hctx.Err() != nil {
		t.Fatalf("at 34s: the handler's ctx ended (%v)", context.Cause(hctx))
	}
	// 38s: the extended lease's expiry less the margin, and no heartbeat
	// succeeded since 10s.
	fake.Advance(4 * time.Second)
	recv(t, hctx.Done(), "the handler's ctx to end at 38s")
	if cause := context.Cause(hctx).Error(); !strings.Contains(cause, "lease lost: no successful heartbeat") {
		t.Errorf("the handler's ctx ended with %q, want a lease lost for want of a heartbeat", cause)
	}
	waitLog("lease lost while the handler ran: result discarded, nothing committed")
	noBeat("at 38s")
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.reports) != 0 {
		t.Errorf("the worker reported %v for a task whose lease it lost; want nothing", srv.reports)
	}
}
