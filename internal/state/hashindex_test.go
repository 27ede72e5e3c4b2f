package state_test

import (
	"fmt"
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
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			g := statetest.New(1000 + seed)
			ref := state.New()
			recs := g.Run(ref, 1500, t.Fatalf)
			want := ref.Export()

			defer state.SetHashMask(3)()
			s := state.New()
			for i, r := range recs {
				if err := s.Apply(uint64(i+1), r); err != nil {
					t.Fatalf("record %d (%T) refused with colliding hashes: %v", i, r, err)
				}
				if i%50 == 0 || i == len(recs)-1 {
					if err := s.Invariants(); err != nil {
						t.Fatalf("after record %d: %v", i, err)
					}
				}
			}
			got := s.Export()
			for _, task := range want.Tasks {
				if s.Task(task.ID) == nil || (task.RequestID != "" && s.ByRequest(task.Namespace, task.RequestID) == nil) {
					t.Fatalf("task %q not found by id or request id", task.ID)
				}
			}
			if s.Task("no such task") != nil || s.ByRequest("default", "no such request") != nil {
				t.Fatal("lookup of a missing key found a task")
			}
			loaded := restore(t, s.Image())
			if !reflect.DeepEqual(want, got) || !reflect.DeepEqual(want, loaded.Export()) {
				t.Fatal("colliding hashes changed the state")
			}
		})
	}
}
