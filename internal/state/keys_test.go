package state_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

// keySeeds is how many random runs each property test of keys makes:
// -keys.seeds, or defaultKeySeeds (60; fewer under -race, and with -short:
// .ci/run runs the full count without the race detector).
var (
	keySeeds        = flag.Int("keys.seeds", 0, "random runs of each property test of keys (default 60, 8 under -race or -short)")
	defaultKeySeeds = 60
)

func keySeedCount() uint64 {
	switch {
	case *keySeeds > 0:
		return uint64(*keySeeds)
	case testing.Short():
		return 8
	}
	return uint64(defaultKeySeeds)
}

// keyedTask is the TaskCreated of a task of limitedKey with a key.
func keyedTask(id, key string, at state.Time) *state.TaskCreated {
	r := limitedTask(id, at)
	r.Key = key
	return r
}

// keyLimit is the QueueLimited of limitedKey with these key limits and no
// queue limit.
func keyLimit(k state.KeyLimits, at state.Time) *state.QueueLimited {
	return &state.QueueLimited{Namespace: "n", Queue: "q", KeyMaxConcurrency: k.MaxConcurrency, KeyRateMilli: k.RateMilli,
		KeyBurst: k.Burst, KeyOrdered: k.Ordered, Fair: k.Fair, By: "ops", At: at}
}

// TestKeyMaxConcurrency: with a key max concurrency of 2, Schedulable
// offers at most 2 tasks of a key and goes on with the other keys and the
// tasks without a key; a third grant of the key does not apply, naming the
// key; the end of a lease frees its slot; lowering the limit revokes
// nothing.
func TestKeyMaxConcurrency(t *testing.T) {
	s := state.New()
	apply, must := appliers(t, s)
	sec := state.Time(time.Second)
	for i := range 4 {
		must(keyedTask(fmt.Sprint("a", i), "acme", sec))
	}
	must(keyedTask("b0", "beta", sec))
	must(limitedTask("u0", sec))
	must(keyLimit(state.KeyLimits{MaxConcurrency: 2}, sec))
	if got, want := ids(s.Schedulable(limitedKey, 2*sec, 10)), []string{"a0", "a1", "b0", "u0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Schedulable offers %v, want %v (2 of acme, then the others in age order)", got, want)
	}
	must(grant("a0", "l0", 1, 2*sec))
	must(grant("a1", "l1", 1, 2*sec))
	err := apply(grant("a2", "l2", 1, 2*sec))
	if !errors.Is(err, state.ErrPrecondition) || !strings.Contains(err.Error(), `key "acme" has 2 live leases`) {
		t.Fatalf("third grant of acme: %v; want a precondition naming the key", err)
	}
	if got, want := ids(s.Schedulable(limitedKey, 2*sec, 10)), []string{"b0", "u0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Schedulable offers %v with acme full, want %v", got, want)
	}
	must(&state.TaskCompleted{TaskID: "a0", LeaseID: "l0", At: 3 * sec})
	if got, want := ids(s.Schedulable(limitedKey, 3*sec, 10)), []string{"a2", "b0", "u0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Schedulable offers %v after a completion, want %v", got, want)
	}
	must(grant("a2", "l2", 1, 3*sec))
	must(keyLimit(state.KeyLimits{MaxConcurrency: 1}, 3*sec))
	if got, want := ids(s.Schedulable(limitedKey, 3*sec, 10)), []string{"b0", "u0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Schedulable offers %v with acme at 2 leases over a limit of 1, want %v", got, want)
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
	// Clearing the limits lets the key go.
	must(keyLimit(state.KeyLimits{}, 4*sec))
	if got := ids(s.Schedulable(limitedKey, 4*sec, 10)); len(got) != 3 {
		t.Fatalf("Schedulable offers %v without limits, want a3, b0, u0", got)
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}

// TestKeyOrdered: an ordered key leases its tasks one at a time in
// creation order, whatever their priorities; a failed task with attempts
// left holds its key's place through its backoff; a grant out of order
// does not apply; an operator's retry of an older task makes it next.
func TestKeyOrdered(t *testing.T) {
	s := state.New()
	apply, must := appliers(t, s)
	sec := state.Time(time.Second)
	must(keyLimit(state.KeyLimits{Ordered: true}, sec))
	for i := range 3 {
		r := keyedTask(fmt.Sprint("o", i), "acct", sec)
		r.Priority = int32(i) // later ones have a higher priority: order wins
		must(r)
	}
	must(keyedTask("x0", "other", sec))
	if got, want := ids(s.Schedulable(limitedKey, 2*sec, 10)), []string{"o0", "x0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Schedulable offers %v, want %v", got, want)
	}
	err := apply(grant("o1", "l1", 1, 2*sec))
	if !errors.Is(err, state.ErrPrecondition) || !strings.Contains(err.Error(), `task "o0", created before, is not finished`) {
		t.Fatalf("a grant out of order: %v", err)
	}
	must(grant("o0", "l0", 1, 2*sec))
	if got := ids(s.Schedulable(limitedKey, 2*sec, 10)); !reflect.DeepEqual(got, []string{"x0"}) {
		t.Fatalf("Schedulable offers %v while o0 is leased", got)
	}
	// o0 fails with attempts left: it holds the key through its backoff.
	must(&state.TaskFailed{TaskID: "o0", LeaseID: "l0", Reason: "boom", RetryAt: 10 * sec, At: 3 * sec})
	if got := ids(s.Schedulable(limitedKey, 5*sec, 10)); !reflect.DeepEqual(got, []string{"x0"}) {
		t.Fatalf("Schedulable offers %v during o0's backoff", got)
	}
	if next, ok := s.NextReady(limitedKey); !ok || next != 10*sec {
		t.Fatalf("NextReady = %v, %v; want the end of o0's backoff, %v", next, ok, 10*sec)
	}
	if got, want := ids(s.Schedulable(limitedKey, 10*sec, 10)), []string{"o0", "x0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Schedulable offers %v after the backoff, want %v", got, want)
	}
	must(grant("o0", "l0b", 2, 10*sec))
	must(&state.TaskFailed{TaskID: "o0", LeaseID: "l0b", Reason: "for good", Permanent: true, At: 11 * sec})
	if got, want := ids(s.Schedulable(limitedKey, 11*sec, 10)), []string{"o1", "x0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Schedulable offers %v once o0 failed, want %v", got, want)
	}
	must(grant("o1", "l1", 1, 11*sec))
	// An operator retries o0: it is the oldest open task again, next
	// once o1 is done.
	must(&state.TaskRetried{TaskID: "o0", At: 12 * sec})
	must(&state.TaskCompleted{TaskID: "o1", LeaseID: "l1", At: 13 * sec})
	if got, want := ids(s.Schedulable(limitedKey, 13*sec, 10)), []string{"o0", "x0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Schedulable offers %v after the retry, want %v", got, want)
	}
	if err := apply(grant("o2", "l2", 1, 13*sec)); !errors.Is(err, state.ErrPrecondition) {
		t.Fatalf("o2 before the retried o0: %v", err)
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
	sameKeys(t, 0, "restored", s, restore(t, s.Image()))
}

// TestKeyStateIsFreed: a key whose tasks all finished costs nothing: its
// state leaves, and the queue's key index with the last task that had a
// key.
func TestKeyStateIsFreed(t *testing.T) {
	s := state.New()
	_, must := appliers(t, s)
	sec := state.Time(time.Second)
	before := s.HeldBytes()
	must(limitedTask("u", sec))
	noKeys := s.HeldBytes()
	for i := range 100 {
		must(keyedTask(fmt.Sprint("k", i), fmt.Sprint("key-", i), sec))
	}
	if s.HeldBytes() <= noKeys {
		t.Fatal("keys cost nothing")
	}
	for i := range 100 {
		must(grant(fmt.Sprint("k", i), fmt.Sprint("l", i), 1, 2*sec))
		must(&state.TaskCompleted{TaskID: fmt.Sprint("k", i), LeaseID: fmt.Sprint("l", i), At: 2 * sec})
	}
	must(&state.TasksPurged{Before: 3 * sec, At: 3 * sec})
	if got := s.HeldBytes(); got != noKeys {
		t.Fatalf("HeldBytes %d after the keyed tasks left, want %d as before them (%d empty)", got, noKeys, before)
	}
	if img := s.Image(); img.Keys != nil || img.Queues[0].Keys != nil {
		t.Fatalf("the image keeps keys: %+v", img.Queues[0].Keys)
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}

// sameKeys fails unless two states export equal (their content, keys
// included, whatever the layout of their derived indexes).
func sameKeys(t *testing.T, seed uint64, what string, want, got *state.State) {
	t.Helper()
	if w, g := want.Export(), got.Export(); !reflect.DeepEqual(w, g) {
		t.Fatalf("seed %d: %s: the states differ:\nwant queues %+v\ngot  queues %+v\nwant keys %v\ngot  keys %v", seed, what, w.Queues, g.Queues, w.Keys, g.Keys)
	}
}

// keyLimitsAt returns the key limits of limitedKey.
func keyLimitsAt(s *state.State) state.KeyLimits {
	l, _ := s.Limits(limitedKey)
	return l.Keys
}

// keyModel recounts from the tasks what a key's limits look at.
type keyModel struct{ s *state.State }

// live counts the live leases of key.
func (m keyModel) live(key string) int {
	n := 0
	m.s.Scan(0, func(t *state.Task) bool {
		if t.CurrentLease() != nil && m.s.KeyOf(t) == key {
			n++
		}
		return true
	})
	return n
}

// oldestOpen is the creation LSN of key's oldest task that is not
// finished (0: none).
func (m keyModel) oldestOpen(key string) uint64 {
	var lsn uint64
	m.s.Scan(0, func(t *state.Task) bool {
		if !t.State.Terminal() && m.s.KeyOf(t) == key {
			lsn = t.CreatedLSN
			return false
		}
		return true
	})
	return lsn
}

// admits says whether the key limits admit a lease of t now (the queue's
// own limits aside).
func (m keyModel) admits(t *state.Task) bool {
	key := m.s.KeyOf(t)
	set := keyLimitsAt(m.s)
	if key == "" {
		return true
	}
	if set.MaxConcurrency > 0 && m.live(key) >= int(set.MaxConcurrency) {
		return false
	}
	if set.Ordered && (m.live(key) > 0 || m.oldestOpen(key) != t.CreatedLSN) {
		return false
	}
	return true
}

// checkGrant checks what must hold after a grant of t applied under set.
func (m keyModel) checkGrant(seed uint64, t *testing.T, task *state.Task, set state.KeyLimits) {
	t.Helper()
	key := m.s.KeyOf(task)
	if key == "" {
		return
	}
	if n := m.live(key); set.MaxConcurrency > 0 && n > int(set.MaxConcurrency) {
		t.Fatalf("seed %d: a grant left key %q with %d live leases over its max concurrency %d", seed, key, n, set.MaxConcurrency)
	}
	if set.Ordered {
		if n := m.live(key); n != 1 {
			t.Fatalf("seed %d: ordered key %q has %d live leases", seed, key, n)
		}
		if o := m.oldestOpen(key); o != task.CreatedLSN {
			t.Fatalf("seed %d: ordered key %q leased task %q (lsn %d) before its older open task (lsn %d)", seed, key, task.ID, task.CreatedLSN, o)
		}
	}
}

var propertyKeys = []string{"acme", "beta", "gamma", "delta", "eps", ""}

// bucketCheck checks the bound of each key's token bucket on a run as it
// goes: within each stretch of constant key rate and burst, for every two
// grants i <= j of one key, the grants from i to j number at most
// burst + rate·(T_j − T_i), where T is the key bucket's clock — the latest
// grant time of the key so far, or the time of a purge that forgot the
// key (a key is forgotten only once its bucket is full, so a bucket made
// anew after it is the same as the old one refilled to then). A clock
// that goes back adds nothing to T.
type bucketCheck struct {
	t     *testing.T
	seed  uint64
	rate  uint64
	burst int64
	clock map[string]state.Time
	times map[string][]state.Time
}

func (b *bucketCheck) reset(rate uint64, burst uint32) {
	b.check()
	b.rate, b.burst = rate, int64(burst)
	b.clock, b.times = map[string]state.Time{}, map[string][]state.Time{}
}

// granted counts a grant of a task with key at at.
func (b *bucketCheck) granted(key string, at state.Time) {
	if b.rate == 0 || key == "" {
		return
	}
	b.clock[key] = max(b.clock[key], at)
	b.times[key] = append(b.times[key], b.clock[key])
}

// purged moves the clock of every key that s no longer has a state of to
// at, the time of the purge that forgot it.
func (b *bucketCheck) purged(s *state.State, at state.Time) {
	kept := map[string]bool{}
	for _, q := range s.Export().Queues {
		if q.Keys != nil {
			for _, k := range q.Keys.States {
				kept[k.Name] = true
			}
		}
	}
	for key := range b.clock {
		if !kept[key] {
			b.clock[key] = max(b.clock[key], at)
		}
	}
}

func (b *bucketCheck) check() {
	b.t.Helper()
	for key, times := range b.times {
		for i := range times {
			for j := i; j < len(times); j++ {
				n := int64(j - i + 1)
				if n*state.TokenUnit > b.burst*state.TokenUnit+int64(b.rate)*int64(times[j]-times[i]) {
					b.t.Fatalf("seed %d: key %q was granted %d leases in %v of its bucket's clock, above burst %d + rate %d milli/s",
						b.seed, key, n, time.Duration(times[j]-times[i]), b.burst, b.rate)
				}
			}
		}
	}
}

// keyRun is one random run of the key property test: its records, and
// where it restarted (the LSNs after which the state was rebuilt from an
// image).
type keyRun struct {
	recs     []state.Record
	restarts []int
	final    *state.State
}

// runKeys makes a random run of n steps on limitedKey with keys: submits
// (some delayed, with priorities), leases as the coordinator takes them
// (every task Schedulable offers must apply), grants of random tasks that
// apply exactly when the model admits them, commits, completions,
// failures (retried or for good), snoozes, expiries, kills, operator
// retries, purges, pauses, changes of the key and queue limits, restarts
// from an image, and a clock that mostly moves forward but sometimes
// jumps back. After every grant no key is over its limits.
func runKeys(t *testing.T, seed uint64, n int, rate bool) keyRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 37))
	s := state.New()
	m := keyModel{s}
	var run keyRun
	now := state.Time(time.Hour)
	ids, leases := 0, 0
	buckets := &bucketCheck{t: t, seed: seed}
	buckets.reset(0, 0)
	apply := func(r state.Record) error {
		old := keyLimitsAt(s)
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
		run.recs = append(run.recs, r)
		if err := s.Invariants(); err != nil {
			t.Fatalf("seed %d after %T: %v", seed, r, err)
		}
		switch r := r.(type) {
		case *state.QueueLimited:
			if k := keyLimitsAt(s); k.RateMilli != old.RateMilli || k.Burst != old.Burst {
				buckets.reset(k.RateMilli, k.Burst)
			}
		case *state.LeaseGranted:
			buckets.granted(s.KeyOf(s.Task(r.TaskID)), r.GrantedAt)
		case *state.TasksPurgedRange:
			buckets.purged(s, r.At)
		}
		return nil
	}
	pick := func(ok func(*state.Task) bool) *state.Task {
		var c []*state.Task
		s.Scan(0, func(t *state.Task) bool {
			if ok(t) {
				c = append(c, t)
			}
			return true
		})
		if len(c) == 0 {
			return nil
		}
		return c[rng.IntN(len(c))]
	}
	live := func(t *state.Task) bool { return t.CurrentLease() != nil && now < t.CurrentLease().LeaseExpiry }
	granted := func(task *state.Task, r *state.LeaseGranted, set state.KeyLimits) {
		m.checkGrant(seed, t, s.Task(task.ID), set)
	}
	for range n {
		if rng.IntN(12) == 0 {
			now = now.Add(-time.Duration(rng.IntN(5000)) * time.Millisecond) // the clock jumps back
		} else {
			now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		}
		switch rng.IntN(20) {
		case 0, 1, 2, 3:
			ids++
			r := keyedTask(fmt.Sprint("t", ids), propertyKeys[rng.IntN(len(propertyKeys))], now)
			r.Priority = int32(rng.IntN(3))
			if rng.IntN(5) == 0 {
				r.NotBefore = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			}
			apply(r)
		case 4, 5, 6:
			// As the coordinator leases: what Schedulable offers.
			set := keyLimitsAt(s)
			for _, task := range s.Schedulable(limitedKey, now, 1+rng.IntN(6)) {
				leases++
				r := grant(task.ID, fmt.Sprint("l", leases), task.Attempt+1, now)
				if err := apply(r); err != nil {
					t.Fatalf("seed %d: a grant Schedulable offered does not apply: %v", seed, err)
				}
				granted(task, r, set)
			}
		case 7:
			// A grant of any due task: applies exactly when the limits
			// admit it.
			task := pick(func(t *state.Task) bool {
				return t.Schedulable() && (t.State != state.Waiting || t.NotBefore <= now)
			})
			if task == nil || s.Paused(limitedKey) != nil {
				continue
			}
			leases++
			r := grant(task.ID, fmt.Sprint("l", leases), task.Attempt+1, now)
			set := keyLimitsAt(s)
			admits := s.Admits(limitedKey, now) && m.admits(task)
			err := apply(r)
			// With a key rate the bucket may refuse too (bucketCheck
			// checks its bound).
			if err == nil && !admits || !rate && err != nil && admits {
				t.Fatalf("seed %d: the model admits %s: %v, the grant: %v", seed, task.ID, admits, err)
			}
			if err == nil {
				granted(task, r, set)
			}
		case 8, 9:
			if task := pick(live); task != nil {
				apply(&state.TaskCompleted{TaskID: task.ID, LeaseID: task.CurrentLease().LeaseID, At: now})
			}
		case 10:
			if task := pick(func(t *state.Task) bool { return live(t) && t.State == state.Leased }); task != nil {
				apply(&state.TaskFailed{TaskID: task.ID, LeaseID: task.CurrentLease().LeaseID, Reason: "x",
					RetryAt: now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond), Permanent: rng.IntN(4) == 0, At: now})
			}
		case 11:
			if task := pick(func(t *state.Task) bool { return live(t) && t.State == state.Leased }); task != nil {
				apply(&state.TaskCommitted{TaskID: task.ID, LeaseID: task.CurrentLease().LeaseID, At: now})
			}
		case 12:
			if task := pick(func(t *state.Task) bool { return t.CurrentLease() != nil }); task != nil {
				cur := task.CurrentLease()
				apply(&state.LeaseExpired{TaskID: task.ID, LeaseID: cur.LeaseID, At: max(now, cur.LeaseExpiry), RetryAt: max(now, cur.LeaseExpiry)})
			}
		case 13:
			if task := pick(func(t *state.Task) bool { return live(t) && t.State == state.Leased }); task != nil {
				apply(&state.TaskSnoozed{TaskID: task.ID, LeaseID: task.CurrentLease().LeaseID, At: now,
					NotBefore: now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)})
			}
		case 14:
			switch rng.IntN(3) {
			case 0:
				if task := pick(func(t *state.Task) bool { return !t.State.Terminal() }); task != nil {
					apply(&state.TaskDead{TaskID: task.ID, Reason: "ops", At: now})
				}
			case 1:
				if task := pick(func(t *state.Task) bool {
					return (t.State == state.Failed || t.State == state.Dead) && t.CommittedBy == ""
				}); task != nil {
					apply(&state.TaskRetried{TaskID: task.ID, At: now})
				}
			case 2:
				apply(&state.TasksPurgedRange{Before: now.Add(-2 * time.Second), At: now, ThroughLSN: s.LastLSN()})
			}
		case 15, 16:
			k := state.KeyLimits{Fair: rng.IntN(2) == 0}
			switch rng.IntN(4) {
			case 0:
				k.MaxConcurrency = uint32(1 + rng.IntN(3))
			case 1:
				k.Ordered = true
				if rng.IntN(2) == 0 {
					k.MaxConcurrency = 1
				}
			case 2:
				k.MaxConcurrency = uint32(1 + rng.IntN(2))
				k.Ordered = k.MaxConcurrency == 1 && rng.IntN(2) == 0
			}
			if rate && rng.IntN(3) > 0 {
				k.RateMilli, k.Burst = uint64(200+rng.IntN(3000)), uint32(1+rng.IntN(3))
			}
			r := keyLimit(k, now)
			if rng.IntN(4) == 0 {
				r.MaxConcurrency, r.QueueMaxConcurrency, r.Partitions = 4, 4, 1
			}
			apply(r)
		case 17:
			if s.Paused(limitedKey) == nil {
				if rng.IntN(4) == 0 {
					apply(&state.QueuePaused{Namespace: "n", Queue: "q", At: now})
				}
			} else {
				apply(&state.QueueResumed{Namespace: "n", Queue: "q", At: now})
			}
		case 18:
			// A restart: the state is rebuilt from an image of itself.
			restored := restore(t, s.Image())
			sameKeys(t, seed, "restarted", s, restored)
			s = restored
			m = keyModel{s}
			run.restarts = append(run.restarts, len(run.recs))
		case 19:
			now = now.Add(time.Duration(rng.IntN(10)) * time.Second)
		}
	}
	buckets.check()
	run.final = s
	return run
}

// TestKeyProperty is the acceptance property of key limits: on random runs
// (runKeys), no key ever exceeds its max concurrency, an ordered key never
// has two tasks leased nor one leased before an older open task, a grant
// applies exactly when the limits admit it and a refused one changes
// nothing; and the state replayed from the log, the one restored from an
// image taken at any record and replayed from there, and the live one
// (restarted from images along the way) export equal and offer the same
// tasks.
func TestKeyProperty(t *testing.T) {
	for seed := range keySeedCount() {
		checkReplays(t, seed, runKeys(t, seed, 700, false))
	}
}

// TestKeyRateProperty is TestKeyProperty with key rates and bursts among
// the limits: besides the rest, no key is granted more than its bucket
// allows in any window (bucketCheck).
func TestKeyRateProperty(t *testing.T) {
	for seed := range keySeedCount() {
		checkReplays(t, seed, runKeys(t, 1000+seed, 700, true))
	}
}

// checkReplays replays a run from the start, and from an image at a few
// cut points, and compares both with the run's restarts.
func checkReplays(t *testing.T, seed uint64, run keyRun) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 41))
	cuts := append([]int{len(run.recs) / 2}, run.restarts...)
	cuts = append(cuts, rng.IntN(len(run.recs)+1))
	replayed := state.New()
	for i, r := range run.recs {
		if err := replayed.Apply(uint64(i+1), r); err != nil {
			t.Fatalf("seed %d: replay of record %d: %v", seed, i+1, err)
		}
	}
	sameKeys(t, seed, "the live state (with restarts) against a replay", replayed, run.final)
	for _, cut := range cuts {
		half := state.New()
		for i, r := range run.recs[:cut] {
			if err := half.Apply(uint64(i+1), r); err != nil {
				t.Fatal(err)
			}
		}
		restored := restore(t, half.Image())
		for i := cut; i < len(run.recs); i++ {
			if err := restored.Apply(uint64(i+1), run.recs[i]); err != nil {
				t.Fatalf("seed %d: record %d after an image at %d: %v", seed, i+1, cut, err)
			}
		}
		sameKeys(t, seed, fmt.Sprintf("replayed from an image at %d", cut), replayed, restored)
		for d := range 5 {
			at := state.Time(time.Hour).Add(time.Duration(d*d) * time.Minute)
			if a, b := ids(replayed.Schedulable(limitedKey, at, 20)), ids(restored.Schedulable(limitedKey, at, 20)); !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d: at %v the replayed state offers %v, the restored one %v", seed, at, a, b)
			}
		}
	}
}

// TestKeyBucketOutlivesItsTasks: a key whose tasks all finished keeps its
// bucket while it is not full, so that a new task of the key cannot start
// with a full one; the first purge at or after the time it is full again
// forgets it.
func TestKeyBucketOutlivesItsTasks(t *testing.T) {
	s := state.New()
	apply, must := appliers(t, s)
	sec := state.Time(time.Second)
	ms := state.Time(time.Millisecond)
	must(limitedTask("other", sec))
	must(keyLimit(state.KeyLimits{RateMilli: 1000, Burst: 1}, sec))
	withKey := s.HeldBytes()
	must(keyedTask("a1", "k", sec))
	must(grant("a1", "l1", 1, sec))
	must(&state.TaskCompleted{TaskID: "a1", LeaseID: "l1", At: sec + 100*ms})
	must(keyedTask("a2", "k", sec+200*ms))
	if got := ids(s.Schedulable(limitedKey, sec+300*ms, 10)); !reflect.DeepEqual(got, []string{"other"}) {
		t.Fatalf("Schedulable offers %v with k's bucket empty", got)
	}
	if err := apply(grant("a2", "l2", 1, sec+300*ms)); !errors.Is(err, state.ErrPrecondition) || !strings.Contains(err.Error(), "empty token bucket") {
		t.Fatalf("a grant of k with its bucket empty: %v", err)
	}
	if next, ok := s.NextReady(limitedKey); !ok || next != 2*sec {
		t.Fatalf("NextReady = %v, %v; want k's next token at %v", next, ok, 2*sec)
	}
	must(grant("a2", "l2", 1, 2*sec))
	must(&state.TaskCompleted{TaskID: "a2", LeaseID: "l2", At: 2*sec + 100*ms})
	must(&state.TasksPurged{Before: 0, At: 2*sec + 500*ms})
	if q := s.Export().Queues[0]; q.Keys == nil || len(q.Keys.States) != 1 {
		t.Fatalf("the purge half a second before k's bucket is full forgot it: %+v", q.Keys)
	}
	must(&state.TasksPurged{Before: 3 * sec, At: 3 * sec})
	if q := s.Export().Queues[0]; q.Keys != nil && len(q.Keys.States) != 0 {
		t.Fatalf("the purge once k's bucket is full kept it: %+v", q.Keys.States)
	}
	if got := s.HeldBytes(); got != withKey {
		t.Fatalf("HeldBytes %d once k is forgotten, want %d", got, withKey)
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}

// TestFairBound checks the bound of fair leasing (docs/design/keys.md,
// "Fair leasing") on random runs: one key with a large backlog, small keys
// that come and go, tasks without a key, leases taken as the coordinator
// takes them (batches of what Schedulable offers) and completions; every
// other seed with random weights. While a key k has a task waiting
// throughout, another key b is leased at most ⌊s_k/s_b⌋ + 1 times between
// two leases of k (s = Stride/weight: twice with equal weights); and a
// key that gets its first open task is leased before any other key is
// leased twice.
func TestFairBound(t *testing.T) {
	for seed := range keySeedCount() / 2 {
		rng := rand.New(rand.NewPCG(seed, 43))
		s := state.New()
		_, must := appliers(t, s)
		now := state.Time(time.Hour)
		limits := keyLimit(state.KeyLimits{Fair: true}, now)
		weight := map[string]uint32{}
		if seed%2 == 1 {
			for _, key := range []string{"big", "small0", "small3", "small7", "small11"} {
				w := uint32(2 + rng.IntN(9))
				weight[key] = w
				limits.KeyWeights = append(limits.KeyWeights, state.KeyWeight{Key: key, Weight: w})
			}
			slices.SortFunc(limits.KeyWeights, func(a, b state.KeyWeight) int { return strings.Compare(a.Key, b.Key) })
		}
		step := func(key string) uint64 {
			if w, ok := weight[key]; ok {
				return state.Stride / uint64(w)
			}
			return state.Stride
		}
		must(limits)
		ids, leases := 0, 0
		submit := func(key string) {
			ids++
			must(keyedTask(fmt.Sprint("t", ids), key, now))
		}
		for range 300 {
			submit("big")
		}
		// since[k][b] counts the leases of key b since key k's last lease
		// (or its arrival), while k has had a task waiting throughout.
		since := map[string]map[string]int{}
		arrived := map[string]bool{}
		waiting := func(key string) int {
			n := 0
			s.Scan(0, func(t *state.Task) bool {
				if t.State == state.Waiting && s.KeyOf(t) == key {
					n++
				}
				return true
			})
			return n
		}
		open := func(key string) bool {
			o := false
			s.Scan(0, func(t *state.Task) bool {
				if !t.State.Terminal() && s.KeyOf(t) == key {
					o = true
					return false
				}
				return true
			})
			return o
		}
		keys := []string{"big", ""}
		for i := range 12 {
			keys = append(keys, fmt.Sprint("small", i))
		}
		for range 1500 {
			now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
			switch rng.IntN(6) {
			case 0:
				key := keys[1+rng.IntN(len(keys)-1)]
				if !open(key) {
					arrived[key] = true
					since[key] = map[string]int{}
				}
				for range 1 + rng.IntN(3) {
					submit(key)
				}
				if since[key] == nil {
					since[key] = map[string]int{}
				}
			case 1, 2:
				for _, task := range s.Schedulable(limitedKey, now, 1+rng.IntN(8)) {
					leases++
					b := s.KeyOf(task)
					must(grant(task.ID, fmt.Sprint("l", leases), task.Attempt+1, now))
					for k, m := range since {
						if k == b {
							continue
						}
						m[b]++
						limit := int(step(k)/step(b)) + 1
						if arrived[k] {
							limit = 1
						}
						if m[b] > limit {
							t.Fatalf("seed %d: key %q (arrived: %v) waited behind %d leases of key %q", seed, k, arrived[k], m[b], b)
						}
					}
					since[b] = map[string]int{}
					arrived[b] = false
					if waiting(b) == 0 {
						delete(since, b)
					}
				}
			default:
				var leased []*state.Task
				s.Scan(0, func(t *state.Task) bool {
					if t.CurrentLease() != nil {
						leased = append(leased, t)
					}
					return true
				})
				if len(leased) > 0 {
					task := leased[rng.IntN(len(leased))]
					cur := task.CurrentLease()
					if now < cur.LeaseExpiry {
						must(&state.TaskCompleted{TaskID: task.ID, LeaseID: cur.LeaseID, At: now})
					} else {
						must(&state.TaskFailed{TaskID: task.ID, LeaseID: cur.LeaseID, Reason: "x", Permanent: true, At: cur.LeaseExpiry - 1})
					}
				}
			}
			if waiting("big") < 50 {
				for range 100 {
					submit("big")
				}
			}
		}
		if err := s.Invariants(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeyHoldsAndTopKeys: a queue's statistics count its keys and those a
// limit holds back, by limit, and TopKeys lists the keys with the most
// waiting tasks with what holds each.
func TestKeyHoldsAndTopKeys(t *testing.T) {
	s := state.New()
	_, must := appliers(t, s)
	sec := state.Time(time.Second)
	for i := range 5 {
		must(keyedTask(fmt.Sprint("big", i), "big", sec))
	}
	for i := range 3 {
		must(keyedTask(fmt.Sprint("mid", i), "mid", sec))
	}
	must(keyedTask("one", "one", sec))
	must(keyLimit(state.KeyLimits{MaxConcurrency: 1, RateMilli: 1000, Burst: 1}, sec))
	must(grant("big0", "l0", 1, sec))
	must(grant("mid0", "l1", 1, sec))
	q, _ := s.Queue(limitedKey, sec)
	if q.Keys == nil || q.Keys.Keys != 3 || q.Keys.Held[state.HoldConcurrency] != 2 || q.Keys.Holds[state.HoldConcurrency] != 2 {
		t.Fatalf("key counts %+v; want 3 keys, 2 held by their concurrency", q.Keys)
	}
	want := []state.KeyStats{{Key: "big", Waiting: 4, Leased: 1, Held: state.HoldConcurrency}, {Key: "mid", Waiting: 2, Leased: 1, Held: state.HoldConcurrency}}
	if got := s.TopKeys(limitedKey, sec, 2); !reflect.DeepEqual(got, want) {
		t.Fatalf("TopKeys = %+v, want %+v", got, want)
	}
	must(&state.TaskCompleted{TaskID: "big0", LeaseID: "l0", At: sec.Add(100 * time.Millisecond)})
	q, _ = s.Queue(limitedKey, 2*sec)
	if q.Keys.Held[state.HoldConcurrency] != 1 || q.Keys.Held[state.HoldRate] != 1 || q.Keys.Holds[state.HoldRate] != 1 {
		t.Fatalf("key counts %+v after big's lease ended with its bucket empty; want 1 held by concurrency, 1 by rate", q.Keys)
	}
	if got := s.TopKeys(limitedKey, 3*sec, 1); len(got) != 1 || got[0].Key != "big" || got[0].Held != state.HoldNone {
		t.Fatalf("TopKeys once big's token arrived = %+v", got)
	}
}

// TestFairWeights: with fair leasing and weights 3 and 1, two keys that
// always have tasks waiting are leased three times as often as the other
// (to within one turn), the tasks without a key as a key of weight 1; a
// weight set again applies from the next lease, and a restored state
// keeps the weights.
func TestFairWeights(t *testing.T) {
	s := state.New()
	_, must := appliers(t, s)
	sec := state.Time(time.Second)
	limits := keyLimit(state.KeyLimits{Fair: true}, sec)
	limits.KeyWeights = []state.KeyWeight{{Key: "gold", Weight: 3}}
	must(limits)
	for i := range 500 {
		must(keyedTask(fmt.Sprint("g", i), "gold", sec))
		must(keyedTask(fmt.Sprint("b", i), "basic", sec))
		must(limitedTask(fmt.Sprint("u", i), sec))
	}
	leases := 0
	count := func(n int) map[string]int {
		got := map[string]int{}
		for range n {
			ts := s.Schedulable(limitedKey, 2*sec, 1)
			if len(ts) != 1 {
				t.Fatalf("Schedulable offers %d tasks", len(ts))
			}
			leases++
			must(grant(ts[0].ID, fmt.Sprint("l", leases), 1, 2*sec))
			got[s.KeyOf(ts[0])]++
		}
		return got
	}
	got := count(500)
	if g, b, u := got["gold"], got["basic"], got[""]; g < 297 || g > 303 || b < 98 || b > 102 || u < 98 || u > 102 {
		t.Fatalf("500 leases went %v; want gold 300, basic 100, the tasks without a key 100 (weights 3, 1, 1)", got)
	}
	if w := s.KeyWeights(limitedKey); !reflect.DeepEqual(w, []state.KeyWeight{{Key: "gold", Weight: 3}}) {
		t.Fatalf("KeyWeights = %v", w)
	}
	restored := restore(t, s.Image())
	if w := restored.KeyWeights(limitedKey); !reflect.DeepEqual(w, []state.KeyWeight{{Key: "gold", Weight: 3}}) {
		t.Fatalf("the restored state's KeyWeights = %v", w)
	}
	// Weights cleared: equal turns from the next lease on.
	must(keyLimit(state.KeyLimits{Fair: true}, 2*sec))
	got = count(300)
	if g, b, u := got["gold"], got["basic"], got[""]; g < 98 || g > 102 || b < 98 || b > 102 || u < 98 || u > 102 {
		t.Fatalf("300 leases without weights went %v; want 100 each", got)
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}
