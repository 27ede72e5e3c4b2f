package server

import (
	"reflect"
	"testing"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// TestEveryTaskRecordHasAHistoryLine: every record type the statetest
// generator makes that names a task (and so is in the task's history) has
// a line in the API's task history: its type's name, its time, a detail
// saying what it did, and who asked where the record says.
func TestEveryTaskRecordHasAHistoryLine(t *testing.T) {
	t.Parallel()
	seen := map[reflect.Type]bool{}
	for seed := range uint64(50) {
		for _, r := range statetest.New(seed).Run(state.New(), 100, t.Fatalf) {
			typ := reflect.TypeOf(r)
			if r.Task() == "" || seen[typ] {
				continue
			}
			seen[typ] = true
			name := record.TypeOf(r).String()
			e := historyEntry(coordinator.HistoryEntry{LSN: 7, Record: r})
			if e.Type != name || e.Lsn != 7 {
				t.Errorf("the history line of a %s says type %q, LSN %d", name, e.Type, e.Lsn)
			}
			if e.Detail == "" || e.At == nil {
				t.Errorf("a %s names a task, so it is in the task's history, but its line there has no detail or no time: "+
					"add a case for *state.%s to historyEntry in internal/server/convert.go that sets At and says what it did in Detail", name, typ.Elem().Name())
			}
			if by := reflect.ValueOf(r).Elem().FieldByName("By"); by.IsValid() && e.RequestedBy != by.String() {
				t.Errorf("the history line of a %s by %q says requested_by %q: set RequestedBy from its By in historyEntry (internal/server/convert.go)", name, by.String(), e.RequestedBy)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("the generator made no record that names a task")
	}
}
