package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// e2eEmail and e2eResize are the typed tasks of TestTypedWorkerE2E.
type e2eEmail struct {
	To string `json:"to"`
	N  int    `json:"n"`
}

func (e2eEmail) Kind() string { return "send_email" }

type e2eResize struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (e2eResize) Kind() string { return "resize_image" }

// TestTypedWorkerE2E: against the real binary, a typed worker serving two
// kinds from two queues with one pool works off 10,000 tasks: each
// handler runs once per task of its kind with its arguments decoded, every
// task completes (a result kept for the kind that has one), and a task of
// a kind the worker does not know fails for good on its first attempt,
// its reason naming the kind.
func TestTypedWorkerE2E(t *testing.T) {
	t.Parallel()
	const perKind = 5000
	srv := startServerProc(t, t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c := sdk(t, srv.url())
	for lo := 0; lo < perKind; lo += 500 {
		var reqs []client.SubmitRequest
		for i := lo; i < lo+500; i++ {
			reqs = append(reqs,
				client.SubmitRequest{Args: e2eEmail{To: fmt.Sprintf("user%d@example.com", i), N: i}, Queue: "mail"},
				client.SubmitRequest{Args: e2eResize{Image: fmt.Sprintf("img%d.png", i), Width: i}, Queue: "images"})
		}
		if _, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: reqs}); err != nil {
			t.Fatal(err)
		}
	}
	unknown, err := c.Submit(ctx, client.SubmitRequest{Queue: "images", Kind: "transcode_video", Payload: []byte(`{"video":"a.mp4"}`)})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	emails, resizes := map[int]int{}, map[int]int{}
	w, err := worker.New(c, worker.Options{Queues: []string{"mail", "images"}, Concurrency: 32, StopWhenEmpty: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	worker.Handle(w, func(ctx context.Context, task *worker.Task[e2eEmail]) error {
		if task.Queue != "mail" || task.Args.To != fmt.Sprintf("user%d@example.com", task.Args.N) {
			return worker.Permanent(fmt.Errorf("email task %s: %+v from queue %s", task.ID, task.Args, task.Queue))
		}
		mu.Lock()
		emails[task.Args.N]++
		mu.Unlock()
		return nil
	})
	worker.HandleResult(w, func(ctx context.Context, task *worker.Task[e2eResize]) (string, error) {
		mu.Lock()
		resizes[task.Args.Width]++
		mu.Unlock()
		return fmt.Sprintf("thumbs/%d/%s", task.Args.Width, task.Args.Image), nil
	})
	if err := w.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the worker did not work the queues off within 5 minutes")
	}

	mu.Lock()
	for i := range perKind {
		if emails[i] != 1 || resizes[i] != 1 {
			t.Errorf("task %d: the email handler ran %d times, the resize handler %d; want once each", i, emails[i], resizes[i])
		}
	}
	mu.Unlock()
	for _, q := range []struct {
		name   string
		counts client.TaskCounts
	}{{"mail", client.TaskCounts{Completed: perKind}}, {"images", client.TaskCounts{Completed: perKind, Failed: 1}}} {
		got, err := c.GetQueue(ctx, client.GetQueueRequest{Queue: q.name})
		if err != nil || got.Tasks != q.counts {
			t.Errorf("queue %s: %+v, %v; want %+v", q.name, got.Tasks, err, q.counts)
		}
		t.Logf("queue %s: %d completed, %d failed", q.name, got.Tasks.Completed, got.Tasks.Failed)
	}
	task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: unknown.TaskID})
	if err != nil || task.State != client.TaskStateFailed || task.Attempt != 1 ||
		!strings.Contains(task.FailureReason, `no handler for kind "transcode_video"`) || !strings.Contains(task.FailureReason, "resize_image, send_email") {
		t.Errorf("the task of an unknown kind: %v attempt %d, reason %q, %v; want FAILED on its first attempt, naming its kind and those the worker handles",
			task.State, task.Attempt, task.FailureReason, err)
	}
	t.Logf("the task of kind %q: %v on attempt %d: %s", task.Kind, task.State, task.Attempt, task.FailureReason)
	for tk, err := range c.ListTasks(ctx, client.ListTasksRequest{Queue: "images", State: client.TaskStateCompleted, PageSize: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		var args e2eResize
		var result string
		if json.Unmarshal(tk.Payload, &args) != nil || json.Unmarshal(tk.Result, &result) != nil || result != fmt.Sprintf("thumbs/%d/%s", args.Width, args.Image) {
			t.Errorf("task %s (%s): result %q for %s", tk.ID, tk.Kind, tk.Result, tk.Payload)
		}
		break // one is enough: the counts cover the rest
	}
}

// tasksOf is the tasks of a Lease's answer, with its error.
func tasksOf(r client.LeaseResult, err error) ([]client.LeasedTask, error) { return r.Tasks, err }
