package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestSnoozeAndProgressSurviveKill9 runs the worker protocol's snooze and
// progress against the real binary over the API: a task of one attempt is
// snoozed three times and keeps its attempt; the progress its worker
// reports shows in `tenure task get` while the lease holds, across a
// kill -9 and a restart (the records are durable before they are
// answered); the task then completes at attempt 1 of 1, and its progress
// is gone with the lease.
func TestSnoozeAndProgressSurviveKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServerProc(t, dir)
	c := newJSONClients(t, srv)
	call := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), e2eCallTimeout)
	}

	ctx, cancel := call()
	sub, err := c.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "snz", ExecutionWindow: durationpb.New(time.Hour),
		RetryPolicy:  &tenurev1.RetryPolicy{MaxAttempts: 1},
		TraceContext: &tenurev1.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Msg.GetTask().GetTaskId()
	lease := func() *tenurev1.LeasedTask {
		t.Helper()
		ctx, cancel := call()
		defer cancel()
		resp, err := c.worker.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w1", Queue: "snz", Wait: durationpb.New(5 * time.Second)}))
		if err != nil || len(resp.Msg.GetTasks()) != 1 {
			t.Fatalf("lease: %v, %v", resp, err)
		}
		return resp.Msg.GetTasks()[0]
	}
	for i := range 3 {
		l := lease()
		if l.GetAttempt() != 1 || l.GetTraceContext().GetTraceparent() == "" {
			t.Fatalf("lease %d: attempt %d, trace context %v; want attempt 1 and the submit's trace context", i+1, l.GetAttempt(), l.GetTraceContext())
		}
		ctx, cancel := call()
		_, err := c.worker.Snooze(ctx, connect.NewRequest(&tenurev1.SnoozeRequest{TaskId: id, LeaseId: l.GetLeaseId(), Reason: "upstream busy"}))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	l := lease()
	pct := uint32(40)
	ctx, cancel = call()
	_, err = c.worker.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: id, LeaseId: l.GetLeaseId(),
		Progress: &tenurev1.Progress{Message: "copying part 2 of 5", Percent: &pct}}))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	progress := regexp.MustCompile(`(?m)^progress\s+40% copying part 2 of 5 \(reported `)
	get := func(want ...*regexp.Regexp) string {
		t.Helper()
		code, out := runBin(t, "task", "get", "--addr", srv.url(), id)
		if code != 0 {
			t.Fatalf("tenure task get: exit %d\n%s", code, out)
		}
		for _, re := range want {
			if !re.MatchString(out) {
				t.Fatalf("tenure task get does not match %s:\n%s", re, out)
			}
		}
		return out
	}
	snoozed := regexp.MustCompile(`(?m)^1\s+snoozed\s+w1\s.*upstream busy$`)
	out := get(progress, regexp.MustCompile(`(?m)^attempt\s+1 of 1$`), regexp.MustCompile(`(?m)^traceparent\s+00-4bf92f`), snoozed)
	if n := len(snoozed.FindAllString(out, -1)); n != 3 {
		t.Fatalf("tenure task get lists %d snoozed executions, want 3:\n%s", n, out)
	}

	srv.kill9(t)
	srv = startServerProc(t, dir)
	c = newJSONClients(t, srv)
	get(progress)

	ctx, cancel = call()
	_, err = c.worker.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: id, LeaseId: l.GetLeaseId()}))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	out = get(regexp.MustCompile(`(?m)^state\s+COMPLETED$`), regexp.MustCompile(`(?m)^attempt\s+1 of 1$`))
	if strings.Contains(out, "\nprogress ") {
		t.Fatalf("a completed task still shows progress:\n%s", out)
	}
}

// TestWorkerSnoozeAndProgress runs the SDK's worker against the real
// binary: a task of one attempt whose handler snoozes it three times
// (worker.Snooze) completes at attempt 1 of 1, its executions listing the
// three snoozes; while its fourth run goes on, the progress the handler
// reported (worker.ReportProgress) shows in `tenure task get`. The test
// waits on events (the handler's runs, the heartbeat that carries the
// report, the attempt's end), never on a sleep.
func TestWorkerSnoozeAndProgress(t *testing.T) {
	t.Parallel()
	srv := startServerProc(t, t.TempDir())
	// beats hears of every heartbeat the worker's client made.
	beats := make(chan struct{}, 100)
	c, err := client.New(srv.url(), client.Options{Interceptors: []client.Interceptor{
		func(ctx context.Context, call *client.Call, next func(context.Context) error) error {
			err := next(ctx)
			if call.Op == "Heartbeat" && err == nil {
				beats <- struct{}{}
			}
			return err
		}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	res, err := c.Submit(ctx, client.SubmitRequest{Queue: "sdk-snooze", Payload: []byte("export-42"), Retry: &client.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	runs := make(chan uint32, 10)
	var calls atomic.Int32
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	ends := make(chan worker.Finish, 10)
	w, err := worker.New(c, worker.Options{Queues: []string{"sdk-snooze"}, PollWait: time.Second, Logger: slog.New(slog.DiscardHandler),
		Middleware: []worker.Middleware{func(ctx context.Context, _ *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
			f := next(ctx)
			ends <- f
			return f
		}}})
	if err != nil {
		t.Fatal(err)
	}
	worker.HandleRaw(w, "", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		runs <- task.Attempt
		if calls.Add(1) <= 3 {
			return nil, &worker.SnoozeError{Delay: 10 * time.Millisecond, Reason: "export not ready"}
		}
		if err := worker.ReportProgress(ctx, worker.Progress{Message: "copying part 2 of 5", Done: 2, Total: 5}); err != nil {
			return nil, err
		}
		select {
		case <-release:
			return []byte("exported"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, nil)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		unblock() // a failed test does not wait out the shutdown grace
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	wait := func(what string) {
		t.Helper()
		select {
		case f := <-ends:
			if f.Outcome != worker.OutcomeSnoozed {
				t.Fatalf("%s: the attempt ended %v (%v), want snoozed", what, f.Outcome, f.Err)
			}
		case <-time.After(e2eExitTimeout):
			t.Fatalf("%s: no attempt ended", what)
		}
	}
	for i := range 3 {
		if a := <-runs; a != 1 {
			t.Fatalf("run %d has attempt %d, want 1", i+1, a)
		}
		wait(fmt.Sprintf("snooze %d", i+1))
	}
	if a := <-runs; a != 1 {
		t.Fatalf("the run after three snoozes has attempt %d, want 1", a)
	}
	// The report reaches the server with the heartbeat it brings forward:
	// the first of this lease (the regular ones come every 10s of its 30s
	// window), the snoozed leases having none.
	select {
	case <-beats:
	case <-time.After(e2eExitTimeout):
		t.Fatal("no heartbeat carried the handler's progress")
	}
	code, out := runBin(t, "task", "get", "--addr", srv.url(), res.TaskID)
	if code != 0 {
		t.Fatalf("tenure task get: exit %d\n%s", code, out)
	}
	for _, re := range []string{`(?m)^state\s+LEASED$`, `(?m)^attempt\s+1 of 1$`, `(?m)^progress\s+40% copying part 2 of 5 \(reported `} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("tenure task get while the handler runs does not match %s:\n%s", re, out)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^1\s+snoozed\s.*export not ready$`).FindAllString(out, -1)); n != 3 {
		t.Fatalf("tenure task get lists %d snoozed executions, want 3:\n%s", n, out)
	}
	t.Logf("tenure task get while the handler runs:\n%s", out)

	unblock()
	select {
	case f := <-ends:
		if f.Outcome != worker.OutcomeCompleted {
			t.Fatalf("the last attempt ended %v (%v), want completed", f.Outcome, f.Err)
		}
	case <-time.After(e2eExitTimeout):
		t.Fatal("the last attempt did not end")
	}
	code, out = runBin(t, "task", "get", "--addr", srv.url(), res.TaskID)
	for _, re := range []string{`(?m)^state\s+COMPLETED$`, `(?m)^attempt\s+1 of 1$`, `(?m)^1\s+completed\s`} {
		if code != 0 || !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("tenure task get after the completion does not match %s (exit %d):\n%s", re, code, out)
		}
	}
	t.Logf("tenure task get after the completion:\n%s", out)
}
