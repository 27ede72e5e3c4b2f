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
			dropped, length := 0, sliced.Len()
			for after := uint64(0); ; {
				through, drop, done := sliced.PurgeSlice(before, after, lim)
				// A slice ends between records, so the tasks of its last
				// record may take it past the limits: it entered that
				// record below them.
				passed, read, drops, lastPassed, lastRead, lastDrops := 0, 0, 0, 0, 0, 0
				sliced.Scan(after, func(t *state.Task) bool {
					if t.CreatedLSN > through {
						return false
					}
					last := t.CreatedLSN == through
					passed++
					if last {
						lastPassed++
					}
					if t.State.Terminal() {
						read++
						if last {
							lastRead++
						}
						if t.UpdatedAt < before && !sliced.Held(t.Namespace, t.RequestID) { // a row of an outbox keeps it
							drops++
							if last {
								lastDrops++
							}
						}
					}
					return true
				})
				if passed > 0 && (passed-lastPassed >= lim.Pass || read-lastRead >= lim.Read || drops-lastDrops >= lim.Drop) {
					t.Fatalf("seed %d: a slice passes %d tasks, reads %d finished ones and drops %d (%d, %d and %d of them its last record's), limits %+v",
						seed, passed, read, drops, lastPassed, lastRead, lastDrops, lim)
				}
				if drops != drop {
					t.Fatalf("seed %d: a slice plans %d drops, its range holds %d", seed, drop, drops)
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
			a, b := whole.Export(), sliced.Export()
			a.LastLSN, b.LastLSN = 0, 0
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d, slices within %+v: the state differs from one purge's", seed, lim)
			}
		}
	}
}
