package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// finished is what the middleware heard of one attempt.
type finished struct {
	task    string
	attempt uint32
	f       worker.Finish
}

// TestFinishOutcomes: middleware hears each attempt's end as the server
// decided it: a failure with attempts left is retried, the last attempt's
// failure and a Permanent error fail the task for good, a success
// completes it.
func TestFinishOutcomes(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	flaky := submit(t, c, client.SubmitRequest{Queue: "outcomes", Payload: []byte("flaky"), Retry: fastRetry})
	perm := submit(t, c, client.SubmitRequest{Queue: "outcomes", Payload: []byte("perm"), Retry: fastRetry})
	ok := submit(t, c, client.SubmitRequest{Queue: "outcomes", Payload: []byte("ok")})
	ends := make(chan finished, 10)
	startWorker(t, c, "outcomes", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		switch string(task.Payload) {
		case "flaky":
			return nil, errors.New("downstream said no")
		case "perm":
			return nil, worker.Permanent(errors.New("bad input"))
		}
		return []byte("done"), nil
	}, opts{OnFinish: func(task *client.LeasedTask, f worker.Finish) {
		ends <- finished{task.ID, task.Attempt, f}
	}})
	for _, id := range []string{flaky, perm} {
		waitState(t, c, id, client.TaskStateFailed)
	}
	waitState(t, c, ok, client.TaskStateCompleted)

	got := map[string][]string{}
	for range 5 { // flaky 3, perm 1, ok 1
		e := recv(t, ends, "an attempt's end")
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
