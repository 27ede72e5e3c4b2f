package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/worker"
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
	ids, err := c.SubmitBatchIDs(t.Context(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]int{}
	startWorker(t, c, "many", func(ctx context.Context, task *worker.Task) ([]byte, error) {
		mu.Lock()
		handled[task.ID]++
		mu.Unlock()
		return append([]byte("done "), task.Payload...), nil
	}, worker.Options{Concurrency: 64, MaxCompleteBatch: 16})
	for i, id := range ids {
		task := waitState(t, c, id.TaskID, tenurev1.TaskState_TASK_STATE_COMPLETED)
		if want := fmt.Sprint("done ", i); string(task.GetResult()) != want {
			t.Errorf("task %d: result %q, want %q", i, task.GetResult(), want)
		}
		hist, err := c.TaskHistory(t.Context(), id.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range hist {
			types = append(types, e.GetType())
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
			startWorker(t, c, "start", func(ctx context.Context, task *worker.Task) ([]byte, error) {
				close(running)
				<-release
				return nil, nil
			}, worker.Options{ReportStart: report})
			recv(t, running, "the handler to start")
			task, err := c.GetTask(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			want := tenurev1.ExecutionStatus_EXECUTION_STATUS_LEASED
			if report {
				want = tenurev1.ExecutionStatus_EXECUTION_STATUS_IN_PROGRESS
			}
			if ex := task.GetExecutions(); len(ex) != 1 || ex[0].GetStatus() != want {
				t.Errorf("executions %v while the handler runs, want one %s", ex, want)
			}
			close(release)
			waitState(t, c, id, tenurev1.TaskState_TASK_STATE_COMPLETED)
		})
	}
}
