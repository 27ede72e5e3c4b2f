package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// startServer runs a real node behind the API (see apitest.Start).
func startServer(t *testing.T, wrap func(http.Handler) http.Handler) string {
	return apitest.Start(t, wrap)
}

func newClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.Options{RetryBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return c
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// runningWorker is a Worker running in a goroutine of the test.
type runningWorker struct {
	cancel context.CancelFunc // ends Run's ctx
	wait   func() error       // waits for Run to return, once; returns its error
}

// stop ends Run's ctx and waits for Run to return.
func (r *runningWorker) stop() error {
	r.cancel()
	return r.wait()
}

// opts is what startWorker runs a Worker with: its options, the effects
// of its handler (nil: none), and a function that hears how each attempt
// ended (a middleware calls it).
type opts struct {
	worker.Options
	Effects  worker.Effects
	OnFinish func(*client.LeasedTask, worker.Finish)
}

// startWorker runs a Worker of queue, whose handler h (with o.Effects)
// takes every kind, until stopped (at the latest when the test ends).
func startWorker(t *testing.T, c *client.Client, queue string, h worker.Handler, o opts) *runningWorker {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	if o.PollWait == 0 {
		o.PollWait = time.Second
	}
	w, err := newWorker(c, queue, h, o)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	r := &runningWorker{cancel: cancel, wait: sync.OnceValue(func() error { return <-errc })}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// newWorker returns a Worker of queue whose handler h (with o.Effects)
// takes every kind.
func newWorker(c *client.Client, queue string, h worker.Handler, o opts) (*worker.Worker, error) {
	o.Queues = []string{queue}
	if o.OnFinish != nil {
		o.Middleware = append(o.Middleware, onFinish(o.OnFinish))
	}
	w, err := worker.New(c, o.Options)
	if err != nil {
		return nil, err
	}
	worker.HandleOther(w, h, o.Effects)
	return w, nil
}

// onFinish is a middleware that calls fn with how each attempt ended.
func onFinish(fn func(*client.LeasedTask, worker.Finish)) worker.Middleware {
	return func(ctx context.Context, t *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
		f := next(ctx)
		fn(t, f)
		return f
	}
}

// waitFor polls GetTask until cond holds, for at most 30s.
func waitFor(t *testing.T, c *client.Client, taskID, what string, cond func(*client.Task) bool) *client.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), eventually.Deadline)
	defer cancel()
	var task *client.Task
	eventually.NoError(t, "task "+taskID+" to be "+what, func() error {
		got, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: taskID})
		if err != nil {
			return err
		}
		if !cond(got) {
			return fmt.Errorf("last answer %+v", got)
		}
		task = got
		return nil
	})
	return task
}

func waitState(t *testing.T, c *client.Client, taskID string, s client.TaskState) *client.Task {
	t.Helper()
	return waitFor(t, c, taskID, s.String(), func(task *client.Task) bool { return task.State == s })
}

// recv receives from ch, failing the test after 30s.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

func submit(t *testing.T, c *client.Client, req client.SubmitRequest) string {
	t.Helper()
	res, err := c.Submit(t.Context(), req)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return res.TaskID
}

// ledger records effects keyed by task id.
type ledger struct {
	mu      sync.Mutex
	count   map[string]int
	results map[string]string
	tokens  map[string]worker.FencingToken
	tasks   map[string]client.LeasedTask
}

func newLedger() *ledger {
	return &ledger{count: map[string]int{}, results: map[string]string{}, tokens: map[string]worker.FencingToken{}, tasks: map[string]client.LeasedTask{}}
}

func (l *ledger) apply(t *worker.Task[[]byte], result []byte, tok worker.FencingToken) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count[tok.TaskID]++
	l.results[tok.TaskID] = string(result)
	l.tokens[tok.TaskID] = tok
	l.tasks[tok.TaskID] = *t.LeasedTask
}

func (l *ledger) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.count))
	for k, v := range l.count {
		out[k] = v
	}
	return out
}

// tasksOf is the tasks of a Lease's answer, with its error.
func tasksOf(r client.LeaseResult, err error) ([]client.LeasedTask, error) { return r.Tasks, err }
