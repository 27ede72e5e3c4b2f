package state

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestHeldBytesTracksTheHeap: HeldBytes stays within a fifth of the Go
// heap a state keeps per task, for waiting, leased and completed tasks
// with small and 1 KiB payloads (strings and payloads in their own
// allocations, as decoded from requests), and a purge of every finished
// task gives back what they held.
func TestHeldBytesTracksTheHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of 20,000 tasks")
	}
	const tasks = 20_000
	for _, payload := range []int{64, 1 << 10} {
		for _, stage := range []string{"waiting", "leased", "completed"} {
			before := heapAlloc()
			s := waitingState(t, tasks, payload)
			if stage != "waiting" {
				leaseAll(t, s, stage == "completed")
			}
			heap := float64(heapAlloc()-before) / tasks
			held := float64(s.HeldBytes()) / tasks
			t.Logf("%d-byte payloads, %s: %.0f bytes held per task by the account, %.0f by the heap", payload, stage, held, heap)
			if held < 0.8*heap || held > 1.2*heap {
				t.Errorf("%d-byte payloads, %s: the account holds %.0f bytes per task, the heap %.0f: more than a fifth apart", payload, stage, held, heap)
			}
			if stage == "completed" {
				s.purgeAll(t)
				if got := s.HeldBytes(); got != 0 {
					t.Errorf("%d-byte payloads: a state whose every task was purged holds %d bytes by the account, want 0", payload, got)
				}
			}
			runtime.KeepAlive(s)
		}
	}
}

// purgeAll purges every finished task of s, as the retention purge does.
func (s *State) purgeAll(t *testing.T) {
	t.Helper()
	at := Time(time.Hour)
	if err := s.Apply(s.LastLSN()+1, &TasksPurged{Before: at, At: at}); err != nil {
		t.Fatal(err)
	}
}

// TestInvariantsCatchHeldDrift: Invariants reports a HeldBytes that is not
// the recount of the content, and a progress whose share is stale.
func TestInvariantsCatchHeldDrift(t *testing.T) {
	s := waitingState(t, 3, 64)
	leaseAll(t, s, true)
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
	s.held++
	if err := s.Invariants(); err == nil || !strings.Contains(err.Error(), "HeldBytes") {
		t.Errorf("HeldBytes off by one: Invariants said %v", err)
	}
	s.held--
	tk := s.Task(benchID('t', 1))
	tk.Progress.held++
	if err := s.Invariants(); err == nil || !strings.Contains(err.Error(), "progress is accounted") {
		t.Errorf("a progress's share off by one: Invariants said %v", err)
	}
}
