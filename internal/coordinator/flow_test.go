package coordinator

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

func u32(v uint32) *uint32   { return &v }
func f64(v float64) *float64 { return &v }

// TestResolveRefusesBadInput: every bad change is a FieldError naming the
// field at fault.
func TestResolveRefusesBadInput(t *testing.T) {
	rate := state.Limits{RateMilli: 5000, Burst: 5}
	tests := []struct {
		name       string
		ch         LimitChange
		current    state.Limits
		partitions int
		field      string
	}{
		{"nothing", LimitChange{}, state.Limits{}, 1, "max_concurrency"},
		{"zero concurrency", LimitChange{MaxConcurrency: u32(0)}, state.Limits{}, 1, "max_concurrency"},
		{"concurrency too large", LimitChange{MaxConcurrency: u32(state.MaxConcurrencyLimit + 1)}, state.Limits{}, 1, "max_concurrency"},
		{"concurrency below partitions", LimitChange{MaxConcurrency: u32(2)}, state.Limits{}, 3, "max_concurrency"},
		{"set and clear concurrency", LimitChange{MaxConcurrency: u32(2), ClearMaxConcurrency: true}, state.Limits{}, 1, "clear_max_concurrency"},
		{"zero rate", LimitChange{Rate: f64(0)}, state.Limits{}, 1, "rate"},
		{"negative rate", LimitChange{Rate: f64(-1)}, state.Limits{}, 1, "rate"},
		{"NaN rate", LimitChange{Rate: f64(math.NaN())}, state.Limits{}, 1, "rate"},
		{"infinite rate", LimitChange{Rate: f64(math.Inf(1))}, state.Limits{}, 1, "rate"},
		{"rate too large", LimitChange{Rate: f64(1e6 + 1)}, state.Limits{}, 1, "rate"},
		{"rate below a milli-lease", LimitChange{Rate: f64(0.0004)}, state.Limits{}, 1, "rate"},
		{"rate below a milli-lease per partition", LimitChange{Rate: f64(0.002)}, state.Limits{}, 3, "rate"},
		{"set and clear rate", LimitChange{Rate: f64(1), ClearRate: true}, state.Limits{}, 1, "clear_rate"},
		{"burst and clear rate", LimitChange{Burst: u32(1), ClearRate: true}, rate, 1, "burst"},
		{"burst without a rate", LimitChange{Burst: u32(3)}, state.Limits{}, 1, "burst"},
		{"zero burst", LimitChange{Rate: f64(1), Burst: u32(0)}, state.Limits{}, 1, "burst"},
		{"burst too large", LimitChange{Rate: f64(1), Burst: u32(state.MaxBurst + 1)}, state.Limits{}, 1, "burst"},
		{"burst below partitions", LimitChange{Rate: f64(10), Burst: u32(2)}, state.Limits{}, 3, "burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.ch.Resolve(tt.current, tt.partitions)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("Resolve: %v; want a FieldError naming %q", err, tt.field)
			}
		})
	}
}

// TestResolve: limits not named are kept; a new rate without a burst gets
// the default burst, or keeps the queue's; clearing the rate clears its
// burst.
func TestResolve(t *testing.T) {
	tests := []struct {
		name       string
		ch         LimitChange
		current    state.Limits
		partitions int
		want       state.Limits
	}{
		{"concurrency", LimitChange{MaxConcurrency: u32(7)}, state.Limits{RateMilli: 500, Burst: 2}, 1, state.Limits{MaxConcurrency: 7, RateMilli: 500, Burst: 2}},
		{"default burst", LimitChange{Rate: f64(2.5)}, state.Limits{}, 1, state.Limits{RateMilli: 2500, Burst: 3}},
		{"default burst of a slow rate", LimitChange{Rate: f64(0.1)}, state.Limits{}, 1, state.Limits{RateMilli: 100, Burst: 1}},
		{"default burst, one per partition", LimitChange{Rate: f64(0.5)}, state.Limits{}, 4, state.Limits{RateMilli: 500, Burst: 4}},
		{"burst kept", LimitChange{Rate: f64(100)}, state.Limits{RateMilli: 500, Burst: 2}, 1, state.Limits{RateMilli: 100_000, Burst: 2}},
		{"burst alone", LimitChange{Burst: u32(9)}, state.Limits{MaxConcurrency: 3, RateMilli: 500, Burst: 2}, 1, state.Limits{MaxConcurrency: 3, RateMilli: 500, Burst: 9}},
		{"clear rate", LimitChange{ClearRate: true}, state.Limits{MaxConcurrency: 3, RateMilli: 500, Burst: 2}, 1, state.Limits{MaxConcurrency: 3}},
		{"clear all", LimitChange{ClearRate: true, ClearMaxConcurrency: true}, state.Limits{MaxConcurrency: 3, RateMilli: 500, Burst: 2}, 1, state.Limits{}},
		{"rate to the milli-lease", LimitChange{Rate: f64(0.0016), Burst: u32(1)}, state.Limits{}, 1, state.Limits{RateMilli: 2, Burst: 1}},
	}
	for _, tt := range tests {
		got, err := tt.ch.Resolve(tt.current, tt.partitions)
		if err != nil || got != tt.want {
			t.Errorf("%s: Resolve = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
}

// TestSplitLimits: the shares of every limit add up to it exactly, differ
// by at most one, and none of a set limit is 0.
func TestSplitLimits(t *testing.T) {
	for _, l := range []state.Limits{
		{MaxConcurrency: 10, RateMilli: 10_000, Burst: 10},
		{MaxConcurrency: 3, RateMilli: 3, Burst: 3},
		{MaxConcurrency: 1_000_000, RateMilli: 999_999_999, Burst: 7},
		{MaxConcurrency: 5},
	} {
		for n := 1; n <= 3; n++ {
			if CheckFlowLimits(l, n) != nil {
				continue
			}
			var sum state.Limits
			for i := range n {
				s := SplitLimits(l, n, i)
				first := SplitLimits(l, n, 0)
				if first.MaxConcurrency-s.MaxConcurrency > 1 || first.RateMilli-s.RateMilli > 1 || first.Burst-s.Burst > 1 {
					t.Errorf("%+v over %d: share %d is %+v, share 0 %+v", l, n, i, s, first)
				}
				if (l.MaxConcurrency > 0) != (s.MaxConcurrency > 0) || (l.RateMilli > 0) != (s.RateMilli > 0) || (l.Burst > 0) != (s.Burst > 0) {
					t.Errorf("%+v over %d: share %d is %+v", l, n, i, s)
				}
				sum.MaxConcurrency += s.MaxConcurrency
				sum.RateMilli += s.RateMilli
				sum.Burst += s.Burst
			}
			if sum != l {
				t.Errorf("%+v over %d: shares add up to %+v", l, n, sum)
			}
		}
	}
}

// TestSetLimits: SetLimits records one QueueLimited with the partition's
// share; the same limits again write nothing; bad input writes nothing;
// the limits survive a restart.
func TestSetLimits(t *testing.T) {
	e := newEnv(t, 40)
	l := state.Limits{MaxConcurrency: 5, RateMilli: 2000, Burst: 4}
	changed, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Limits: l, Partitions: 2, Index: 1, Actor: Actor{By: "ops", Reason: "slow api"}})
	if err != nil || !changed {
		t.Fatalf("SetLimits: %v, %v", changed, err)
	}
	lsn := e.c.Stats().LastLSN
	if changed, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Limits: l, Partitions: 2, Index: 1}); err != nil || changed {
		t.Fatalf("SetLimits again: %v, %v; want no change", changed, err)
	}
	for _, bad := range []LimitsRequest{
		{Queue: "q", Limits: state.Limits{MaxConcurrency: 1}, Partitions: 2},
		{Queue: "q", Limits: state.Limits{Burst: 3}, Partitions: 1},
		{Queue: "q", Limits: l, Partitions: 2, Index: 2},
		{Queue: "", Limits: l, Partitions: 1},
	} {
		if _, err := e.c.SetLimits(ctx, bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("SetLimits(%+v): %v; want an invalid argument", bad, err)
		}
	}
	if got := e.c.Stats().LastLSN; got != lsn {
		t.Fatalf("the log moved from lsn %d to %d without a change", lsn, got)
	}
	e.restart()
	qs, err := e.c.Queues(ctx, "default", "q")
	if err != nil || len(qs) != 1 || qs[0].Limits == nil {
		t.Fatalf("Queues: %+v, %v", qs, err)
	}
	got := *qs[0].Limits
	want := state.Limits{MaxConcurrency: 2, RateMilli: 1000, Burst: 2} // share 1 of 2
	if got.Limits != want || got.Queue != l || got.Partitions != 2 || got.By != "ops" || got.Reason != "slow api" || !got.At.Std().Equal(epoch) {
		t.Fatalf("limits after restart %+v; want share %+v of %+v", got, want, l)
	}
	if changed, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Partitions: 1}); err != nil || !changed {
		t.Fatalf("clearing: %v, %v", changed, err)
	}
	if qs, _ := e.c.Queues(ctx, "default", "q"); len(qs) != 0 {
		t.Fatalf("a queue with nothing left after its limits were cleared: %+v", qs)
	}
}

// longPoll starts a Lease that long-polls q for 10 s and returns the
// channel of its answer, once the poll waits on the fake clock.
func (e *env) longPoll(q string) <-chan []Lease {
	got := make(chan []Lease, 1)
	go func() {
		ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w2", Queue: q, Wait: 10 * time.Second})
		if err != nil {
			e.t.Error(err)
		}
		got <- ls
	}()
	e.clock.WaitForTimers(1)
	return got
}

// TestLongPollWakesWhenASlotFrees: a worker long-polling a queue at its max
// concurrency gets a task as soon as a lease of the queue ends, with no
// time passing.
func TestLongPollWakesWhenASlotFrees(t *testing.T) {
	e := newEnv(t, 41)
	if _, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Limits: state.Limits{MaxConcurrency: 1}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	e.submit("q")
	second := e.submit("q")
	first := e.lease("w1", "q")
	got := e.longPoll("q")
	select {
	case ls := <-got:
		t.Fatalf("a poll on a full queue got %+v", ls)
	default:
	}
	if err := e.c.Complete(ctx, first.TaskID, first.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if ls := <-got; len(ls) != 1 || ls[0].TaskID != second.ID {
		t.Fatalf("after the slot freed the poll got %+v; want task %s", ls, second.ID)
	}
}

// TestLongPollWakesWhenATokenArrives: with a rate of 2 per second and a
// burst of 1, a long-poll after the one token was taken gets a task when
// the clock reaches the next token, 500 ms later, not at its deadline.
func TestLongPollWakesWhenATokenArrives(t *testing.T) {
	e := newEnv(t, 42)
	if _, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Limits: state.Limits{RateMilli: 2000, Burst: 1}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	e.submit("q")
	second := e.submit("q")
	e.lease("w1", "q")
	got := e.longPoll("q")
	e.clock.Advance(499 * time.Millisecond)
	select {
	case ls := <-got:
		t.Fatalf("a poll got %+v before the next token", ls)
	default:
	}
	e.clock.Advance(time.Millisecond)
	ls := <-got
	if len(ls) != 1 || ls[0].TaskID != second.ID || !ls[0].LeaseExpiry.Equal(epoch.Add(500*time.Millisecond+30*time.Second)) {
		t.Fatalf("when the token arrived the poll got %+v; want task %s leased at 500 ms", ls, second.ID)
	}
}

// TestLongPollWakesWhenLimitsRise: raising the max concurrency wakes a
// waiting long-poll.
func TestLongPollWakesWhenLimitsRise(t *testing.T) {
	e := newEnv(t, 43)
	if _, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Limits: state.Limits{MaxConcurrency: 1}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	e.submit("q")
	e.submit("q")
	e.lease("w1", "q")
	got := e.longPoll("q")
	if _, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Limits: state.Limits{MaxConcurrency: 2}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if ls := <-got; len(ls) != 1 {
		t.Fatalf("after the limit rose the poll got %+v", ls)
	}
}

// TestLeaseHonoursLimits: a lease asking for many tasks gets no more than
// the free slots and tokens, across a restart.
func TestLeaseHonoursLimits(t *testing.T) {
	e := newEnv(t, 44)
	for range 10 {
		e.submit("q")
	}
	if _, err := e.c.SetLimits(ctx, LimitsRequest{Queue: "q", Limits: state.Limits{MaxConcurrency: 4, RateMilli: 1000, Burst: 3}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 10})
	if err != nil || len(ls) != 3 {
		t.Fatalf("first lease: %d tasks, %v; want the burst of 3", len(ls), err)
	}
	e.restart()
	e.clock.Advance(5 * time.Second)
	ls, err = e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 10})
	if err != nil || len(ls) != 1 {
		t.Fatalf("second lease: %d tasks, %v; want the one slot left of 4", len(ls), err)
	}
}
