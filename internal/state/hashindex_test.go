package state_test

import (
	"reflect"
	"testing"

	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// TestHashCollisions runs random record sequences with index hashes cut to
// two bits, so that nearly every task, request id and lease id shares its
// hash with others: lookups, removals (purges, lease ends), replay and
// snapshot restore must behave exactly as with full hashes.
func TestHashCollisions(t *testing.T) {
	for seed := range uint64(8) {
		g := statetest.New(1000 + seed)
		ref := state.New()
		recs := g.Run(ref, 1500, t.Fatalf)
		want := ref.Export()

		restore := state.SetHashMask(3)
		s := state.New()
		for i, r := range recs {
			if err := s.Apply(uint64(i+1), r); err != nil {
				restore()
				t.Fatalf("seed %d: record %d (%T) refused with colliding hashes: %v", seed, i, r, err)
			}
			if i%50 == 0 || i == len(recs)-1 {
				if err := s.Invariants(); err != nil {
					restore()
					t.Fatalf("seed %d: after record %d: %v", seed, i, err)
				}
			}
		}
		got := s.Export()
		for _, task := range want.Tasks {
			if s.Task(task.ID) == nil || (task.RequestID != "" && s.ByRequest(task.Namespace, task.RequestID) == nil) {
				restore()
				t.Fatalf("seed %d: task %q not found by id or request id", seed, task.ID)
			}
		}
		if s.Task("no such task") != nil || s.ByRequest("default", "no such request") != nil {
			restore()
			t.Fatalf("seed %d: lookup of a missing key found a task", seed)
		}
		img := s.Image()
		l := state.NewLoader(img.LastLSN, img.Epoch)
		for _, sc := range img.Schedules {
			if err := l.AddSchedule(sc); err != nil {
				restore()
				t.Fatalf("seed %d: AddSchedule: %v", seed, err)
			}
		}
		for _, h := range img.Holds {
			if err := l.AddHold(h); err != nil {
				restore()
				t.Fatalf("seed %d: AddHold: %v", seed, err)
			}
		}
		for _, d := range img.Deliveries {
			if err := l.AddDelivery(d); err != nil {
				restore()
				t.Fatalf("seed %d: AddDelivery: %v", seed, err)
			}
		}
		for _, q := range img.Queues {
			if err := l.AddQueue(q); err != nil {
				restore()
				t.Fatalf("seed %d: AddQueue: %v", seed, err)
			}
		}
		for _, w := range img.Workflows {
			if err := l.AddWorkflow(w); err != nil {
				restore()
				t.Fatalf("seed %d: AddWorkflow: %v", seed, err)
			}
		}
		for i, task := range img.Tasks {
			if err := l.Add(task.Clone(), task.LeaseIndex(), img.Beside(i)); err != nil {
				restore()
				t.Fatalf("seed %d: Add: %v", seed, err)
			}
		}
		loaded, err := l.State()
		if err == nil {
			err = loaded.Invariants()
		}
		restore()
		if err != nil {
			t.Fatalf("seed %d: restored: %v", seed, err)
		}
		if !reflect.DeepEqual(want, got) || !reflect.DeepEqual(want, loaded.Export()) {
			t.Fatalf("seed %d: colliding hashes changed the state", seed)
		}
	}
}
