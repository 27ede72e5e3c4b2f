package state_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

var limitedKey = state.QueueKey{Namespace: "n", Queue: "q"}

// limitedTask is the TaskCreated of a task of limitedKey.
func limitedTask(id string, at state.Time) *state.TaskCreated {
	return &state.TaskCreated{TaskID: id, Namespace: "n", Queue: "q", ExecutionWindow: 10 * time.Second,
		Retry: state.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Second, Multiplier: 1}, CreatedAt: at}
}

// limit is the QueueLimited of limitedKey with these limits, in one
// partition.
func limit(maxConc uint32, rateMilli uint64, burst uint32, at state.Time) *state.QueueLimited {
	return &state.QueueLimited{Namespace: "n", Queue: "q", MaxConcurrency: maxConc, RateMilli: rateMilli, Burst: burst,
		QueueMaxConcurrency: maxConc, QueueRateMilli: rateMilli, QueueBurst: burst, Partitions: 1, By: "ops", At: at}
}

func grant(id, lease string, attempt uint32, at state.Time) *state.LeaseGranted {
	return &state.LeaseGranted{TaskID: id, LeaseID: lease, WorkerID: "w", Attempt: attempt, GrantedAt: at, LeaseExpiry: at.Add(10 * time.Second)}
}

// TestMaxConcurrency: with max concurrency 2, Schedulable offers at most
// the free slots, a third LeaseGranted does not apply, and a lease that
// ends frees its slot.
func TestMaxConcurrency(t *testing.T) {
	s := state.New()
	apply, must := appliers(t, s)
	sec := state.Time(time.Second)
	for _, id := range []string{"a", "b", "c", "d"} {
		must(limitedTask(id, sec))
	}
	must(limit(2, 0, 0, sec))
	if got := s.Schedulable(limitedKey, 2*sec, 10); len(got) != 2 {
		t.Fatalf("Schedulable offers %v, want 2 tasks (max concurrency 2)", ids(got))
	}
	must(grant("a", "la", 1, 2*sec))
	if got := s.Schedulable(limitedKey, 2*sec, 10); len(got) != 1 {
		t.Fatalf("Schedulable offers %v with one slot free, want 1 task", ids(got))
	}
	must(grant("b", "lb", 1, 2*sec))
	if got := s.Schedulable(limitedKey, 2*sec, 10); len(got) != 0 {
		t.Fatalf("Schedulable offers %v on a full queue", ids(got))
	}
	if s.Admits(limitedKey, 2*sec) {
		t.Fatal("Admits a third lease")
	}
	err := apply(grant("c", "lc", 1, 2*sec))
	if !errors.Is(err, state.ErrPrecondition) || !strings.Contains(err.Error(), "max concurrency") {
		t.Fatalf("third grant: %v; want a precondition naming the max concurrency", err)
	}
	if _, ok := s.NextReady(limitedKey); ok {
		t.Fatal("NextReady on a full queue without delayed tasks: only the end of a lease frees a slot")
	}
	must(&state.TaskCompleted{TaskID: "a", LeaseID: "la", At: 3 * sec})
	if got := s.Schedulable(limitedKey, 3*sec, 10); len(got) != 1 {
		t.Fatalf("Schedulable offers %v after a completion, want 1 task", ids(got))
	}
	must(grant("c", "lc", 1, 3*sec))
	// Expiry frees a slot too.
	must(&state.LeaseExpired{TaskID: "b", LeaseID: "lb", At: 12 * sec, RetryAt: 12 * sec})
	must(grant("d", "ld", 1, 12*sec))
	// Lowering the limit revokes nothing, but grants nothing until the
	// leases drop below it.
	must(limit(1, 0, 0, 12*sec))
	if got := s.Schedulable(limitedKey, 12*sec, 10); len(got) != 0 {
		t.Fatalf("Schedulable offers %v with 2 leases over a limit of 1", ids(got))
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}

// TestTokenBucket: a rate of 2 per second with a burst of 3 starts full,
// grants 3 at once, then one per 500 ms; NextReady says when the next
// token arrives; the bucket never holds more than the burst.
func TestTokenBucket(t *testing.T) {
	s := state.New()
	apply, must := appliers(t, s)
	sec := state.Time(time.Second)
	ms := state.Time(time.Millisecond)
	for i := range 10 {
		must(limitedTask(fmt.Sprint("t", i), sec))
	}
	must(limit(0, 2000, 3, sec))
	if n, ok := s.Tokens(limitedKey, sec); !ok || n != 3 {
		t.Fatalf("Tokens = %d, %v; want a full bucket of 3", n, ok)
	}
	if got := s.Schedulable(limitedKey, 2*sec, 10); len(got) != 3 {
		t.Fatalf("Schedulable offers %d tasks, want the burst of 3", len(got))
	}
	for i := range 3 {
		must(grant(fmt.Sprint("t", i), fmt.Sprint("l", i), 1, 2*sec))
	}
	if got := s.Schedulable(limitedKey, 2*sec, 10); len(got) != 0 {
		t.Fatalf("Schedulable offers %d tasks with an empty bucket", len(got))
	}
	err := apply(grant("t3", "l3", 1, 2*sec))
	if !errors.Is(err, state.ErrPrecondition) || !strings.Contains(err.Error(), "token bucket is empty") {
		t.Fatalf("grant without a token: %v", err)
	}
	next, ok := s.NextReady(limitedKey)
	if !ok || next != 2*sec+500*ms {
		t.Fatalf("NextReady = %v, %v; want the next token at %v", next, ok, 2*sec+500*ms)
	}
	if got := s.Schedulable(limitedKey, next-1, 10); len(got) != 0 {
		t.Fatal("a token 1 ns early")
	}
	if got := s.Schedulable(limitedKey, next, 10); len(got) != 1 {
		t.Fatalf("Schedulable offers %d tasks when the token arrives, want 1", len(got))
	}
	must(grant("t3", "l3", 1, next))
	// A long pause fills the bucket to its burst, never beyond.
	if n, _ := s.Tokens(limitedKey, 100*sec); n != 3 {
		t.Fatalf("Tokens after 100 s = %d, want the burst 3", n)
	}
	// A smaller burst caps the level; a larger one keeps it.
	must(limit(0, 2000, 1, 100*sec))
	if n, _ := s.Tokens(limitedKey, 100*sec); n != 1 {
		t.Fatalf("Tokens after the burst went to 1 = %d", n)
	}
	must(limit(0, 2000, 5, 100*sec))
	if n, _ := s.Tokens(limitedKey, 100*sec); n != 1 {
		t.Fatalf("Tokens after the burst went up to 5 = %d, want the level kept (1)", n)
	}
	if n, _ := s.Tokens(limitedKey, 102*sec); n != 5 {
		t.Fatalf("Tokens 2 s later = %d, want 5", n)
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}

// TestTokenBucketIntegerArithmetic: the slowest rate (1 milli-lease per
// second) gives its token after exactly 1000 s; the fastest over a century
// fills the bucket without overflow; a clock that goes back adds nothing.
func TestTokenBucketIntegerArithmetic(t *testing.T) {
	s := state.New()
	_, must := appliers(t, s)
	sec := state.Time(time.Second)
	must(limitedTask("a", sec))
	must(limitedTask("b", sec))
	must(limit(0, 1, 1, sec))
	must(grant("a", "la", 1, sec))
	if next, ok := s.NextReady(limitedKey); !ok || next != 1001*sec {
		t.Fatalf("NextReady = %v, %v; want 1000 s later", next, ok)
	}
	if n, _ := s.Tokens(limitedKey, 1001*sec-1); n != 0 {
		t.Fatal("a token before 1000 s")
	}
	if n, _ := s.Tokens(limitedKey, 1001*sec); n != 1 {
		t.Fatal("no token after 1000 s")
	}
	must(limit(0, state.MaxRateMilli, state.MaxBurst, 1001*sec))
	century := state.Time(100 * 365 * 24 * time.Hour)
	if n, _ := s.Tokens(limitedKey, century); n != state.MaxBurst {
		t.Fatalf("Tokens after a century = %d, want %d", n, state.MaxBurst)
	}
	if n, _ := s.Tokens(limitedKey, -century); n != 1 {
		t.Fatalf("Tokens before the last refill = %d, want the level kept (1)", n)
	}
}

// TestQueueLimitedPreconditions: limits out of bounds, a burst without a
// rate, a share above the queue's limit, or a queue without a name do not
// apply; clearing every limit forgets a queue with nothing else.
func TestQueueLimitedPreconditions(t *testing.T) {
	sec := state.Time(time.Second)
	bad := map[string]*state.QueueLimited{
		"concurrency above the bound": limit(state.MaxConcurrencyLimit+1, 0, 0, sec),
		"rate above the bound":        limit(0, state.MaxRateMilli+1, 1, sec),
		"burst above the bound":       limit(0, 1000, state.MaxBurst+1, sec),
		"burst without a rate":        limit(0, 0, 1, sec),
		"rate without a burst":        limit(0, 1000, 0, sec),
		"share above the queue":       {Namespace: "n", Queue: "q", MaxConcurrency: 3, QueueMaxConcurrency: 2, Partitions: 1, At: sec},
		"share of no limit":           {Namespace: "n", Queue: "q", MaxConcurrency: 3, Partitions: 1, At: sec},
		"no partitions":               {Namespace: "n", Queue: "q", MaxConcurrency: 3, QueueMaxConcurrency: 3, At: sec},
		"no queue":                    {Namespace: "n", MaxConcurrency: 3, QueueMaxConcurrency: 3, Partitions: 1, At: sec},
	}
	for name, r := range bad {
		s := state.New()
		if err := s.Apply(1, r); !errors.Is(err, state.ErrPrecondition) {
			t.Errorf("%s: %v; want a precondition failure", name, err)
		}
		if len(s.Queues(sec)) != 0 {
			t.Errorf("%s: a refused record created a queue", name)
		}
	}
	s := state.New()
	_, must := appliers(t, s)
	must(limit(5, 0, 0, sec))
	if qs := s.Queues(sec); len(qs) != 1 || qs[0].Limits == nil || qs[0].Limits.MaxConcurrency != 5 {
		t.Fatalf("a queue with limits and no task: %+v", qs)
	}
	must(limit(0, 0, 0, sec))
	if qs := s.Queues(sec); len(qs) != 0 {
		t.Fatalf("clearing the limits of a queue with nothing else left %+v", qs)
	}
}

// TestFlowControlProperty is the acceptance property of flow control: on
// random runs (submits, leases as the coordinator takes them, direct
// grants that may exceed the limits, completions, expiries, limit changes,
// a clock moving forward by random steps), every grant that applies leaves
// the live leases within max concurrency, and within every stretch of
// constant limits the grants of any window [t, t+w] number at most
// burst + rate·w. Grants beyond the limits do not apply and change
// nothing. The same holds for the state replayed from the log and for the
// one restored from an Image taken half way with the rest replayed: all
// three export equal.
func TestFlowControlProperty(t *testing.T) {
	for seed := range uint64(60) {
		recs := flowRun(t, seed, 600)
		replayed := state.New()
		for i, r := range recs {
			if err := replayed.Apply(uint64(i+1), r); err != nil {
				t.Fatalf("seed %d: replay of record %d: %v", seed, i+1, err)
			}
		}
		half := state.New()
		for i, r := range recs[:len(recs)/2] {
			if err := half.Apply(uint64(i+1), r); err != nil {
				t.Fatal(err)
			}
		}
		restored := restore(t, half.Image())
		sameFlow(t, seed, "restored from an image", half, restored)
		for i := len(recs) / 2; i < len(recs); i++ {
			if err := restored.Apply(uint64(i+1), recs[i]); err != nil {
				t.Fatalf("seed %d: record %d after the image: %v", seed, i+1, err)
			}
		}
		checkFlow(t, seed, recs)
		sameFlow(t, seed, "restored from an image and replayed", replayed, restored)
		if !reflect.DeepEqual(replayed.Export(), restored.Export()) {
			t.Fatalf("seed %d: the replayed state and the one restored from an image differ", seed)
		}
	}
}

// sameFlow fails unless two states have the same limits and offer the
// same tokens and next token at several later times.
func sameFlow(t *testing.T, seed uint64, what string, want, got *state.State) {
	t.Helper()
	wl, wok := want.Limits(limitedKey)
	gl, gok := got.Limits(limitedKey)
	if wok != gok || wl != gl {
		t.Fatalf("seed %d: %s: limits %+v, %v; want %+v, %v", seed, what, gl, gok, wl, wok)
	}
	wn, wnok := want.NextReady(limitedKey)
	gn, gnok := got.NextReady(limitedKey)
	if wn != gn || wnok != gnok {
		t.Fatalf("seed %d: %s: NextReady %v, %v; want %v, %v", seed, what, gn, gnok, wn, wnok)
	}
	start := state.Time(time.Hour)
	for d := range 40 {
		at := start.Add(time.Duration(d) * 7 * time.Second)
		w, _ := want.Tokens(limitedKey, at)
		g, _ := got.Tokens(limitedKey, at)
		if w != g {
			t.Fatalf("seed %d: %s: %d tokens at %v, want %d", seed, what, g, at, w)
		}
	}
}

// flowRun returns the records of one random run of n steps on limitedKey.
// It checks after every record that the live leases are within max
// concurrency, and that a refused grant changed nothing.
func flowRun(t *testing.T, seed uint64, n int) []state.Record {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	s := state.New()
	var recs []state.Record
	now := state.Time(time.Hour)
	ids, leases := 0, 0
	apply := func(r state.Record) error {
		before := s.Export()
		err := s.Apply(s.LastLSN()+1, r)
		if err != nil {
			if !errors.Is(err, state.ErrPrecondition) {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if !reflect.DeepEqual(before, s.Export()) {
				t.Fatalf("seed %d: a refused %T changed the state", seed, r)
			}
			return err
		}
		recs = append(recs, r)
		if err := s.Invariants(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return nil
	}
	live := func() []*state.Task {
		var out []*state.Task
		s.Scan(0, func(t *state.Task) bool {
			if t.CurrentLease() != nil {
				out = append(out, t)
			}
			return true
		})
		return out
	}
	granted := func(r *state.LeaseGranted) {
		l, ok := s.Limits(limitedKey)
		q, _ := s.Queue(limitedKey, now)
		if ok && l.MaxConcurrency > 0 && q.Leases > int(l.MaxConcurrency) {
			t.Fatalf("seed %d: a grant left %d live leases over a max concurrency of %d", seed, q.Leases, l.MaxConcurrency)
		}
	}
	for range n {
		now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		switch rng.IntN(10) {
		case 0, 1:
			ids++
			apply(limitedTask(fmt.Sprint("t", ids), now))
		case 2, 3:
			// As the coordinator leases: what Schedulable offers.
			for _, task := range s.Schedulable(limitedKey, now, 1+rng.IntN(4)) {
				leases++
				r := grant(task.ID, fmt.Sprint("l", leases), task.Attempt+1, now)
				if err := apply(r); err != nil {
					t.Fatalf("seed %d: a grant Schedulable offered does not apply: %v", seed, err)
				}
				granted(r)
			}
		case 4:
			// A grant regardless of the limits: applies only within them.
			var ready []*state.Task
			s.Scan(0, func(t *state.Task) bool {
				if t.State == state.Waiting && t.NotBefore <= now {
					ready = append(ready, t)
				}
				return true
			})
			if len(ready) > 0 {
				task := ready[rng.IntN(len(ready))]
				leases++
				r := grant(task.ID, fmt.Sprint("l", leases), task.Attempt+1, now)
				admits := s.Admits(limitedKey, now)
				if err := apply(r); (err == nil) != admits {
					t.Fatalf("seed %d: Admits says %v, the grant: %v", seed, admits, err)
				}
				if admits {
					granted(r)
				}
			}
		case 5, 6:
			if ls := live(); len(ls) > 0 {
				task := ls[rng.IntN(len(ls))]
				if cur := task.CurrentLease(); now < cur.LeaseExpiry {
					apply(&state.TaskCompleted{TaskID: task.ID, LeaseID: cur.LeaseID, At: now})
				}
			}
		case 7:
			if ls := live(); len(ls) > 0 {
				task := ls[rng.IntN(len(ls))]
				cur := task.CurrentLease()
				now = max(now, cur.LeaseExpiry)
				apply(&state.LeaseExpired{TaskID: task.ID, LeaseID: cur.LeaseID, At: now, RetryAt: now})
			}
		case 8:
			if rng.IntN(3) == 0 {
				var conc, burst uint32
				var rate uint64
				if rng.IntN(3) > 0 {
					conc = uint32(1 + rng.IntN(4))
				}
				if rng.IntN(3) > 0 {
					rate, burst = uint64(200+rng.IntN(5000)), uint32(1+rng.IntN(4))
				}
				apply(limit(conc, rate, burst, now))
			}
		case 9:
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
	}
	return recs
}

// checkFlow checks the token bucket's bound on recs: within each stretch
// of records between two QueueLimited, for every two grants i ≤ j under a
// rate, the grants from i to j number at most burst + rate·(t_j − t_i),
// in exact integers.
func checkFlow(t *testing.T, seed uint64, recs []state.Record) {
	t.Helper()
	var rate uint64
	var burst int64
	var times []state.Time
	check := func() {
		for i := range times {
			for j := i; j < len(times); j++ {
				n := int64(j - i + 1)
				allowed := (burst*state.TokenUnit + int64(rate)*int64(times[j]-times[i])) / state.TokenUnit
				if n > allowed {
					t.Fatalf("seed %d: %d grants in %v, above burst %d + rate %d milli/s over the window (%d)",
						seed, n, time.Duration(times[j]-times[i]), burst, rate, allowed)
				}
			}
		}
	}
	for _, r := range recs {
		switch r := r.(type) {
		case *state.QueueLimited:
			check()
			rate, burst, times = r.RateMilli, int64(r.Burst), nil
		case *state.LeaseGranted:
			if rate > 0 {
				times = append(times, r.GrantedAt)
			}
		}
	}
	check()
}
