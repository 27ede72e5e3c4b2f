package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
	"google.golang.org/protobuf/proto"
)

// TestHeartbeatsKeepManyLeases: the leases of many running tasks are all
// heartbeaten (by the worker's one heartbeat scheduler); killing some of
// the tasks ends exactly those handlers' contexts, with a lease-lost cause,
// while the others keep their leases and complete on their first attempt.
func TestHeartbeatsKeepManyLeases(t *testing.T) {
	t.Parallel()
	const keep, kill = 8, 4
	var mu sync.Mutex
	beats := map[string]int{}
	beat := sync.NewCond(&mu)
	url := startServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == tenurev1connect.WorkerServiceHeartbeatProcedure {
				body, err := io.ReadAll(r.Body)
				var req tenurev1.HeartbeatRequest
				if err == nil {
					err = proto.Unmarshal(body, &req)
				}
				if err != nil {
					t.Errorf("reading a Heartbeat request: %v", err)
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				mu.Lock()
				beats[req.GetTaskId()]++
				beat.Broadcast()
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	c := newClient(t, url)
	reqs := make([]client.SubmitRequest, keep+kill)
	for i := range reqs {
		p := "keep"
		if i >= keep {
			p = "kill"
		}
		reqs[i] = client.SubmitRequest{Queue: "beats", Payload: []byte(p), ExecutionWindow: time.Second, Retry: fastRetry}
	}
	ids, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}

	started := make(chan string, keep+kill)
	ended := make(chan string, keep+kill) // "<id> <cause>" of a handler whose ctx ended
	startWorker(t, c, "beats", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		started <- task.ID
		if string(task.Payload) == "kill" {
			<-ctx.Done()
			ended <- task.ID + " " + context.Cause(ctx).Error()
			return nil, ctx.Err()
		}
		// Run until the server has seen two heartbeats for this lease.
		stop := context.AfterFunc(ctx, func() {
			mu.Lock()
			beat.Broadcast()
			mu.Unlock()
		})
		defer stop()
		mu.Lock()
		for beats[task.ID] < 2 && ctx.Err() == nil {
			beat.Wait()
		}
		mu.Unlock()
		if ctx.Err() != nil {
			ended <- task.ID + " " + context.Cause(ctx).Error()
			return nil, ctx.Err()
		}
		return []byte("kept"), nil
	}, opts{Options: worker.Options{Concurrency: keep + kill}})
	for range keep + kill {
		recv(t, started, "the handlers to start")
	}
	for _, id := range ids[keep:] {
		if _, err := c.KillTask(t.Context(), client.KillTaskRequest{TaskID: id.TaskID, Reason: "test kills it"}); err != nil {
			t.Fatal(err)
		}
	}
	lost := map[string]bool{}
	for range kill {
		e := recv(t, ended, "the killed tasks' handlers to see their ctx end")
		id, cause, _ := strings.Cut(e, " ")
		if !strings.Contains(cause, "lease lost") {
			t.Errorf("task %s: ctx ended with cause %q, want a lost lease", id, cause)
		}
		lost[id] = true
	}
	for _, id := range ids[keep:] {
		if !lost[id.TaskID] {
			t.Errorf("killed task %s: its handler's ctx did not end (another one's did)", id.TaskID)
		}
		waitState(t, c, id.TaskID, client.TaskStateDead)
	}
	for _, id := range ids[:keep] {
		task := waitState(t, c, id.TaskID, client.TaskStateCompleted)
		if task.Attempt != 1 || string(task.Result) != "kept" {
			t.Errorf("kept task %s: completed on attempt %d with %q; want attempt 1 with \"kept\"", id.TaskID, task.Attempt, task.Result)
		}
	}
	select {
	case e := <-ended:
		t.Errorf("a kept task's ctx ended: %s", e)
	default:
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids[:keep] {
		if beats[id.TaskID] < 2 {
			t.Errorf("kept task %s: %d heartbeats, want at least 2", id.TaskID, beats[id.TaskID])
		}
	}
	if t.Failed() {
		t.Logf("heartbeats per task: %v", fmt.Sprint(beats))
	}
}
