//go:build go1.25

package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// oneLease is a WorkerService that leases one task, "t1" under lease "l1":
// a lease, and each heartbeat's extension, lasts window from now. Each
// Heartbeat is reported on beats with the time it arrived; the first
// okBeats are answered, the others refused with an internal error (which
// the client does not retry). Every report (Commit, Complete,
// CompleteBatch, Fail) is recorded.
type oneLease struct {
	tenurev1connect.UnimplementedWorkerServiceHandler
	window  time.Duration
	okBeats int
	beats   chan beat

	mu      sync.Mutex
	leased  bool
	nbeats  int
	reports []string
}

// beat is a heartbeat as oneLease saw it.
type beat struct {
	lease    string
	at       time.Time
	progress *tenurev1.Progress
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
		LeaseExpiry:     timestamppb.New(time.Now().Add(s.window)),
		ExecutionWindow: durationpb.New(s.window),
	}}}), nil
}

func (s *oneLease) Heartbeat(_ context.Context, req *connect.Request[tenurev1.HeartbeatRequest]) (*connect.Response[tenurev1.HeartbeatResponse], error) {
	s.beats <- beat{lease: req.Msg.GetLeaseId(), at: time.Now(), progress: req.Msg.GetProgress()}
	s.mu.Lock()
	s.nbeats++
	fail := s.nbeats > s.okBeats
	s.mu.Unlock()
	if fail {
		return nil, connect.NewError(connect.CodeInternal, errors.New("heartbeat refused by the test"))
	}
	return connect.NewResponse(&tenurev1.HeartbeatResponse{LeaseExpiry: timestamppb.New(time.Now().Add(s.window))}), nil
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

func (s *oneLease) CompleteBatch(context.Context, *connect.Request[tenurev1.CompleteBatchRequest]) (*connect.Response[tenurev1.CompleteBatchResponse], error) {
	s.report("CompleteBatch")
	return connect.NewResponse(&tenurev1.CompleteBatchResponse{}), nil // every item done
}

func (s *oneLease) Fail(context.Context, *connect.Request[tenurev1.FailRequest]) (*connect.Response[tenurev1.FailResponse], error) {
	s.report("Fail")
	return connect.NewResponse(&tenurev1.FailResponse{}), nil
}

// serveOneLease serves a oneLease with a 30s window whose first okBeats
// heartbeats succeed, in memory, and returns it with a client of it (no
// retries).
func serveOneLease(t *testing.T, okBeats int) (*oneLease, *client.Client) {
	t.Helper()
	srv := &oneLease{window: 30 * time.Second, okBeats: okBeats, beats: make(chan beat, 10)}
	_, h := tenurev1connect.NewWorkerServiceHandler(srv)
	return srv, inMemory(t, h)
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

// TestHeartbeatsOnTheClock runs a worker's heartbeats on the clock of a
// testing/synctest bubble, which moves only while everything waits: every
// time below is exact. The lease lasts 30s; the worker heartbeats every
// 10s (a third of the window) and gives the lease up 2s (its safety
// margin) before its deadline. The heartbeat at 10s extends the lease to
// 40s, so the worker's local deadline moves from 28s to 38s. Every later
// heartbeat fails; the worker retries after half the interval (20s, 25s,
// 30s, 35s), still running the handler past the first deadline, and at
// 38s, with no successful heartbeat since 10s, it ends the handler's ctx,
// as lost, and reports nothing for the task.
func TestHeartbeatsOnTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		srv, c := serveOneLease(t, 1)
		records := make(chan slog.Record, 100)
		started := make(chan context.Context, 1)
		// The handler also returns when the test ends, so that a failed
		// test stops its worker without waiting for the shutdown grace.
		testEnded := make(chan struct{})
		startWorker(t, c, "q", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
			started <- ctx
			select {
			case <-ctx.Done():
			case <-testEnded:
			}
			return []byte("discarded"), nil
		}, worker.Options{Logger: slog.New(recordHandler{records})})
		t.Cleanup(func() { close(testEnded) }) // runs before the worker is stopped

		hctx := recv(t, started, "the handler to start")
		// waitLog returns the next record with message msg.
		waitLog := func(msg string) slog.Record {
			t.Helper()
			for {
				if r := recv(t, records, "the log record "+msg); r.Message == msg {
					return r
				}
			}
		}
		for i, want := range []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second, 30 * time.Second, 35 * time.Second} {
			b := recv(t, srv.beats, "a heartbeat")
			if b.lease != "l1" || b.at.Sub(t0) != want {
				t.Fatalf("heartbeat %d: lease %q at %v; want l1 at %v", i+1, b.lease, b.at.Sub(t0), want)
			}
			if hctx.Err() != nil {
				t.Fatalf("at %v: the handler's ctx ended (%v); the heartbeat at 10s extended the lease to 38s", want, context.Cause(hctx))
			}
			if i > 0 {
				waitLog("heartbeat failed; retrying")
				continue
			}
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
		}
		// 38s: the extended lease's expiry less the margin, and no
		// heartbeat succeeded since 10s.
		recv(t, hctx.Done(), "the handler's ctx to end at 38s")
		if at := time.Since(t0); at != 38*time.Second {
			t.Errorf("the handler's ctx ended at %v, want 38s", at)
		}
		if cause := context.Cause(hctx).Error(); !strings.Contains(cause, "lease lost: no successful heartbeat") {
			t.Errorf("the handler's ctx ended with %q, want a lease lost for want of a heartbeat", cause)
		}
		waitLog("lease lost while the handler ran: result discarded, nothing committed")
		synctest.Wait()
		select {
		case b := <-srv.beats:
			t.Fatalf("a heartbeat at %v, after the lease was given up", b.at.Sub(t0))
		default:
		}
		srv.mu.Lock()
		defer srv.mu.Unlock()
		if len(srv.reports) != 0 {
			t.Errorf("the worker reported %v for a task whose lease it lost; want nothing", srv.reports)
		}
	})
}

// TestFinishTook: Finish.Took is the time from the lease's arrival to the
// end of the report: a handler that holds its task for 3s took 3s (exactly,
// on the bubble's clock).
func TestFinishTook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := serveOneLease(t, 1)
		ends := make(chan worker.Finish, 1)
		startWorker(t, c, "q", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
			time.Sleep(3 * time.Second)
			return []byte("done"), nil
		}, worker.Options{Logger: slog.New(slog.DiscardHandler), Middleware: []worker.Middleware{
			func(ctx context.Context, _ *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
				f := next(ctx)
				ends <- f
				return f
			}}})
		f := recv(t, ends, "the attempt's end")
		if f.Outcome != worker.OutcomeCompleted || f.Took != 3*time.Second {
			t.Fatalf("the attempt ended %v after %v; want completed after 3s", f.Outcome, f.Took)
		}
	})
}
