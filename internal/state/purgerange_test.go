package state_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// TestPurgeSlicesEqualOnePurge: a purge planned in slices by PurgeSlice and
// applied as TasksPurgedRange records, as the coordinator does it, leaves
// the same state as one TasksPurged with the same cut-off, whatever the
// bounds of the slices, and no slice drops or reads more than its bounds.
func TestPurgeSlicesEqualOnePurge(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		for _, lim := range []state.PurgeLimits{{Pass: 1, Read: 1, Drop: 1}, {Pass: 4, Read: 3, Drop: 2}, {Pass: 100, Read: 1, Drop: 100}, {Pass: 64, Read: 16, Drop: 4}, {Pass: 1000, Read: 1000, Drop: 1000}} {
			build := func() (*state.State, *statetest.Gen) {
				g := statetest.New(seed)
				g.Purge = false // leave finished tasks to purge
				s := state.New()
				g.Run(s, 400, t.Fatalf)
				return s, g
			}
			whole, g := build()
			sliced, _ := build()
			at := g.Now()
			before := at.Add(-time.Duration(seed%20) * time.Second)
			if err := whole.Apply(whole.LastLSN()+1, &state.TasksPurged{Before: before, At: at}); err != nil {
				t.Fatal(err)
			}
			records, dropped, length := 0, 0, sliced.Len()
			for after := uint64(0); ; {
				through, drop, done := sliced.PurgeSlice(before, after, lim)
				if drop > lim.Drop {
					t.Fatalf("seed %d: a slice plans %d drops, more than %d", seed, drop, lim.Drop)
				}
				passed, read := 0, 0
				sliced.Scan(after, func(t *state.Task) bool {
					if t.CreatedLSN > through {
						return false
					}
					passed++
					if t.State.Terminal() {
						read++
					}
					return true
				})
				if passed > lim.Pass || read > lim.Read {
					t.Fatalf("seed %d: a slice passes %d tasks and reads %d finished ones, limits %+v", seed, passed, read, lim)
				}
				if drop > 0 || done {
					n := sliced.Len()
					if err := sliced.Apply(sliced.LastLSN()+1, &state.TasksPurgedRange{Before: before, At: at, AfterLSN: after, ThroughLSN: through}); err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
					if n-sliced.Len() != drop {
						t.Fatalf("seed %d: the slice (%d, %d] dropped %d tasks, PurgeSlice planned %d", seed, after, through, n-sliced.Len(), drop)
					}
					if err := sliced.Invariants(); err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
					records++
					dropped += drop
				}
				if done {
					break
				}
				if through <= after {
					t.Fatalf("seed %d: PurgeSlice did not move on from lsn %d", seed, after)
				}
				after = through
			}
			if dropped != length-whole.Len() {
				t.Fatalf("seed %d: the slices dropped %d tasks, one purge %d", seed, dropped, length-whole.Len())
			}
			if lim.Drop == 1 && dropped > 1 && records < dropped {
				t.Fatalf("seed %d: %d tasks dropped in %d records, one at most each", seed, dropped, records)
			}
			a, b := whole.Export(), sliced.Export()
			a.LastLSN, b.LastLSN = 0, 0
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d, slices within %+v: the state differs from one purge's", seed, lim)
			}
		}
	}
}
