package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// countingLog counts the appends and waits the coordinator makes.
type countingLog struct {
	Log
	appendCalls, waitCalls atomic.Int32
}

func (l *countingLog) Append(entries []wal.Entry) (uint64, error) {
	l.appendCalls.Add(1)
	return l.Log.Append(entries)
}

func (l *countingLog) Wait(ctx context.Context, lsn uint64) error {
	l.waitCalls.Add(1)
	return l.Log.Wait(ctx, lsn)
}

func (l *countingLog) appends() int { return int(l.appendCalls.Load()) }
func (l *countingLog) waits() int   { return int(l.waitCalls.Load()) }

// count makes the coordinator's log count its calls from now on (until
// the next restart).
func (e *env) count() *countingLog {
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	l := &countingLog{Log: e.c.log}
	e.c.log = l
	return l
}

func (e *env) leases(worker, queue string, n int) []Lease {
	e.t.Helper()
	for range n {
		e.submit(queue)
	}
	ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: worker, Queue: queue, MaxTasks: n})
	if err != nil || len(ls) != n {
		e.t.Fatalf("lease: %v, %d leases, want %d", err, len(ls), n)
	}
	return ls
}

func item(l Lease, result string) CompleteItem {
	return CompleteItem{TaskID: l.TaskID, LeaseID: l.LeaseID, Result: []byte(result)}
}

func TestCompleteBatchOneWriteOneWait(t *testing.T) {
	e := newEnv(t, 20)
	ls := e.leases("w", "q", 5)
	items := make([]CompleteItem, len(ls))
	for i, l := range ls {
		items[i] = item(l, fmt.Sprint("r", i))
	}
	cl := e.count()
	before := e.c.Stats().LastLSN
	errs, err := e.c.CompleteBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("item %d: %v", i, err)
		}
	}
	if cl.appends() != 1 || cl.waits() != 1 {
		t.Errorf("%d appends and %d waits, want one of each", cl.appends(), cl.waits())
	}
	if got := e.c.Stats().LastLSN - before; got != 5 {
		t.Errorf("%d records, want 5", got)
	}
	for i, l := range ls {
		if got := e.get(l.TaskID); got.State != state.Completed || string(got.Result) != fmt.Sprint("r", i) {
			t.Errorf("task %d: %s %q", i, got.State, got.Result)
		}
	}
	e.restart()
}

// TestCompleteBatchPerItemErrors mixes every kind of item in one batch:
// each gets its own answer, and the failures do not stop the others.
func TestCompleteBatchPerItemErrors(t *testing.T) {
	e := newEnv(t, 21)
	ls := e.leases("w", "q", 3)
	// A lease past due, which no scan expired yet: the batch expires it on
	// the spot.
	e.submit("short", func(r *SubmitRequest) { r.ExecutionWindow = time.Second })
	expiring := e.lease("w", "short")
	// A stale lease of a task that a later attempt committed.
	e.submit("c", func(r *SubmitRequest) { r.ExecutionWindow = time.Second })
	stale := e.lease("w", "c")
	e.clock.Advance(time.Second)
	if _, err := e.c.ExpireDue(ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second) // the retry backoff
	winner := e.lease("w2", "c")
	if _, err := e.c.Commit(ctx, winner.TaskID, winner.LeaseID, []byte("won")); err != nil {
		t.Fatal(err)
	}
	items := []CompleteItem{
		item(ls[0], "a"),
		{TaskID: "no-such-task", LeaseID: "x"},
		{TaskID: ls[1].TaskID, LeaseID: ""},
		item(expiring, "late"),
		{TaskID: ls[1].TaskID, LeaseID: ls[1].LeaseID, Result: make([]byte, DefaultLimits.MaxResultBytes+1)},
		item(stale, "lost"),
		item(ls[2], "c"),
	}
	errs, err := e.c.CompleteBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	var fe *FieldError
	var le *LimitError
	checks := []struct {
		ok   bool
		want string
	}{
		{errs[0] == nil, "nil"},
		{errors.Is(errs[1], ErrNotFound), "not found"},
		{errors.As(errs[2], &fe) && fe.Field == "lease_id", "invalid lease_id"},
		{errors.Is(errs[3], ErrLeaseLost) && strings.Contains(errs[3].Error(), "expired"), "lease lost (expired)"},
		{errors.As(errs[4], &le) && le.Field == "result", "result too large"},
		{errors.Is(errs[5], ErrAlreadyCommitted), "already committed"},
		{errs[6] == nil, "nil"},
	}
	for i, c := range checks {
		if !c.ok {
			t.Errorf("item %d: %v, want %s", i, errs[i], c.want)
		}
	}
	for _, l := range []Lease{ls[0], ls[2]} {
		if got := e.get(l.TaskID); got.State != state.Completed {
			t.Errorf("task %s is %s, want COMPLETED", l.TaskID, got.State)
		}
	}
	if got := e.get(ls[1].TaskID); got.State != state.Leased {
		t.Errorf("task with invalid items is %s, want LEASED", got.State)
	}
	if got := e.get(winner.TaskID); got.State != state.Committed || string(got.Result) != "won" {
		t.Errorf("committed task %s %q", got.State, got.Result)
	}
	want := []record.Type{record.TypeTaskCreated, record.TypeLeaseGranted, record.TypeLeaseExpired, record.TypeTaskCancelled}
	if got := e.historyTypes(expiring.TaskID); !reflect.DeepEqual(got, want) {
		t.Errorf("expired lease's history %v, want %v", got, want)
	}
	if got := e.historyTypes(stale.TaskID); got[len(got)-1] != record.TypeTaskCancelled {
		t.Errorf("already committed: history %v, want a TaskCancelled last", got)
	}
	e.restart()
}

// TestCompleteBatchRetry: the same batch again (a client retry after a lost
// answer) gets the same answers, and the completed items write nothing.
func TestCompleteBatchRetry(t *testing.T) {
	e := newEnv(t, 22)
	ls := e.leases("w", "q", 3)
	items := []CompleteItem{item(ls[0], "a"), item(ls[1], "b"), item(ls[2], "c")}
	first, err := e.c.CompleteBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	lsn := e.c.Stats().LastLSN
	again, err := e.c.CompleteBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, again) || first[0] != nil || first[1] != nil || first[2] != nil {
		t.Fatalf("first %v, retry %v; want nil answers both times", first, again)
	}
	if e.c.Stats().LastLSN != lsn {
		t.Fatal("the retried batch wrote records")
	}
	// A Complete of one of them is a retry too.
	if err := e.c.Complete(ctx, ls[1].TaskID, ls[1].LeaseID, []byte("b")); err != nil || e.c.Stats().LastLSN != lsn {
		t.Fatalf("single retry: %v, lsn %d → %d", err, lsn, e.c.Stats().LastLSN)
	}
}

// TestCompleteBatchSameTaskTwice: items naming the same task are decided in
// order, each on the state the earlier ones left.
func TestCompleteBatchSameTaskTwice(t *testing.T) {
	e := newEnv(t, 23)
	ls := e.leases("w", "q", 3)
	cl := e.count()
	before := e.c.Stats().LastLSN
	errs, err := e.c.CompleteBatch(ctx, []CompleteItem{
		item(ls[0], "first"),
		item(ls[1], "b"),
		item(ls[0], "second"),                          // a retry within the batch: sees the first
		{TaskID: ls[1].TaskID, LeaseID: "other-lease"}, // refused: the task is done
		item(ls[2], "c"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || !errors.Is(errs[3], ErrAlreadyCommitted) || errs[4] != nil {
		t.Fatalf("answers %v, want nil, nil, nil, already committed, nil", errs)
	}
	// Three completions; the refusal names a lease the task never had, so
	// it has no record. The repeated task split the batch into two appends,
	// still one wait.
	if cl.appends() != 2 || cl.waits() != 1 {
		t.Errorf("%d appends and %d waits, want 2 and 1", cl.appends(), cl.waits())
	}
	if n := e.c.Stats().LastLSN - before; n != 3 {
		t.Errorf("%d records, want 3", n)
	}
	if got := e.get(ls[0].TaskID); got.State != state.Completed || string(got.Result) != "first" {
		t.Errorf("task completed twice in a batch: %s %q, want the first result", got.State, got.Result)
	}
	want := []record.Type{record.TypeTaskCreated, record.TypeLeaseGranted, record.TypeTaskCompleted}
	if got := e.historyTypes(ls[1].TaskID); !reflect.DeepEqual(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
	e.restart()
}

func TestCompleteBatchLimits(t *testing.T) {
	e := newEnv(t, 24)
	var fe *FieldError
	if _, err := e.c.CompleteBatch(ctx, nil); !errors.As(err, &fe) || fe.Field != "items" {
		t.Errorf("empty batch: %v", err)
	}
	items := make([]CompleteItem, DefaultLimits.MaxBatch+1)
	if _, err := e.c.CompleteBatch(ctx, items); !errors.As(err, &fe) || fe.Field != "items" || !strings.Contains(err.Error(), "1001") {
		t.Errorf("batch over the limit: %v", err)
	}
	// Invalid items alone are answered per item.
	errs, err := e.c.CompleteBatch(ctx, make([]CompleteItem, 2))
	if err != nil || len(errs) != 2 || !errors.As(errs[0], &fe) || fe.Field != "task_id" {
		t.Errorf("invalid items: %v %v", errs, err)
	}
	e.c.Close()
	if _, err := e.c.CompleteBatch(ctx, []CompleteItem{{TaskID: "t", LeaseID: "l"}}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("closed coordinator: %v, want unavailable for the call", err)
	}
}

// TestCompleteBatchEqualsSequential compares random batches with the same
// items completed one Complete call after another, on a twin coordinator
// with the same seed: the answers and the resulting states are equal. The
// batches repeat tasks and leases, mix in stale and expired leases and
// finalisation leases, so that items of one batch depend on each other.
func TestCompleteBatchEqualsSequential(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			batch, seq := newEnv(t, 100+seed), newEnv(t, 100+seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			for round := range 6 {
				// The same operations on both: submit, lease, commit some,
				// let some expire, lease again.
				var held []Lease
				for _, e := range []*env{batch, seq} {
					r := rand.New(rand.NewPCG(seed, uint64(round)))
					held = setUpLeases(t, e, r)
				}
				if !reflect.DeepEqual(batch.c.Export(), seq.c.Export()) {
					t.Fatalf("round %d: the twins differ before the batch", round)
				}
				if len(held) == 0 {
					continue
				}
				items := make([]CompleteItem, 1+rng.IntN(12))
				for i := range items {
					l := held[rng.IntN(len(held))]
					items[i] = CompleteItem{TaskID: l.TaskID, LeaseID: l.LeaseID, Result: fmt.Appendf(nil, "r%d", i)}
					if rng.IntN(8) == 0 {
						items[i].LeaseID = held[rng.IntN(len(held))].LeaseID // a foreign lease
					}
				}
				errs, err := batch.c.CompleteBatch(ctx, items)
				if err != nil {
					t.Fatal(err)
				}
				for i, it := range items {
					want := seq.c.Complete(ctx, it.TaskID, it.LeaseID, it.Result)
					if fmt.Sprint(errs[i]) != fmt.Sprint(want) {
						t.Fatalf("round %d item %d: batch answered %v, sequential %v", round, i, errs[i], want)
					}
				}
				if !reflect.DeepEqual(batch.c.Export(), seq.c.Export()) {
					t.Fatalf("round %d: states differ after %d items", round, len(items))
				}
			}
			batch.restart()
		})
	}
}

// setUpLeases submits a few tasks and leases them, commits some and lets
// some leases expire and be leased again (finalisation leases among
// them); it returns every lease granted, current or stale. The same r
// gives the same operations.
func setUpLeases(t *testing.T, e *env, r *rand.Rand) []Lease {
	t.Helper()
	for range 1 + r.IntN(4) {
		e.submit("q", func(req *SubmitRequest) { req.ExecutionWindow = time.Second })
	}
	ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w1", Queue: "q", MaxTasks: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if !l.Committed && r.IntN(3) == 0 {
			if _, err := e.c.Commit(ctx, l.TaskID, l.LeaseID, []byte("c")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r.IntN(2) == 0 {
		e.clock.Advance(time.Second) // every lease of this round is past due
		if r.IntN(2) == 0 {
			if _, err := e.c.ExpireDue(ctx); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(3 * time.Second) // past the retry backoff
		again, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w2", Queue: "q", MaxTasks: 10})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, again...)
	}
	return ls
}
