//go:build go1.25

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// progressOf is a heartbeat's progress as "75% c", "" for none.
func progressOf(p *tenurev1.Progress) string {
	if p == nil {
		return ""
	}
	if p.Percent == nil {
		return p.GetMessage()
	}
	return fmt.Sprintf("%d%% %s", p.GetPercent(), p.GetMessage())
}

// TestProgressRidesOnHeartbeats runs a handler's progress reports on the
// clock of a synctest bubble: the first report brings a heartbeat forward
// to at once; the reports that follow within a second go together, the
// last of them, in one heartbeat a second after the one before; a report
// the same as the last one sent brings nothing forward; the regular
// heartbeats (every 10s of a 30s window) carry no report.
func TestProgressRidesOnHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		srv, c := serveOneLease(t, 10)
		step := make(chan struct{})
		errs := make(chan error, 10)
		report := func(ctx context.Context, p worker.Progress) { errs <- worker.ReportProgress(ctx, p) }
		startWorker(t, c, "q", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
			report(ctx, worker.Progress{Message: "a", Done: 1, Total: 4})
			<-step
			report(ctx, worker.Progress{Message: "b", Done: 1, Total: 2})
			report(ctx, worker.Progress{Message: "c", Done: 3, Total: 4})
			<-step
			report(ctx, worker.Progress{Message: "c", Done: 3, Total: 4})
			<-step
			return []byte("done"), nil
		}, worker.Options{Logger: slog.New(slog.DiscardHandler)})
		want := []struct {
			at       time.Duration
			progress string
		}{{0, "25% a"}, {time.Second, "75% c"}, {11 * time.Second, ""}}
		for i, w := range want {
			b := recv(t, srv.beats, "a heartbeat")
			if got := progressOf(b.progress); b.at.Sub(t0) != w.at || got != w.progress {
				t.Fatalf("heartbeat %d at %v with progress %q; want at %v with %q", i+1, b.at.Sub(t0), got, w.at, w.progress)
			}
			synctest.Wait()
			step <- struct{}{}
		}
		for range 4 {
			if err := recv(t, errs, "ReportProgress"); err != nil {
				t.Fatalf("ReportProgress: %v", err)
			}
		}
	})
}

// TestReportProgressRefuses: a report outside a handler, or one the server
// would refuse, is an error at once.
func TestReportProgressRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := serveOneLease(t, 10)
		errs := make(chan error, 3)
		startWorker(t, c, "q", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
			errs <- worker.ReportProgress(ctx, worker.Progress{Message: strings.Repeat("m", 257)})
			errs <- worker.ReportProgress(ctx, worker.Progress{Done: 5, Total: 4})
			errs <- worker.ReportProgress(ctx, worker.Progress{Message: "\xff"})
			return nil, nil
		}, worker.Options{Logger: slog.New(slog.DiscardHandler)})
		for _, want := range []string{"257 bytes; the limit is 256", "Done 5 of Total 4", "not valid UTF-8"} {
			if err := recv(t, errs, "ReportProgress"); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ReportProgress: %v, want an error saying %q", err, want)
			}
		}
		if err := worker.ReportProgress(context.Background(), worker.Progress{Message: "x"}); err == nil || !strings.Contains(err.Error(), "not the context of a running handler") {
			t.Errorf("ReportProgress outside a handler: %v", err)
		}
	})
}

// snoozer is oneLease answering Snooze: it records the request, and
// refuses it as the wrong state when refuse is set.
type snoozer struct {
	*oneLease
	refuse bool
	got    chan *tenurev1.SnoozeRequest
}

func (s *snoozer) Snooze(_ context.Context, req *connect.Request[tenurev1.SnoozeRequest]) (*connect.Response[tenurev1.SnoozeResponse], error) {
	s.got <- req.Msg
	if s.refuse {
		err := connect.NewError(connect.CodeFailedPrecondition, errors.New("operation not allowed in the task's state: task t1 was snoozed 1000 times"))
		d, _ := connect.NewErrorDetail(&tenurev1.ErrorDetail{Reason: tenurev1.ErrorReason_ERROR_REASON_WRONG_STATE, TaskId: "t1"})
		err.AddDetail(d)
		return nil, err
	}
	return connect.NewResponse(&tenurev1.SnoozeResponse{NotBefore: timestamppb.New(time.Now().Add(req.Msg.GetDelay().AsDuration()))}), nil
}

// TestSnoozeEndsTheAttempt: a handler that returns a SnoozeError (wrapped
// or not) snoozes its task: the worker calls Snooze with its delay and
// reason, reports nothing else, and the middleware hears OutcomeSnoozed with
// when the task runs again. A snooze the server refuses fails the attempt
// instead, with the refusal as its reason.
func TestSnoozeEndsTheAttempt(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%v", refuse), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &snoozer{oneLease: &oneLease{window: 30 * time.Second, okBeats: 10, beats: make(chan beat, 10)}, refuse: refuse,
					got: make(chan *tenurev1.SnoozeRequest, 1)}
				_, h := tenurev1connect.NewWorkerServiceHandler(srv)
				c := inMemory(t, h)
				ends := make(chan worker.Finish, 1)
				startWorker(t, c, "q", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
					return nil, fmt.Errorf("upstream: %w", &worker.SnoozeError{Delay: time.Minute, Reason: "export not ready"})
				}, worker.Options{Logger: slog.New(slog.DiscardHandler), Middleware: []worker.Middleware{
					func(ctx context.Context, _ *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
						f := next(ctx)
						ends <- f
						return f
					}}})
				req := recv(t, srv.got, "the Snooze call")
				if req.GetTaskId() != "t1" || req.GetLeaseId() != "l1" || req.GetDelay().AsDuration() != time.Minute || req.GetReason() != "export not ready" {
					t.Fatalf("Snooze(%v); want t1, l1, 1m, the reason", req)
				}
				f := recv(t, ends, "the attempt's end")
				srv.mu.Lock()
				reports := strings.Join(srv.reports, ",")
				srv.mu.Unlock()
				if !refuse {
					if f.Outcome != worker.OutcomeSnoozed || !f.RetryAt.Equal(time.Now().Add(time.Minute)) || f.Err != nil || reports != "" {
						t.Fatalf("the attempt ended %v (%v), retry at %v, reports %q; want snoozed for a minute, nothing else reported", f.Outcome, f.Err, f.RetryAt, reports)
					}
					return
				}
				if reports != "Fail" || f.Err == nil || !strings.Contains(f.Err.Error(), "the server refused the snooze") {
					t.Fatalf("a refused snooze: reports %q, the attempt ended %v (%v); want the attempt failed with the refusal", reports, f.Outcome, f.Err)
				}
			})
		})
	}
}
