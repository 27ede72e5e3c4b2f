package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/clock"
)

// fakeWorkers answers CompleteBatch (or, with noBatch, only Complete): an
// item whose lease is "lost" fails with failed_precondition, any other
// succeeds. Each call's item count is recorded; while gate is set, each
// call first waits for a value from it.
type fakeWorkers struct {
	tenurev1connect.UnimplementedWorkerServiceHandler
	noBatch bool
	gate    chan struct{}
	arrived chan struct{} // one value per call, on arrival

	mu    sync.Mutex
	calls []int
}

func (f *fakeWorkers) enter(n int) {
	f.mu.Lock()
	f.calls = append(f.calls, n)
	f.mu.Unlock()
	if f.arrived != nil {
		f.arrived <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
}

func (f *fakeWorkers) CompleteBatch(_ context.Context, req *connect.Request[tenurev1.CompleteBatchRequest]) (*connect.Response[tenurev1.CompleteBatchResponse], error) {
	if f.noBatch {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("an older server"))
	}
	f.enter(len(req.Msg.GetItems()))
	out := &tenurev1.CompleteBatchResponse{}
	for _, it := range req.Msg.GetItems() {
		r := &tenurev1.CompleteResult{TaskId: it.GetTaskId()}
		if it.GetLeaseId() == "lost" {
			r.Code, r.Message = connect.CodeFailedPrecondition.String(), "lease lost: "+it.GetTaskId()
		}
		out.Results = append(out.Results, r)
	}
	return connect.NewResponse(out), nil
}

func (f *fakeWorkers) Complete(_ context.Context, req *connect.Request[tenurev1.CompleteRequest]) (*connect.Response[tenurev1.CompleteResponse], error) {
	f.enter(1)
	if req.Msg.GetLeaseId() == "lost" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("lease lost: "+req.Msg.GetTaskId()))
	}
	return connect.NewResponse(&tenurev1.CompleteResponse{}), nil
}

func (f *fakeWorkers) sizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.calls...)
}

func startCompleter(t *testing.T, f *fakeWorkers, max int) *completer {
	t.Helper()
	_, h := tenurev1connect.NewWorkerServiceHandler(f)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := newCompleter(c, max, 100, &logger{base: slog.New(slog.DiscardHandler), clock: clock.Real})
	go k.run(context.Background())
	t.Cleanup(k.stop)
	return k
}

// completeAll completes tasks t<from>..t<to-1> from goroutines of their own;
// task i's lease is "lost" if lost(i). The answers arrive on the channel
// returned, keyed by task.
func completeAll(k *completer, from, to int, lost func(int) bool) <-chan map[string]error {
	out := make(chan map[string]error, 1)
	go func() {
		var mu sync.Mutex
		got := map[string]error{}
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Go(func() {
				lease := "ok"
				if lost(i) {
					lease = "lost"
				}
				id := fmt.Sprint("t", i)
				err := k.complete(context.Background(), client.CompleteItem{TaskID: id, LeaseID: lease})
				mu.Lock()
				got[id] = err
				mu.Unlock()
			})
		}
		wg.Wait()
		out <- got
	}()
	return out
}

// waitQueued waits until n completions wait in k's queue.
func waitQueued(t *testing.T, k *completer, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(k.reqs) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d completions queued, want %d", len(k.reqs), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCompleterCoalesces: while one call is out, later completions queue
// and go together in the next calls, at most max per call; every task gets
// its own answer.
func TestCompleterCoalesces(t *testing.T) {
	f := &fakeWorkers{gate: make(chan struct{}), arrived: make(chan struct{}, 10)}
	k := startCompleter(t, f, 4)
	lost := func(i int) bool { return i%3 == 2 }
	first := completeAll(k, 0, 1, lost)
	<-f.arrived // t0's call is out, held at the gate
	rest := completeAll(k, 1, 10, lost)
	waitQueued(t, k, 9)
	close(f.gate)
	answers := <-first
	for id, err := range <-rest {
		answers[id] = err
	}
	if got, want := f.sizes(), []int{1, 4, 4, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls carried %v items, want %v", got, want)
	}
	for i := range 10 {
		err := answers[fmt.Sprint("t", i)]
		if lost(i) != errors.Is(err, client.ErrLeaseLost) || (!lost(i) && err != nil) {
			t.Errorf("task t%d: %v, want lease lost: %v", i, err, lost(i))
		}
	}
}

// TestCompleterFallsBack: against a server without CompleteBatch every
// completion still gets its own answer, from a Complete call.
func TestCompleterFallsBack(t *testing.T) {
	f := &fakeWorkers{noBatch: true}
	k := startCompleter(t, f, 64)
	lost := func(i int) bool { return i == 3 }
	answers := <-completeAll(k, 0, 8, lost)
	for i := range 8 {
		err := answers[fmt.Sprint("t", i)]
		if lost(i) != errors.Is(err, client.ErrLeaseLost) || (!lost(i) && err != nil) {
			t.Errorf("task t%d: %v, want lease lost: %v", i, err, lost(i))
		}
	}
	if got := f.sizes(); len(got) != 8 {
		t.Errorf("%d Complete calls, want 8", len(got))
	}
}

// TestCompleterSingle: with max 1 every completion is its own Complete
// call.
func TestCompleterSingle(t *testing.T) {
	f := &fakeWorkers{noBatch: true}
	k := startCompleter(t, f, 1)
	answers := <-completeAll(k, 0, 3, func(int) bool { return false })
	if len(answers) != 3 || answers["t0"] != nil || len(f.sizes()) != 3 {
		t.Errorf("answers %v, %d calls; want 3 successful Complete calls", answers, len(f.sizes()))
	}
}
