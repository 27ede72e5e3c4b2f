package state_test

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// restore rebuilds a State from an Image through a Loader, as a snapshot
// decoder does (with copies, so that nothing is shared with the original).
func restore(t *testing.T, img *state.Image) *state.State {
	t.Helper()
	l := state.NewLoader(img.LastLSN, img.Epoch)
	addEach(t, "AddSchedule", img.Schedules, l.AddSchedule)
	addEach(t, "AddQueue", img.Queues, l.AddQueue)
	addEach(t, "AddWorkflow", img.Workflows, l.AddWorkflow)
	addEach(t, "AddHold", img.Holds, l.AddHold)
	addEach(t, "AddDelivery", img.Deliveries, l.AddDelivery)
	for i, task := range img.Tasks {
		c := task.Clone()
		if err := l.Add(c, task.LeaseIndex(), img.Beside(i)); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	s, err := l.State()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Invariants(); err != nil {
		t.Fatalf("restored state: %v", err)
	}
	return s
}

// addEach adds every one of items with add (the Loader's method named
// what), failing t at a refusal.
func addEach[T any](t *testing.T, what string, items []T, add func(T) error) {
	t.Helper()
	for _, it := range items {
		if err := add(it); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// TestImageRestoreRoundTrip: for random states, the state rebuilt from an
// Image exports equal to the original, and keeps behaving identically when
// the same records are applied to both (so the derived indexes are right).
func TestImageRestoreRoundTrip(t *testing.T) {
	for seed := range uint64(40) {
		g := statetest.New(seed)
		orig := state.New()
		g.Run(orig, 50+int(seed)*10, t.Fatalf)
		img := orig.Image()
		got := restore(t, img)
		if !reflect.DeepEqual(orig.Export(), got.Export()) {
			t.Fatalf("seed %d: restored state differs from the original", seed)
		}
		if orig.HeldBytes() != got.HeldBytes() || got.HeldBytes() <= 0 {
			t.Fatalf("seed %d: the original holds %d bytes, the restored state %d", seed, orig.HeldBytes(), got.HeldBytes())
		}
		for range 200 {
			r := g.Next(orig)
			if err := orig.Apply(orig.LastLSN()+1, r); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if err := got.Apply(got.LastLSN()+1, r); err != nil {
				t.Fatalf("seed %d: restored state refused %T that the original took: %v", seed, r, err)
			}
			now := g.Now()
			for _, q := range []state.QueueKey{{Namespace: "default", Queue: "q1"}, {Namespace: "billing", Queue: "q2"}} {
				if a, b := ids(orig.Schedulable(q, now, 5)), ids(got.Schedulable(q, now, 5)); !reflect.DeepEqual(a, b) {
					t.Fatalf("seed %d: schedulable %v vs %v", seed, a, b)
				}
			}
			if a, b := ids(orig.Expired(now, 100)), ids(got.Expired(now, 100)); len(a) != len(b) {
				t.Fatalf("seed %d: expired %v vs %v", seed, a, b)
			}
		}
		if err := got.Invariants(); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(orig.Export(), got.Export()) {
			t.Fatalf("seed %d: states diverged after the same records", seed)
		}
		if orig.HeldBytes() != got.HeldBytes() {
			t.Fatalf("seed %d: after the same records the original holds %d bytes, the restored state %d", seed, orig.HeldBytes(), got.HeldBytes())
		}
	}
}

// TestImageIsAStableCopy: applying records after taking an Image does not
// change the Image.
func TestImageIsAStableCopy(t *testing.T) {
	g := statetest.New(7)
	s := state.New()
	g.Run(s, 300, t.Fatalf)
	img := s.Image()
	want := restore(t, img).Export()
	g.Run(s, 300, t.Fatalf)
	if got := restore(t, img).Export(); !reflect.DeepEqual(want, got) {
		t.Fatal("the Image changed when the state moved on")
	}
}

func ids(ts []*state.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// TestPurgeReplayDeterminism: the same records, purges included, give the
// same state, and a purge frees request ids for later records.
func TestPurgeReplayDeterminism(t *testing.T) {
	g := statetest.New(99)
	a := state.New()
	recs := g.Run(a, 3000, t.Fatalf)
	purges, reused := 0, 0
	seen := map[string]bool{}
	for _, r := range recs {
		switch r := r.(type) {
		case *state.TasksPurged:
			purges++
		case *state.TaskCreated:
			if r.RequestID != "" {
				k := r.Namespace + "/" + r.RequestID
				if seen[k] {
					reused++
				}
				seen[k] = true
			}
		}
	}
	if purges == 0 || reused == 0 {
		t.Fatalf("generator produced %d purges and %d reused request ids; the test needs both", purges, reused)
	}
	b := state.New()
	for i, r := range recs {
		if err := b.Apply(uint64(i+1), r); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(a.Export(), b.Export()) {
		t.Fatal("replay of the same records differs")
	}
	if a.HeldBytes() != b.HeldBytes() {
		t.Fatalf("the state holds %d bytes, its replay %d", a.HeldBytes(), b.HeldBytes())
	}
	if err := b.Invariants(); err != nil {
		t.Fatal(err)
	}
}

func TestLoaderRejects(t *testing.T) {
	task := func(mod func(*state.Task)) *state.Task {
		tk := &state.Task{ID: "a", QueueKey: &state.QueueKey{Namespace: "n", Queue: "q"},
			Policy:   &state.Policy{Window: time.Second, Retry: state.RetryPolicy{MaxAttempts: 1, Multiplier: 1}},
			Progress: &state.Progress{}, State: state.Waiting, CreatedLSN: 3}
		if mod != nil {
			mod(tk)
		}
		return tk
	}
	leased := func(tk *state.Task) {
		tk.State = state.Leased
		tk.Attempt = 1
		tk.Executions = []state.Execution{{Attempt: 1, LeaseID: "l", Status: state.ExecLeased}}
		tk.History = []uint64{3, 4}
	}
	for _, tc := range []struct {
		name  string
		tasks []*state.Task
		lease []int
		want  string
	}{
		{"no queue", []*state.Task{task(func(tk *state.Task) { tk.QueueKey = nil })}, []int{-1}, "namespace and queue must be set"},
		{"no policy", []*state.Task{task(func(tk *state.Task) { tk.Policy = nil })}, []int{-1}, "execution window and retry policy must be set"},
		{"empty id", []*state.Task{task(func(tk *state.Task) { tk.ID = "" })}, []int{-1}, "task id is empty"},
		{"duplicate id", []*state.Task{task(nil), task(func(tk *state.Task) { tk.CreatedLSN, tk.History = 4, []uint64{4} })}, []int{-1, -1}, "twice"},
		{"order", []*state.Task{task(nil), task(func(tk *state.Task) { tk.ID = "b" })}, []int{-1, -1}, "not after"},
		{"lsn after last", []*state.Task{task(func(tk *state.Task) { tk.CreatedLSN, tk.History = 11, []uint64{11} })}, []int{-1}, "outside"},
		{"bad state", []*state.Task{task(func(tk *state.Task) { tk.State = 42 })}, []int{-1}, "invalid state"},
		{"leased without lease", []*state.Task{task(leased)}, []int{-1}, "no lease"},
		{"lease index out of range", []*state.Task{task(leased)}, []int{3}, "outside"},
		{"waiting with lease", []*state.Task{task(func(tk *state.Task) { leased(tk); tk.State = state.Waiting })}, []int{0}, "holds lease"},
		{"bad exec status", []*state.Task{task(func(tk *state.Task) { leased(tk); tk.Executions[0].Status = 9 })}, []int{0}, "current execution is INVALID"},
		{"history", []*state.Task{task(func(tk *state.Task) { tk.History = []uint64{3, 3} })}, []int{-1}, "not increasing"},
		{"request id twice", []*state.Task{task(func(tk *state.Task) { tk.RequestID = "r" }),
			task(func(tk *state.Task) { tk.ID, tk.RequestID, tk.CreatedLSN, tk.History = "b", "r", 4, []uint64{4} })}, []int{-1, -1}, "request id"},
		{"lease twice", []*state.Task{task(leased),
			task(func(tk *state.Task) { leased(tk); tk.ID, tk.CreatedLSN, tk.History = "b", 5, []uint64{5, 6} })}, []int{0, 0}, "current for two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := state.NewLoader(10, 0)
			var err error
			for i, tk := range tc.tasks {
				if err = l.Add(tk, tc.lease[i], state.Beside{}); err != nil {
					break
				}
			}
			if err == nil {
				_, err = l.State()
			}
			if !errors.Is(err, state.ErrRestore) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrRestore saying %q", err, tc.want)
			}
		})
	}
}

// TestImageCopyWhileApplying: an ImageCopy taken in random steps while
// random records of every type apply between them gives exactly the
// Image of the state when it began, and restores to the same state.
func TestImageCopyWhileApplying(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		g := statetest.New(seed)
		s := state.New()
		g.Run(s, 50+int(seed%7)*40, t.Fatalf)
		want := s.Image()
		rng := rand.New(rand.NewPCG(seed, 7))
		c := s.BeginImage()
		applied := 0
		for done := false; !done; {
			if rng.IntN(3) == 0 {
				done = c.Step(1 + rng.IntN(8))
				continue
			}
			for range 1 + rng.IntN(5) {
				if err := s.Apply(s.LastLSN()+1, g.Next(s)); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				applied++
			}
		}
		img, err := c.Finish()
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(img, want) {
			t.Fatalf("seed %d: the image copied in steps around %d records differs from the image at its start", seed, applied)
		}
		if !reflect.DeepEqual(restore(t, img).Export(), restore(t, want).Export()) {
			t.Fatalf("seed %d: the image copied in steps restores to another state", seed)
		}
		if err := s.Invariants(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		// Finished: records apply without saving anything, and a new
		// copy may begin.
		g.Run(s, 20, t.Fatalf)
		s.BeginImage().Abort()
	}
}
