package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
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
	c := newJSONClients(srv)
	defer c.close()
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
	snoozed := regexp.MustCompile(`(?m)^1\s+SNOOZED\s+w1\s.*upstream busy$`)
	out := get(progress, regexp.MustCompile(`(?m)^attempt\s+1 of 1$`), regexp.MustCompile(`(?m)^traceparent\s+00-4bf92f`), snoozed)
	if n := len(snoozed.FindAllString(out, -1)); n != 3 {
		t.Fatalf("tenure task get lists %d snoozed executions, want 3:\n%s", n, out)
	}

	srv.kill9(t)
	srv = startServerProc(t, dir)
	c = newJSONClients(srv)
	defer c.close()
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
