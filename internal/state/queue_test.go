package state_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// tally recounts queue statistics from scratch: events from the records
// applied, everything else from the tasks of the state.
type tally struct {
	queueOf map[string]state.QueueKey
	events  map[state.QueueKey][]event
	paused  map[state.QueueKey]*state.Pause
	limits  map[state.QueueKey]*state.QueueLimits
	weights map[state.QueueKey][]state.KeyWeight
}

type event struct {
	e  state.Event
	at state.Time
}

func newTally() *tally {
	return &tally{queueOf: map[string]state.QueueKey{}, events: map[state.QueueKey][]event{}, paused: map[state.QueueKey]*state.Pause{},
		limits: map[state.QueueKey]*state.QueueLimits{}, weights: map[state.QueueKey][]state.KeyWeight{}}
}

// applied notes record r, which s has just applied.
func (ty *tally) applied(s *state.State, r state.Record) {
	add := func(id string, e state.Event, at state.Time) {
		k := ty.queueOf[id]
		ty.events[k] = append(ty.events[k], event{e, at})
	}
	failed := func(id string, at state.Time) {
		if t := s.Task(id); t != nil && t.State == state.Failed {
			add(id, state.EventFailed, at)
		}
	}
	created := func(rs []state.TaskCreated) {
		for _, r := range rs {
			ty.queueOf[r.TaskID] = state.QueueKey{Namespace: r.Namespace, Queue: r.Queue}
			add(r.TaskID, state.EventSubmitted, r.CreatedAt)
		}
	}
	switch r := r.(type) {
	case *state.TaskCreated:
		created([]state.TaskCreated{*r})
	case *state.TasksSubmitted:
		created(r.Tasks)
	case *state.TaskCommitted:
		created(r.Spawn)
	case *state.ScheduleFired:
		ty.queueOf[r.TaskID] = state.QueueKey{Namespace: r.Namespace, Queue: r.Queue}
		add(r.TaskID, state.EventSubmitted, r.At)
	case *state.TaskCompleted:
		add(r.TaskID, state.EventCompleted, r.At)
		created(r.Spawn)
	case *state.TaskFailed:
		failed(r.TaskID, r.At)
	case *state.TaskDeadlineExceeded:
		add(r.TaskID, state.EventFailed, r.At)
	case *state.LeaseExpired:
		add(r.TaskID, state.EventLeaseExpired, r.At)
		failed(r.TaskID, r.At)
	case *state.QueuePaused:
		ty.paused[state.QueueKey{Namespace: r.Namespace, Queue: r.Queue}] = &state.Pause{By: r.By, Reason: r.Reason, At: r.At}
	case *state.QueueResumed:
		delete(ty.paused, state.QueueKey{Namespace: r.Namespace, Queue: r.Queue})
	case *state.QueueLimited:
		k := state.QueueKey{Namespace: r.Namespace, Queue: r.Queue}
		if l := r.Limits(); l.Limits.None() && l.Keys.None() {
			delete(ty.limits, k)
		} else {
			ty.limits[k] = &l
		}
		ty.weights[k] = r.KeyWeights
	}
}

// want is the recount of every queue at now; queues with nothing to report
// are left out.
func (ty *tally) want(s *state.State, now state.Time) map[state.QueueKey]state.QueueStats {
	out := map[state.QueueKey]state.QueueStats{}
	get := func(k state.QueueKey) state.QueueStats {
		q, ok := out[k]
		if !ok {
			q.Key, q.Now = k, now
		}
		return q
	}
	s.Scan(0, func(t *state.Task) bool {
		k := state.QueueKey{Namespace: t.Namespace, Queue: t.Queue}
		q := get(k)
		q.Tasks[t.State]++
		if t.CurrentLease() != nil {
			q.Leases++
		}
		if t.State == state.Waiting {
			due := max(t.CreatedAt, t.NotBefore) / state.Time(time.Millisecond) * state.Time(time.Millisecond)
			if due <= now && (q.OldestDue == 0 || due < q.OldestDue) {
				q.OldestDue = due
			}
		}
		out[k] = q
		return true
	})
	const sec, minute = int64(10 * time.Second), int64(time.Minute)
	for k, evs := range ty.events {
		q := get(k)
		for _, ev := range evs {
			f, c := int64(ev.at)/sec, int64(ev.at)/minute
			nf, nc := int64(now)/sec, int64(now)/minute
			if f > nf-6 && f <= nf {
				q.LastMinute[ev.e]++
			}
			if c > nc-5 && c <= nc {
				q.Last5Minutes[ev.e]++
			}
			if c > nc-60 && c <= nc {
				q.LastHour[ev.e]++
				q.PerMinute[59-(nc-c)][ev.e]++
			}
		}
		out[k] = q
	}
	for k, p := range ty.paused {
		q := get(k)
		q.Paused = p
		out[k] = q
	}
	for k, l := range ty.limits {
		q := get(k)
		q.Limits = l
		out[k] = q
	}
	for k, ws := range ty.weights {
		if len(ws) > 0 {
			q := get(k)
			q.KeyWeights = ws
			out[k] = q
		}
	}
	for k, q := range out {
		if q.Total() == 0 && q.Paused == nil && q.Limits == nil && len(q.KeyWeights) == 0 && q.LastHour == (state.EventCounts{}) {
			delete(out, k)
		}
	}
	return out
}

func checkQueues(t *testing.T, what string, s *state.State, want map[state.QueueKey]state.QueueStats, now state.Time) {
	t.Helper()
	got := s.Queues(now)
	seen := map[state.QueueKey]bool{}
	for _, q := range got {
		seen[q.Key] = true
		w, ok := want[q.Key]
		if !ok {
			w = state.QueueStats{Key: q.Key, Now: now}
		}
		// The keys with an unfinished task are recounted; what holds them
		// is as they were last placed, which depends on when leases were
		// asked for (keys_test.go checks it).
		if w.Keys = recountKeys(s, q.Key); w.Keys != nil && q.Keys != nil {
			w.Keys.Held, w.Keys.Holds = q.Keys.Held, q.Keys.Holds
		}
		if !reflect.DeepEqual(q, w) {
			t.Fatalf("%s: queue %v:\n got %+v\nwant %+v", what, q.Key, q, w)
		}
		if one, ok := s.Queue(q.Key, now); !ok || !reflect.DeepEqual(one, q) {
			t.Fatalf("%s: Queue(%v) disagrees with Queues", what, q.Key)
		}
	}
	for k := range want {
		if !seen[k] {
			t.Fatalf("%s: queue %v is missing; want %+v", what, k, want[k])
		}
	}
}

// recountKeys counts the keys of queue k that have an unfinished task; nil
// for a queue without a key index (no task with a key and no key limits).
func recountKeys(s *state.State, k state.QueueKey) *state.KeyCounts {
	open := map[string]bool{}
	keyed := false
	s.Scan(0, func(t *state.Task) bool {
		if key := s.KeyOf(t); key != "" && t.Namespace == k.Namespace && t.Queue == k.Queue {
			keyed = true
			if !t.State.Terminal() {
				open[key] = true
			}
		}
		return true
	})
	l, _ := s.Limits(k)
	if !keyed && l.Keys.None() && len(s.KeyWeights(k)) == 0 {
		return nil
	}
	return &state.KeyCounts{Keys: len(open)}
}

// TestQueueStatsAreExact: after random records, the statistics of every
// queue equal a recount (over the tasks, and over the records for the
// event counts), at several times; and so do those of the state replayed
// from the same records, and of the state restored from an Image taken
// half way with the rest replayed on it.
func TestQueueStatsAreExact(t *testing.T) {
	for seed := range uint64(60) {
		g := statetest.New(seed)
		live, ty := state.New(), newTally()
		n := 200 + int(seed)*20
		var recs []state.Record
		var img *state.Image
		for i := range n {
			r := g.Next(live)
			if err := live.Apply(live.LastLSN()+1, r); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			ty.applied(live, r)
			recs = append(recs, r)
			if i == n/2 {
				img = live.Image()
			}
			if i%50 == 0 {
				checkQueues(t, "live", live, ty.want(live, g.Now()), g.Now())
			}
		}
		if err := live.Invariants(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		replayed := state.New()
		for i, r := range recs {
			if err := replayed.Apply(uint64(i+1), r); err != nil {
				t.Fatalf("seed %d: replay: %v", seed, err)
			}
		}
		restored := restore(t, img)
		for i := img.LastLSN; i < uint64(len(recs)); i++ {
			if err := restored.Apply(i+1, recs[i]); err != nil {
				t.Fatalf("seed %d: replay after the image: %v", seed, err)
			}
		}
		for _, at := range []time.Duration{0, 7 * time.Second, 45 * time.Second, 4 * time.Minute, 59 * time.Minute, 2 * time.Hour} {
			now := g.Now().Add(at)
			want := ty.want(live, now)
			checkQueues(t, "live", live, want, now)
			checkQueues(t, "replayed", replayed, want, now)
			checkQueues(t, "snapshot and replay", restored, want, now)
		}
		if !reflect.DeepEqual(live.Export(), restored.Export()) || !reflect.DeepEqual(live.Export(), replayed.Export()) {
			t.Fatalf("seed %d: states differ", seed)
		}
	}
}

// appliers return apply, which applies a record to s at the next LSN and
// returns its error (an LSN a refused record did not take is used again),
// and must, which fails the test if it does not apply.
func appliers(t *testing.T, s *state.State) (apply func(state.Record) error, must func(state.Record)) {
	apply = func(r state.Record) error {
		return s.Apply(s.LastLSN()+1, r)
	}
	must = func(r state.Record) {
		t.Helper()
		if err := apply(r); err != nil {
			t.Fatal(err)
		}
	}
	return apply, must
}

// TestPausedQueueLeasesOnlyFinalisations: a paused queue offers nothing but
// COMMITTED tasks to finalise, a LeaseGranted of a waiting task of it does
// not apply, and resuming offers its tasks again.
func TestPausedQueueLeasesOnlyFinalisations(t *testing.T) {
	s := state.New()
	apply, must := appliers(t, s)
	sec := state.Time(time.Second)
	for _, id := range []string{"a", "b"} {
		must(&state.TaskCreated{TaskID: id, Namespace: "n", Queue: "q", ExecutionWindow: 10 * time.Second,
			Retry: state.RetryPolicy{MaxAttempts: 1, Multiplier: 1}, CreatedAt: sec})
	}
	must(&state.LeaseGranted{TaskID: "a", LeaseID: "l1", WorkerID: "w", Attempt: 1, GrantedAt: 2 * sec, LeaseExpiry: 12 * sec})
	must(&state.TaskCommitted{TaskID: "a", LeaseID: "l1", At: 3 * sec})
	must(&state.LeaseExpired{TaskID: "a", LeaseID: "l1", At: 12 * sec})
	k := state.QueueKey{Namespace: "n", Queue: "q"}
	must(&state.QueuePaused{Namespace: "n", Queue: "q", By: "ops", Reason: "incident", At: 13 * sec})
	if err := apply(&state.QueuePaused{Namespace: "n", Queue: "q", At: 13 * sec}); err == nil {
		t.Fatal("a second pause applied")
	}
	got := s.Schedulable(k, 14*sec, 10)
	if len(got) != 1 || got[0].ID != "a" {
		t.Fatalf("paused queue offers %v, want only the committed task a", ids(got))
	}
	if err := apply(&state.LeaseGranted{TaskID: "b", LeaseID: "l2", WorkerID: "w", Attempt: 1, GrantedAt: 14 * sec, LeaseExpiry: 24 * sec}); err == nil {
		t.Fatal("a waiting task of a paused queue was leased")
	}
	must(&state.LeaseGranted{TaskID: "a", LeaseID: "l3", WorkerID: "w", Attempt: 2, GrantedAt: 14 * sec, LeaseExpiry: 24 * sec})
	if got := s.Schedulable(k, 15*sec, 10); len(got) != 0 {
		t.Fatalf("paused queue offers %v, want nothing", ids(got))
	}
	if q, _ := s.Queue(k, 15*sec); q.Paused == nil || q.Paused.By != "ops" || q.Paused.Reason != "incident" {
		t.Fatalf("pause %+v", q.Paused)
	}
	must(&state.QueueResumed{Namespace: "n", Queue: "q", At: 16 * sec})
	if got := s.Schedulable(k, 16*sec, 10); len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("resumed queue offers %v, want b", ids(got))
	}
	if err := apply(&state.QueueResumed{Namespace: "n", Queue: "q", At: 17 * sec}); err == nil {
		t.Fatal("a resume of a queue that is not paused applied")
	}
}

// TestRetryGivesAFreshBudget: a FAILED task retried waits again, keeps its
// executions, and has its policy's attempts anew; a COMPLETED task, a
// committed-then-killed one and a waiting one are refused.
func TestRetryGivesAFreshBudget(t *testing.T) {
	s := state.New()
	apply, must := appliers(t, s)
	sec := state.Time(time.Second)
	policy := state.RetryPolicy{MaxAttempts: 2, Multiplier: 1}
	must(&state.TaskCreated{TaskID: "a", Namespace: "n", Queue: "q", ExecutionWindow: 10 * time.Second, Retry: policy, CreatedAt: sec})
	if err := apply(&state.TaskRetried{TaskID: "a", At: sec}); err == nil {
		t.Fatal("a waiting task was retried")
	}
	for i := uint32(1); i <= 2; i++ {
		l := string(rune('0' + i))
		must(&state.LeaseGranted{TaskID: "a", LeaseID: l, WorkerID: "w", Attempt: i, GrantedAt: 2 * sec, LeaseExpiry: 12 * sec})
		must(&state.TaskFailed{TaskID: "a", LeaseID: l, Reason: "boom", RetryAt: 2 * sec, At: 3 * sec})
	}
	if st := s.Task("a").State; st != state.Failed {
		t.Fatalf("after 2 of 2 attempts: %s", st)
	}
	must(&state.TaskRetried{TaskID: "a", By: "ops", Reason: "fixed the bug", At: 4 * sec})
	a := s.Task("a")
	if a.State != state.Waiting || len(a.Executions) != 2 || a.FailureReason != "" || !a.AttemptsLeft() {
		t.Fatalf("retried task: %s, %d executions, reason %q", a.State, len(a.Executions), a.FailureReason)
	}
	// It waits since the retry, not since its creation.
	if q, _ := s.Queue(state.QueueKey{Namespace: "n", Queue: "q"}, 10*sec); q.OldestDue != 4*sec {
		t.Fatalf("oldest waiting task due since %v, want the retry at %v", q.OldestDue, 4*sec)
	}
	must(&state.LeaseGranted{TaskID: "a", LeaseID: "3", WorkerID: "w", Attempt: 3, GrantedAt: 5 * sec, LeaseExpiry: 15 * sec})
	must(&state.TaskFailed{TaskID: "a", LeaseID: "3", Reason: "boom", RetryAt: 5 * sec, At: 6 * sec})
	if st := s.Task("a").State; st != state.Waiting {
		t.Fatalf("first attempt after the retry failed: %s, want WAITING (a second one is left)", st)
	}
	must(&state.LeaseGranted{TaskID: "a", LeaseID: "4", WorkerID: "w", Attempt: 4, GrantedAt: 7 * sec, LeaseExpiry: 17 * sec})
	must(&state.TaskCompleted{TaskID: "a", LeaseID: "4", At: 8 * sec})
	if err := apply(&state.TaskRetried{TaskID: "a", At: 9 * sec}); err == nil {
		t.Fatal("a COMPLETED task was retried")
	}
	must(&state.TaskCreated{TaskID: "b", Namespace: "n", Queue: "q", ExecutionWindow: 10 * time.Second, Retry: policy, CreatedAt: sec})
	must(&state.LeaseGranted{TaskID: "b", LeaseID: "b1", WorkerID: "w", Attempt: 1, GrantedAt: 2 * sec, LeaseExpiry: 12 * sec})
	must(&state.TaskCommitted{TaskID: "b", LeaseID: "b1", At: 3 * sec})
	must(&state.TaskDead{TaskID: "b", Reason: "stop", At: 4 * sec})
	if err := apply(&state.TaskRetried{TaskID: "b", At: 5 * sec}); err == nil {
		t.Fatal("a task killed after its commit was retried")
	}
	if err := apply(&state.TaskRetried{TaskID: "nope", At: 5 * sec}); err == nil {
		t.Fatal("an unknown task was retried")
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}
