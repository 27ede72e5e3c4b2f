package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/eventually"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
	"google.golang.org/protobuf/proto"
)

// leaseRecorder wraps the API: it records the max_tasks of each Lease call
// and, if gate is not nil, holds every completion call (Complete or
// CompleteBatch) until gate is closed. With holdSecond, it holds the second
// completion call until a Lease call arrives, or for 250ms: so a worker
// that leases before that call's slot comes back is seen doing so every
// time.
type leaseRecorder struct {
	gate       chan struct{}
	holdSecond bool

	mu        sync.Mutex
	asked     []uint32
	carried   []uint32 // max_tasks of the leases CompleteBatch calls carried
	completes int
}

// readRequest decodes the body of r, a Connect unary call, into msg, and
// leaves the body to be read again.
func readRequest(t *testing.T, r *http.Request, msg proto.Message) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("reading a %s request: %v", r.URL.Path, err)
	}
	if err := proto.Unmarshal(body, msg); err != nil {
		t.Errorf("decoding a %s request: %v", r.URL.Path, err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
}

func (l *leaseRecorder) wrap(t *testing.T) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case tenurev1connect.WorkerServiceLeaseProcedure:
				var req tenurev1.LeaseRequest
				readRequest(t, r, &req)
				l.mu.Lock()
				l.asked = append(l.asked, req.GetMaxTasks())
				l.mu.Unlock()
			case tenurev1connect.WorkerServiceCompleteBatchProcedure, tenurev1connect.WorkerServiceCompleteProcedure:
				var next *tenurev1.LeaseRequest
				if r.URL.Path == tenurev1connect.WorkerServiceCompleteBatchProcedure {
					var req tenurev1.CompleteBatchRequest
					readRequest(t, r, &req)
					next = req.GetLease()
				}
				l.mu.Lock()
				if next != nil {
					l.carried = append(l.carried, next.GetMaxTasks())
				}
				l.completes++
				nth := l.completes
				l.mu.Unlock()
				if l.gate != nil {
					<-l.gate
				}
				leases := len(l.leases())
				if nth == 2 && l.holdSecond {
					for range 250 {
						if len(l.leases()) > leases {
							break
						}
						time.Sleep(time.Millisecond)
					}
				}
			}
			h.ServeHTTP(w, r)
		})
	}
}

func (l *leaseRecorder) completeCalls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.completes
}

func (l *leaseRecorder) carriedLeases() []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.carried)
}

func (l *leaseRecorder) leases() []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.asked)
}

func waitCompleted(t *testing.T, c *client.Client, ids ...string) {
	t.Helper()
	for _, id := range ids {
		waitState(t, c, id, client.TaskStateCompleted)
	}
}

func submitN(t *testing.T, c *client.Client, queue, prefix string, n int) []string {
	t.Helper()
	reqs := make([]client.SubmitRequest, n)
	for i := range reqs {
		reqs[i] = client.SubmitRequest{Queue: queue, Payload: fmt.Appendf(nil, "%s%d", prefix, i)}
	}
	res, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, r := range res {
		ids[i] = r.TaskID
	}
	return ids
}

// TestLeaseAfterBurstAsksForAllFreedSlots: when a worker's tasks finish
// together, the first completion comes back alone and frees one slot while
// the others' completions are still under way. The lease loop does not
// lease for that one slot: it waits for the slots of the tasks that were
// finishing and leases for all of them in one call.
//
// The worker completes one task per call (MaxCompleteBatch 1), so no
// completion call carries a lease and the lease loop leases every task.
// (With leases carried, the slots freed by a burst go to the completion
// calls' leases: TestCompletionCallsCarryLeases. Before, this test ran so
// and passed only because the idle worker's Lease call after the last
// task usually came before the test looked.)
func TestLeaseAfterBurstAsksForAllFreedSlots(t *testing.T) {
	t.Parallel()
	const n = 8
	rec := &leaseRecorder{gate: make(chan struct{}), holdSecond: true}
	url := apitest.Start(t, rec.wrap(t))
	c, err := client.New(url, client.Options{RetryBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ids := submitN(t, c, "burst", "t", 2*n)

	var entered atomic.Int32
	releaseOne, releaseRest := make(chan struct{}), make(chan struct{})
	startWorker(t, c, "burst", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		if i := entered.Add(1); i <= n { // the tasks of the first lease
			release := releaseRest
			if i == 1 {
				release = releaseOne
			}
			select {
			case <-release:
			case <-ctx.Done(): // the test failed: it stops the worker
			}
		}
		return nil, nil
	}, opts{Options: worker.Options{Concurrency: n, MaxCompleteBatch: 1, PollWait: time.Second, ShutdownGrace: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}})
	eventually.True(t, "the first lease's handlers to run", func() bool { return entered.Load() == n })
	// All slots are taken: no Lease call is out. One task finishes first:
	// its completion goes out, and the gate holds it; then the others'.
	// Once all n tasks are in their final report, let the calls through:
	// the recorder holds the second until a Lease call arrives, so a lease
	// for fewer than n slots would be seen.
	close(releaseOne)
	eventually.True(t, "the first completion call", func() bool { return rec.completeCalls() == 1 })
	close(releaseRest)
	// Each task's Complete call (held at the gate) is made once the task
	// is finishing.
	eventually.True(t, "all tasks to be finishing", func() bool { return rec.completeCalls() == n })
	close(rec.gate)
	// The second n tasks are leased only by the lease loop: its second
	// call was made before they completed.
	waitCompleted(t, c, ids...)
	if carried := rec.carriedLeases(); len(carried) != 0 {
		t.Fatalf("completion calls carried leases %v; with MaxCompleteBatch 1 they carry none", carried)
	}
	got := rec.leases()
	if len(got) < 2 || got[0] != n || got[1] != n {
		t.Fatalf("Lease calls asked for %v tasks; want %d, then %d for the slots freed by the burst of completions", got, n, n)
	}
}

// TestFreeSlotLeasedAtOnce: a slot freed while the worker's other tasks
// are still in their handlers (none finishing) is leased for at once, even
// alone: the worker does not wait for more slots to free.
func TestFreeSlotLeasedAtOnce(t *testing.T) {
	t.Parallel()
	rec := &leaseRecorder{}
	url := apitest.Start(t, rec.wrap(t))
	c, err := client.New(url, client.Options{RetryBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	long := submitN(t, c, "single", "long-", 1)[0]
	longRunning, releaseLong := make(chan struct{}), make(chan struct{})
	startWorker(t, c, "single", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		if task.ID == long {
			close(longRunning)
			select {
			case <-releaseLong:
			case <-ctx.Done(): // the test failed: it stops the worker
			}
		}
		return nil, nil
	}, opts{Options: worker.Options{Concurrency: 2, PollWait: time.Second, ShutdownGrace: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}})
	eventually.True(t, "the long task to run", func() bool {
		select {
		case <-longRunning:
			return true
		default:
			return false
		}
	})
	// One slot is free and nothing is finishing: each short task is leased
	// and completed while the long one still runs.
	for i := range 3 {
		waitCompleted(t, c, submitN(t, c, "single", fmt.Sprint("short-", i, "-"), 1)...)
	}
	close(releaseLong)
	waitCompleted(t, c, long)
	got := rec.leases()
	if len(got) < 4 || got[0] != 2 || slices.ContainsFunc(got[1:4], func(n uint32) bool { return n != 1 }) {
		t.Fatalf("Lease calls asked for %v tasks; want 2 (idle), then 1 for each short task", got)
	}
}

// TestCompletionCallsCarryLeases: a busy worker's completion calls carry
// its next leases, so it makes Lease calls only to start and when a
// carried lease comes back short; a task leased ahead starts only once a
// slot is free (a task holds its slot until its middleware returned), and
// every task runs once.
func TestCompletionCallsCarryLeases(t *testing.T) {
	t.Parallel()
	const n, m = 8, 200
	rec := &leaseRecorder{}
	url := apitest.Start(t, rec.wrap(t))
	c, err := client.New(url, client.Options{RetryBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ids := submitN(t, c, "carry", "t", m)
	var mu sync.Mutex
	handled := map[string]int{}
	var active, most atomic.Int32
	startWorker(t, c, "carry", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		a := active.Add(1)
		for cur := most.Load(); a > cur && !most.CompareAndSwap(cur, a); cur = most.Load() {
		}
		mu.Lock()
		handled[task.ID]++
		mu.Unlock()
		return nil, nil
	}, opts{Options: worker.Options{Concurrency: n, PollWait: time.Second, ShutdownGrace: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}, OnFinish: func(*client.LeasedTask, worker.Finish) { active.Add(-1) }})
	waitCompleted(t, c, ids...)
	mu.Lock()
	for _, id := range ids {
		if handled[id] != 1 {
			t.Errorf("task %s handled %d times, want once", id, handled[id])
		}
	}
	mu.Unlock()
	if got := most.Load(); got > n {
		t.Errorf("%d tasks between handler and OnFinish at once; Concurrency is %d", got, n)
	}
	carried, leases := rec.carriedLeases(), rec.leases()
	if len(carried) == 0 || len(leases) > m/16 {
		t.Errorf("%d Lease calls %v and %d completion calls carrying a lease; want the leases carried, and few Lease calls", len(leases), leases, len(carried))
	}
}

// TestCarriedLeaseIgnored: a server older than carried leases answers none
// (it drops the field it does not know); the slots promised to them come
// back, and the lease loop leases every task all the same.
func TestCarriedLeaseIgnored(t *testing.T) {
	t.Parallel()
	const m = 100
	url := apitest.Start(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == tenurev1connect.WorkerServiceCompleteBatchProcedure {
				var req tenurev1.CompleteBatchRequest
				readRequest(t, r, &req)
				req.Lease = nil
				body, err := proto.Marshal(&req)
				if err != nil {
					t.Error(err)
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				r.ContentLength = int64(len(body))
			}
			h.ServeHTTP(w, r)
		})
	})
	c, err := client.New(url, client.Options{RetryBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ids := submitN(t, c, "older", "t", m)
	var handled atomic.Int32
	startWorker(t, c, "older", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		handled.Add(1)
		return nil, nil
	}, opts{Options: worker.Options{Concurrency: 8, PollWait: time.Second, ShutdownGrace: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}})
	waitCompleted(t, c, ids...)
	if got := handled.Load(); got != m {
		t.Errorf("%d handler runs for %d tasks", got, m)
	}
}
