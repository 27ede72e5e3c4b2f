package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/worker"
)

// finished is what OnFinish reported for one attempt.
type finished struct {
	task    string
	attempt uint32
	f       worker.Finish
}

// TestOnFinishOutcomes: OnFinish reports each attempt's end as the server
// decided it: a failure with attempts left is retried, the last attempt's
// failure and a Permanent error fail the task for good, a success
// completes it.
func TestOnFinishOutcomes(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	flaky := submit(t, c, client.SubmitRequest{Queue: "outcomes", Payload: []byte("flaky"), Retry: fastRetry})
	perm := submit(t, c, client.SubmitRequest{Queue: "outcomes", Payload: []byte("perm"), Retry: fastRetry})
	ok := submit(t, c, client.SubmitRequest{Queue: "outcomes", Payload: []byte("ok")})
	ends := make(chan finished, 10)
	startWorker(t, c, "outcomes", func(ctx context.Context, task *worker.Task) ([]byte, error) {
		switch string(task.Payload) {
		case "flaky":
			return nil, errors.New("downstream said no")
		case "perm":
			return nil, worker.Permanent(errors.New("bad input"))
		}
		return []byte("done"), nil
	}, worker.Options{OnFinish: func(task *worker.Task, f worker.Finish) {
		ends <- finished{task.ID, task.Attempt, f}
	}})
	for _, id := range []string{flaky, perm} {
		waitState(t, c, id, client.TaskStateFailed)
	}
	waitState(t, c, ok, client.TaskStateCompleted)

	got := map[string][]string{}
	for range 5 { // flaky 3, perm 1, ok 1
		e := recv(t, ends, "an OnFinish call")
		got[e.task] = append(got[e.task], e.f.Outcome.String())
		switch e.f.Outcome {
		case worker.OutcomeRetrying:
			if e.f.RetryAt.IsZero() || e.f.Err == nil {
				t.Errorf("task %s attempt %d: retrying with RetryAt %v and Err %v; want both set", e.task, e.attempt, e.f.RetryAt, e.f.Err)
			}
		case worker.OutcomeFailed:
			if e.f.Err == nil || !strings.Contains(e.f.Err.Error(), map[string]string{flaky: "downstream", perm: "bad input"}[e.task]) {
				t.Errorf("task %s: failed with Err %v; want the handler's error", e.task, e.f.Err)
			}
		case worker.OutcomeCompleted:
			if e.f.Err != nil {
				t.Errorf("task %s: completed with Err %v", e.task, e.f.Err)
			}
		}
	}
	want := map[string]string{flaky: "[retrying retrying failed]", perm: "[failed]", ok: "[completed]"}
	for id, w := range want {
		if g := strings.Join(got[id], " "); "["+g+"]" != w {
			t.Errorf("task %s: outcomes [%s], want %s", id, g, w)
		}
	}
}

// TestOnFinishTookOnTheClock: Finish.Took is measured on Options.Clock, from
// the lease's arrival to the end of the report: a handler that holds its
// task while the fake clock moves 3s took 3s, whatever the real time.
func TestOnFinishTookOnTheClock(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	_, c := serveOneLease(t, fake)
	started, release := make(chan struct{}), make(chan struct{})
	ends := make(chan worker.Finish, 1)
	startWorker(t, c, "q", func(ctx context.Context, task *worker.Task) ([]byte, error) {
		close(started)
		<-release
		return []byte("done"), nil
	}, worker.Options{Clock: fake, Logger: slog.New(slog.DiscardHandler), OnFinish: func(_ *worker.Task, f worker.Finish) { ends <- f }})
	recv(t, started, "the handler to start")
	fake.Advance(3 * time.Second)
	close(release)
	f := recv(t, ends, "OnFinish")
	if f.Outcome != worker.OutcomeCompleted || f.Took != 3*time.Second {
		t.Fatalf("OnFinish: %v after %v; want completed after 3s on the fake clock", f.Outcome, f.Took)
	}
}
