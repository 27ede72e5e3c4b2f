package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// TestCoalescedCompletionsExactlyOnce: many tasks finishing at once are
// completed through coalesced CompleteBatch calls; every task is handled
// once, completes with its own result, and its history holds one
// completion and no refused action.
func TestCoalescedCompletionsExactlyOnce(t *testing.T) {
	t.Parallel()
	const m = 300
	c := newClient(t, startServer(t, nil))
	reqs := make([]client.SubmitRequest, m)
	for i := range reqs {
		reqs[i] = client.SubmitRequest{Queue: "many", Payload: fmt.Appendf(nil, "%d", i)}
	}
	ids, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]int{}
	startWorker(t, c, "many", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		mu.Lock()
		handled[task.ID]++
		mu.Unlock()
		return append([]byte("done "), task.Payload...), nil
	}, opts{Options: worker.Options{Concurrency: 64, MaxCompleteBatch: 16}})
	for i, id := range ids {
		task := waitState(t, c, id.TaskID, client.TaskStateCompleted)
		if want := fmt.Sprint("done ", i); string(task.Result) != want {
			t.Errorf("task %d: result %q, want %q", i, task.Result, want)
		}
		hist, err := c.GetTaskHistory(t.Context(), client.GetTaskHistoryRequest{TaskID: id.TaskID})
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range hist {
			types = append(types, e.Type)
		}
		if fmt.Sprint(types) != "[TaskCreated LeaseGranted TaskCompleted]" {
			t.Errorf("task %d: history %v", i, types)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if handled[id.TaskID] != 1 {
			t.Errorf("task %s handled %d times", id.TaskID, handled[id.TaskID])
		}
	}
}

// TestReportStart: with ReportStart the execution shows IN_PROGRESS while
// the handler runs; without it, LEASED.
func TestReportStart(t *testing.T) {
	t.Parallel()
	for _, report := range []bool{false, true} {
		t.Run(fmt.Sprint(report), func(t *testing.T) {
			t.Parallel()
			c := newClient(t, startServer(t, nil))
			id := submit(t, c, client.SubmitRequest{Queue: "start"})
			running, release := make(chan struct{}), make(chan struct{})
			startWorker(t, c, "start", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
				close(running)
				<-release
				return nil, nil
			}, opts{Options: worker.Options{ReportStart: report}})
			recv(t, running, "the handler to start")
			task, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: id})
			if err != nil {
				t.Fatal(err)
			}
			want := client.ExecutionStatusLeased
			if report {
				want = client.ExecutionStatusInProgress
			}
			if ex := task.Executions; len(ex) != 1 || ex[0].Status != want {
				t.Errorf("executions %+v while the handler runs, want one %s", ex, want)
			}
			close(release)
			waitState(t, c, id, client.TaskStateCompleted)
		})
	}
}
