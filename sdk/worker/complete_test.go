//go:build go1.25

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
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
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
	// A CompleteBatch that carries a lease leases up to supply tasks
	// (l0, l1, ...); with refuseLease it fails as invalid_argument instead,
	// with nothing done.
	refuseLease bool

	mu      sync.Mutex
	calls   []int
	carried []int // max_tasks of each lease a call carried
	supply  int
	leased  int
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
	if next := req.Msg.GetLease(); next != nil {
		if f.refuseLease {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("lease: the queue is refused"))
		}
		f.mu.Lock()
		f.carried = append(f.carried, int(next.GetMaxTasks()))
		for range min(int(next.GetMaxTasks()), f.supply-f.leased) {
			out.Leased = append(out.Leased, &tenurev1.LeasedTask{TaskId: fmt.Sprint("l", f.leased), LeaseId: "ok", Attempt: 1})
			f.leased++
		}
		f.mu.Unlock()
	}
	for i, it := range req.Msg.GetItems() {
		if it.GetLeaseId() == "lost" {
			out.Failed = append(out.Failed, &tenurev1.CompleteResult{TaskId: it.GetTaskId(), Index: uint32(i),
				Code: connect.CodeFailedPrecondition.String(), Message: "lease lost: " + it.GetTaskId()})
		}
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

func (f *fakeWorkers) carriedLeases() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.carried...)
}

func (f *fakeWorkers) sizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.calls...)
}

func startCompleter(t *testing.T, f *fakeWorkers, max int) *completer {
	return startCarrier(t, f, max, nil)
}

// startCarrier is startCompleter whose calls carry leases for s (nil:
// none).
func startCarrier(t *testing.T, f *fakeWorkers, max int, s *slots) *completer {
	t.Helper()
	_, h := tenurev1connect.NewWorkerServiceHandler(f)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := newCompleter(c, max, 100, &logger{base: slog.New(slog.DiscardHandler)})
	if s != nil {
		k.carry = &carrier{slots: s, live: t.Context(), next: client.LeaseRequest{WorkerID: "w", Queue: "q"}}
	}
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
				err := k.complete(context.Background(), client.CompleteRequest{TaskID: id, LeaseID: lease})
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

// startLog records the tasks a slots starts, in order.
type startLog struct {
	mu  sync.Mutex
	ids []string
}

func (l *startLog) start(t *client.LeasedTask) {
	l.mu.Lock()
	l.ids = append(l.ids, t.ID)
	l.mu.Unlock()
}

func (l *startLog) started() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

// TestCompleterCarriesLease: a completion call carries a lease for the
// free slots and those of the finishing tasks; the tasks it leases start
// as slots come free, never before; the items are answered as without it.
func TestCompleterCarriesLease(t *testing.T) {
	f := &fakeWorkers{supply: 5}
	s := newSlots(8)
	var log startLog
	s.start = log.start
	// Eight tasks hold the eight slots; three are finishing (their
	// completions below), and one slot is free.
	if n := s.take(t.Context()); n != 8 {
		t.Fatalf("took %d slots, want 8", n)
	}
	release(s, false)
	for range 3 {
		s.finish()
	}
	k := startCarrier(t, f, 64, s)
	answers := <-completeAll(k, 0, 3, func(i int) bool { return i == 1 })
	for i := range 3 {
		if err := answers[fmt.Sprint("t", i)]; (i == 1) != errors.Is(err, client.ErrLeaseLost) || (i != 1 && err != nil) {
			t.Errorf("task t%d: %v", i, err)
		}
	}
	if got := f.carriedLeases(); !reflect.DeepEqual(got, []int{4}) {
		t.Fatalf("calls carried leases for %v tasks, want [4] (1 free slot and 3 finishing)", got)
	}
	// The free slot started l0; l1..l3 wait for the finishing tasks.
	if got := log.started(); !reflect.DeepEqual(got, []string{"l0"}) {
		t.Fatalf("started %v before any slot came back, want [l0]", got)
	}
	for i := range 3 {
		release(s, true)
		if got := len(log.started()); got != 2+i {
			t.Fatalf("%d tasks started after %d releases, want %d", got, i+1, 2+i)
		}
	}
	release(s, false) // a running task ends: its slot is free
	s.mu.Lock()
	free, finishing, held, ahead, waiting := s.free, s.finishing, s.held, s.ahead, len(s.waiting)
	s.mu.Unlock()
	if free != 1 || finishing != 0 || held != 0 || ahead != 0 || waiting != 0 {
		t.Errorf("free %d, finishing %d, held %d, ahead %d, waiting %d; want 1 free and nothing else", free, finishing, held, ahead, waiting)
	}
	if got := log.started(); !reflect.DeepEqual(got, []string{"l0", "l1", "l2", "l3"}) {
		t.Errorf("started %v, want l0..l3 in the order leased", got)
	}
}

// TestCompleterShortLeaseFreesSlots: a carried lease that comes back short
// gives its slots back: the free ones at once, the promised ones as their
// tasks release them.
func TestCompleterShortLeaseFreesSlots(t *testing.T) {
	f := &fakeWorkers{supply: 1}
	s := newSlots(4)
	var log startLog
	s.start = log.start
	s.take(t.Context())
	release(s, false)
	release(s, false)
	s.finish()
	s.finish()
	k := startCarrier(t, f, 64, s)
	<-completeAll(k, 0, 1, func(int) bool { return false })
	if got := f.carriedLeases(); !reflect.DeepEqual(got, []int{4}) {
		t.Fatalf("calls carried leases for %v tasks, want [4] (2 free, 2 finishing)", got)
	}
	s.mu.Lock()
	free := s.free
	s.mu.Unlock()
	if got := log.started(); !reflect.DeepEqual(got, []string{"l0"}) || free != 1 {
		t.Fatalf("started %v with %d slots free; want l0 started and the other free slot back", got, free)
	}
	release(s, true)
	release(s, true)
	s.mu.Lock()
	free = s.free
	s.mu.Unlock()
	if free != 3 {
		t.Errorf("%d slots free after the finishing tasks ended, want 3", free)
	}
}

// TestCompleterLeaseRefused: a server that refuses the carried lease (with
// nothing applied) still gets every completion, in a call without it, and
// later calls carry none.
func TestCompleterLeaseRefused(t *testing.T) {
	f := &fakeWorkers{refuseLease: true, gate: make(chan struct{}), arrived: make(chan struct{}, 10)}
	s := newSlots(8)
	s.start = func(*client.LeasedTask) { t.Error("a task started from a refused lease") }
	s.take(t.Context())
	for range 4 {
		s.finish()
	}
	k := startCarrier(t, f, 64, s)
	first := completeAll(k, 0, 1, func(int) bool { return false })
	<-f.arrived // the call with the lease
	f.gate <- struct{}{}
	<-f.arrived // the same items again, without
	rest := completeAll(k, 1, 4, func(int) bool { return false })
	waitQueued(t, k, 3)
	close(f.gate)
	answers := <-first
	for id, err := range <-rest {
		answers[id] = err
	}
	for i := range 4 {
		if err := answers[fmt.Sprint("t", i)]; err != nil {
			t.Errorf("task t%d: %v", i, err)
		}
	}
	if got, want := f.sizes(), []int{1, 1, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls carried %v items, want %v (the first again without its lease, then no lease)", got, want)
	}
	s.mu.Lock()
	free, held, ahead := s.free, s.held, s.ahead
	s.mu.Unlock()
	if free != 0 || held != 0 || ahead != 0 {
		t.Errorf("free %d, held %d, ahead %d after the refusal; want the slots back with their tasks", free, held, ahead)
	}
}

// release is slots.release, running the task it hands back (as a task's
// goroutine does) with s.start.
func release(s *slots, finishing bool) {
	if next := s.release(finishing); next != nil {
		s.start(next)
	}
}
