package remoteedges

import (
	"slices"
	"testing"

	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestTakeInTurn: the workers are handed the pending dependencies in turn,
// none to two workers at once; each waits Wait while they are no more than
// Parallel, ShortWait otherwise; a resolved one leaves the turn at once,
// one still pending comes round again; a stopped watcher hands out
// nothing.
func TestTakeInTurn(t *testing.T) {
	cfg := Config{Parallel: 2}
	cfg.defaults()
	w := &watcher{cfg: cfg, inflight: make(map[string]bool)}
	w.set([]string{"a", "b"})
	var got []string
	for range 2 {
		id, wait := w.take()
		if wait != cfg.Wait {
			t.Fatalf("%s waits %v with 2 pending and 2 workers, want %v", id, wait, cfg.Wait)
		}
		got = append(got, id)
	}
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("taken %v, want a then b", got)
	}
	w.set([]string{"a", "b", "c"})
	if id, wait := w.take(); id != "c" || wait != cfg.ShortWait {
		t.Fatalf("with a and b asked, took %s waiting %v, want c waiting %v", id, wait, cfg.ShortWait)
	}
	w.done("a", true)  // resolved: leaves
	w.done("b", false) // still pending: comes round again
	w.done("c", false)
	got = got[:0]
	for range 2 {
		id, _ := w.take()
		got = append(got, id)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("after a was resolved, took %v, want b and c", got)
	}
	w.mu.Lock()
	w.stopped = true
	w.cond().Broadcast()
	w.mu.Unlock()
	done := make(chan string)
	go func() {
		id, _ := w.take()
		done <- id
	}()
	if id := <-done; id != "" {
		t.Fatalf("a stopped watcher handed out %q", id)
	}
}

// TestEndedOf: the API's final states map to the outcomes of a record,
// and the others to none.
func TestEndedOf(t *testing.T) {
	for s, want := range map[tenurev1.TaskState]state.Ended{
		tenurev1.TaskState_TASK_STATE_COMPLETED: state.EndedCompleted,
		tenurev1.TaskState_TASK_STATE_FAILED:    state.EndedFailed,
		tenurev1.TaskState_TASK_STATE_DEAD:      state.EndedDead,
		tenurev1.TaskState_TASK_STATE_BLOCKED:   0,
		tenurev1.TaskState_TASK_STATE_LEASED:    0,
	} {
		if got := endedOf(s); got != want {
			t.Errorf("endedOf(%v) = %v, want %v", s, got, want)
		}
	}
}
