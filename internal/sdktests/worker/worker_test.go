package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

var fastRetry = &client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}

// TestHappyPath: N workers' slots process M tasks; each task's effect is
// applied exactly once and each handler runs once; no more than N handlers
// run at once.
func TestHappyPath(t *testing.T) {
	t.Parallel()
	const n, m = 8, 60
	c := newClient(t, startServer(t, nil))
	ids := make([]string, m)
	reqs := make([]client.SubmitRequest, m)
	for i := range reqs {
		reqs[i] = client.SubmitRequest{Queue: "happy", Payload: fmt.Appendf(nil, "task-%d", i), Retry: fastRetry}
	}
	res, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		ids[i] = r.TaskID
	}

	var mu sync.Mutex
	handled := map[string]int{}
	var running, maxRunning atomic.Int32
	l := newLedger()
	effects := make(chan string, m)
	startWorker(t, c, "happy", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		r := running.Add(1)
		defer running.Add(-1)
		for {
			cur := maxRunning.Load()
			if r <= cur || maxRunning.CompareAndSwap(cur, r) {
				break
			}
		}
		mu.Lock()
		handled[task.ID]++
		mu.Unlock()
		return bytes.ToUpper(task.Payload), nil
	}, opts{Options: worker.Options{Concurrency: n}, Effects: func(ctx context.Context, task *worker.Task[[]byte], result []byte, tok worker.FencingToken) error {
		l.apply(task, result, tok)
		effects <- tok.TaskID
		return nil
	}})
	for range m {
		recv(t, effects, "effects")
	}
	for i, id := range ids {
		task := waitState(t, c, id, client.TaskStateCompleted)
		if want := fmt.Sprintf("TASK-%d", i); string(task.Result) != want {
			t.Errorf("task %s result %q, want %q", id, task.Result, want)
		}
	}
	counts := l.snapshot()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if counts[id] != 1 || handled[id] != 1 {
			t.Errorf("task %s: %d effects and %d handler runs, want 1 and 1", id, counts[id], handled[id])
		}
		if tok := l.tokens[id]; tok.Attempt != 1 {
			t.Errorf("task %s: fencing token %+v, want attempt 1", id, tok)
		}
	}
	if len(counts) != m {
		t.Errorf("%d tasks had effects, want %d", len(counts), m)
	}
	if got := maxRunning.Load(); got > n {
		t.Errorf("%d handlers ran at once; Concurrency is %d", got, n)
	}
}

// TestCompleteWithoutEffects: with no Effects the result is completed in
// one call (no separate commit record).
func TestCompleteWithoutEffects(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	id := submit(t, c, client.SubmitRequest{Queue: "plain", Payload: []byte("x")})
	startWorker(t, c, "plain", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		return []byte("done:" + string(task.Payload)), nil
	}, opts{})
	task := waitState(t, c, id, client.TaskStateCompleted)
	if string(task.Result) != "done:x" {
		t.Errorf("result %q, want done:x", task.Result)
	}
	hist, err := c.GetTaskHistory(t.Context(), client.GetTaskHistoryRequest{TaskID: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		if e.Type == "TaskCommitted" {
			t.Errorf("history has a TaskCommitted record; want Complete alone")
		}
	}
}

// TestHandlerErrorRetriedThenFailed: a failing handler runs once per
// attempt of the policy, then the task is FAILED; no effect is applied.
func TestHandlerErrorRetriedThenFailed(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	id := submit(t, c, client.SubmitRequest{Queue: "flaky", Retry: fastRetry})
	attempts := make(chan uint32, 10)
	startWorker(t, c, "flaky", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		attempts <- task.Attempt
		return nil, fmt.Errorf("attempt %d: downstream said no", task.Attempt)
	}, opts{Effects: func(context.Context, *worker.Task[[]byte], []byte, worker.FencingToken) error {
		t.Errorf("effects ran for a failed task")
		return nil
	}})
	task := waitState(t, c, id, client.TaskStateFailed)
	close(attempts)
	var got []uint32
	for a := range attempts {
		got = append(got, a)
	}
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("handler ran for attempts %v, want [1 2 3]", got)
	}
	if !strings.Contains(task.FailureReason, "attempt 3: downstream said no") {
		t.Errorf("failure reason %q, want the last handler error", task.FailureReason)
	}
}

// TestPermanent: a Permanent error fails the task after one attempt.
func TestPermanent(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	id := submit(t, c, client.SubmitRequest{Queue: "perm", Retry: &client.RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Millisecond}})
	var calls atomic.Int32
	startWorker(t, c, "perm", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		calls.Add(1)
		return nil, worker.Permanent(errors.New("bad input"))
	}, opts{})
	task := waitState(t, c, id, client.TaskStateFailed)
	if task.Attempt != 1 || calls.Load() != 1 {
		t.Errorf("FAILED after %d attempts and %d handler runs, want 1 and 1", task.Attempt, calls.Load())
	}
	if !strings.Contains(task.FailureReason, "bad input") {
		t.Errorf("failure reason %q, want the handler's error", task.FailureReason)
	}
}

// TestHandlerPanic: a panic fails the attempt (not permanently).
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	id := submit(t, c, client.SubmitRequest{Queue: "panic", Retry: fastRetry})
	startWorker(t, c, "panic", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		if task.Attempt == 1 {
			panic("nil map")
		}
		return []byte("ok"), nil
	}, opts{})
	task := waitState(t, c, id, client.TaskStateCompleted)
	if task.Attempt != 2 || !strings.Contains(task.Executions[0].Reason, "handler panicked: nil map") {
		t.Errorf("task %+v; want completed on attempt 2 after a panic on attempt 1", task)
	}
}

// TestLeaseLostCancelsHandler: killing the task makes the next heartbeat
// fail; the handler's ctx ends, and its (successful) result is discarded.
func TestLeaseLostCancelsHandler(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	id := submit(t, c, client.SubmitRequest{Queue: "kill", ExecutionWindow: 300 * time.Millisecond})
	started, sawDone := make(chan struct{}), make(chan struct{})
	var effects atomic.Int32
	startWorker(t, c, "kill", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		close(started)
		<-ctx.Done()
		close(sawDone)
		return []byte("too late"), nil
	}, opts{Effects: func(context.Context, *worker.Task[[]byte], []byte, worker.FencingToken) error {
		effects.Add(1)
		return nil
	}})
	recv(t, started, "the handler to start")
	if _, err := c.KillTask(t.Context(), client.KillTaskRequest{TaskID: id, Reason: "test kills it"}); err != nil {
		t.Fatal(err)
	}
	recv(t, sawDone, "the handler's ctx to end")
	task := waitState(t, c, id, client.TaskStateDead)
	if effects.Load() != 0 || len(task.Result) != 0 {
		t.Errorf("after a lost lease: %d effects, result %q; want none", effects.Load(), task.Result)
	}
}

// TestLocalExpiryCancelsHandler: when no heartbeat gets through, the
// handler's ctx ends at the lease's expiry (less the margin) even though no
// server said so; the task is retried and completes on attempt 2, with one
// effect.
func TestLocalExpiryCancelsHandler(t *testing.T) {
	t.Parallel()
	var blockHeartbeats atomic.Bool
	blockHeartbeats.Store(true)
	url := startServer(t, func(h http.Handler) http.Handler {
		ew := connect.NewErrorWriter()
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == tenurev1connect.WorkerServiceHeartbeatProcedure && blockHeartbeats.Load() {
				ew.Write(w, r, connect.NewError(connect.CodeUnavailable, errors.New("injected by the test")))
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	c := newClient(t, url)
	id := submit(t, c, client.SubmitRequest{Queue: "silent", ExecutionWindow: 200 * time.Millisecond, Retry: fastRetry})
	sawDone := make(chan uint32, 1)
	l := newLedger()
	startWorker(t, c, "silent", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		if task.Attempt == 1 {
			<-ctx.Done()
			blockHeartbeats.Store(false)
			sawDone <- task.Attempt
		}
		return fmt.Appendf(nil, "attempt %d", task.Attempt), nil
	}, opts{Effects: func(ctx context.Context, task *worker.Task[[]byte], result []byte, tok worker.FencingToken) error {
		l.apply(task, result, tok)
		return nil
	}})
	recv(t, sawDone, "the handler's ctx to end")
	task := waitState(t, c, id, client.TaskStateCompleted)
	if got := l.snapshot()[id]; got != 1 || l.results[id] != "attempt 2" || string(task.Result) != "attempt 2" {
		t.Errorf("%d effects with result %q, task result %q; want 1 effect of attempt 2", got, l.results[id], task.Result)
	}
}

// TestFinalisation: a task committed by a lease that then expired is
// finalised by the worker: Effects runs once with the committed result and
// the committing attempt's token, the task completes, and the handler
// never runs.
func TestFinalisation(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	ctx := t.Context()
	// The window applies to the finalisation lease too: 300ms leaves room
	// for heartbeats under the race detector and parallel tests.
	id := submit(t, c, client.SubmitRequest{Queue: "fin", ExecutionWindow: 300 * time.Millisecond, Retry: fastRetry})
	leased, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "crashed", Queue: "fin", Wait: time.Second}))
	if err != nil || len(leased) != 1 {
		t.Fatalf("Lease: %v, %v", leased, err)
	}
	if _, err := c.Commit(ctx, client.CommitRequest{TaskID: id, LeaseID: leased[0].LeaseID, Result: []byte("committed result")}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	// No Complete: the lease expires with the task COMMITTED.
	l := newLedger()
	var handlerRuns atomic.Int32
	startWorker(t, c, "fin", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		handlerRuns.Add(1)
		return []byte("re-executed"), nil
	}, opts{Effects: func(ctx context.Context, task *worker.Task[[]byte], result []byte, tok worker.FencingToken) error {
		l.apply(task, result, tok)
		return nil
	}})
	task := waitState(t, c, id, client.TaskStateCompleted)
	if string(task.Result) != "committed result" {
		t.Errorf("task result %q, want the committed one", task.Result)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count[id] != 1 || l.results[id] != "committed result" || l.tokens[id] != (worker.FencingToken{TaskID: id, Attempt: 1}) {
		t.Errorf("effects: %d runs, result %q, token %+v; want 1 run of the committed result with token {%s 1}", l.count[id], l.results[id], l.tokens[id], id)
	}
	if ft := l.tasks[id]; !ft.Committed || string(ft.CommittedResult) != "committed result" || ft.Attempt != 2 {
		t.Errorf("Effects saw task %+v; want a finalisation lease (attempt 2) with the committed result", ft)
	}
	if handlerRuns.Load() != 0 {
		t.Errorf("the handler ran %d times on a committed task; want 0", handlerRuns.Load())
	}
}

// TestEffectsFailureLeavesCommitted: Effects fails on every try of the
// first lease; the task stays COMMITTED, its lease expires, and a
// finalisation lease applies the effect; the handler ran once.
func TestEffectsFailureLeavesCommitted(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	// A window long enough for the three tries (100ms + 200ms of backoff)
	// to run under heartbeats.
	id := submit(t, c, client.SubmitRequest{Queue: "fx", ExecutionWindow: time.Second, Retry: fastRetry})
	var handlerRuns, tries atomic.Int32
	l := newLedger()
	startWorker(t, c, "fx", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		handlerRuns.Add(1)
		return []byte("r"), nil
	}, opts{Effects: func(ctx context.Context, task *worker.Task[[]byte], result []byte, tok worker.FencingToken) error {
		if !task.Committed {
			tries.Add(1)
			return errors.New("downstream is down")
		}
		l.apply(task, result, tok)
		return nil
	}})
	waitState(t, c, id, client.TaskStateCompleted)
	// Three tries unless the lease was lost in between (a stalled
	// heartbeat under load), which ends the tries early.
	if handlerRuns.Load() != 1 || tries.Load() < 1 || tries.Load() > 3 || l.snapshot()[id] != 1 {
		t.Errorf("handler runs %d, failed effect tries %d, applied effects %d; want 1, 1..3, 1", handlerRuns.Load(), tries.Load(), l.snapshot()[id])
	}
}

// TestShutdownWaitsForRunning: at shutdown the worker stops leasing and
// lets a running task finish within the grace.
func TestShutdownWaitsForRunning(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	first := submit(t, c, client.SubmitRequest{Queue: "drain", Payload: []byte("1")})
	second := submit(t, c, client.SubmitRequest{Queue: "drain", Payload: []byte("2")})
	started, release := make(chan struct{}), make(chan struct{})
	w := startWorker(t, c, "drain", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		close(started) // a second call would panic: only one task may run
		<-release
		return []byte("finished"), ctx.Err()
	}, opts{Options: worker.Options{ShutdownGrace: time.Hour}})
	recv(t, started, "the handler to start")
	// Shut down while the handler runs, then let it finish: it completes,
	// and its freed slot leases nothing more.
	w.cancel()
	close(release)
	if err := w.wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	task := waitState(t, c, first, client.TaskStateCompleted)
	if string(task.Result) != "finished" {
		t.Errorf("first task result %q, want finished", task.Result)
	}
	if task, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: second}); err != nil || task.State != client.TaskStateWaiting || task.Attempt != 0 {
		t.Errorf("second task after shutdown: %+v, %v; want WAITING, never leased", task, err)
	}
}

// TestShutdownFailsAfterGrace: a handler still running when the grace ends
// sees its ctx cancelled and its task is failed (retryable) with the reason
// "worker shutting down".
func TestShutdownFailsAfterGrace(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	id := submit(t, c, client.SubmitRequest{Queue: "grace", Retry: &client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Hour}})
	started, sawDone := make(chan struct{}), make(chan struct{})
	w := startWorker(t, c, "grace", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		close(started)
		<-ctx.Done()
		close(sawDone)
		return nil, ctx.Err()
	}, opts{Options: worker.Options{ShutdownGrace: 10 * time.Millisecond}})
	recv(t, started, "the handler to start")
	if err := w.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	recv(t, sawDone, "the handler's ctx to end")
	task, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: id})
	if err != nil {
		t.Fatal(err)
	}
	ex := task.Executions
	if task.State != client.TaskStateWaiting || len(ex) != 1 ||
		ex[0].Status != client.ExecutionStatusAborted || ex[0].Reason != "worker shutting down" {
		t.Errorf("task after shutdown: %+v; want WAITING with attempt 1 aborted by \"worker shutting down\"", task)
	}
}

// TestRunStopsOnInvalidLease: a lease request the server rejects as invalid
// ends Run with the server's error instead of retrying forever.
func TestRunStopsOnInvalidLease(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	w, err := newWorker(c, "q", func(context.Context, *worker.Task[[]byte]) ([]byte, error) { return nil, nil },
		opts{Options: worker.Options{Namespace: "bad\x00name", Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Run(t.Context())
	var e *client.Error
	if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &e) || e.Field != "namespace" {
		t.Fatalf("Run: %v; want the server's invalid argument naming the namespace", err)
	}
}

// TestStopWhenEmpty: a worker with StopWhenEmpty works off what is due and
// then Run returns on its own, with every task completed; on an empty
// queue it returns at once. A task delayed into the future is left
// waiting.
func TestStopWhenEmpty(t *testing.T) {
	t.Parallel()
	c := newClient(t, startServer(t, nil))
	var ids []string
	for i := range 5 {
		ids = append(ids, submit(t, c, client.SubmitRequest{Queue: "batch", Payload: []byte{byte('a' + i)}}))
	}
	later := submit(t, c, client.SubmitRequest{Queue: "batch", NotBefore: time.Now().Add(time.Hour)})
	for _, concurrency := range []int{1, 3} {
		w, err := newWorker(c, "batch", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
			return task.Payload, nil
		}, opts{Options: worker.Options{StopWhenEmpty: true, Concurrency: concurrency, PollWait: time.Second, Logger: testLogger(t)}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err = w.Run(ctx)
		stoppedByItself := ctx.Err() == nil
		cancel()
		if err != nil || !stoppedByItself {
			t.Fatalf("concurrency %d: Run returned %v, by itself: %v; want nil, before its ctx ended", concurrency, err, stoppedByItself)
		}
	}
	for _, id := range ids {
		if task, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: id}); err != nil || task.State != client.TaskStateCompleted {
			t.Errorf("task %s after the worker stopped: %v %v, want COMPLETED", id, task.State, err)
		}
	}
	if task, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: later}); err != nil || task.State != client.TaskStateWaiting || task.Attempt != 0 {
		t.Errorf("the delayed task: %v attempt %d %v, want WAITING, never leased", task.State, task.Attempt, err)
	}
}
