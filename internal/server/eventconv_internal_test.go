package server

import (
	"reflect"
	"testing"

	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// TestEveryRecordHasAnEvent: every record type the generator makes becomes
// an event with its type's name, its time, its task, who asked and its own
// message in Event.record.
func TestEveryRecordHasAnEvent(t *testing.T) {
	t.Parallel()
	seen := map[record.Type]bool{}
	for seed := range uint64(300) {
		for _, r := range statetest.New(seed).Run(state.New(), 100, t.Fatalf) {
			typ := record.TypeOf(r)
			if seen[typ] {
				continue
			}
			seen[typ] = true
			name := typ.String()
			e := eventOf(3, 7, r)
			if e.Type != name || e.Lsn != 7 || e.Partition != 3 || e.TaskId != r.Task() {
				t.Errorf("the event of a %s says type %q, lsn %d, partition %d, task %q", name, e.Type, e.Lsn, e.Partition, e.TaskId)
			}
			if e.Record == nil || e.At == nil {
				t.Errorf("a %s has no event message or no time: add a case for *state.%s to eventOf in internal/server/eventconv.go "+
					"(and its message, %sEvent, to Event.record in proto/tenure/v1/events.proto)", name, reflect.TypeOf(r).Elem().Name(), name)
				continue
			}
			if got := reflect.TypeOf(e.Record).Elem().Field(0).Type.Elem().Name(); got != name+"Event" {
				t.Errorf("the event of a %s carries a %s", name, got)
			}
			if by := reflect.ValueOf(r).Elem().FieldByName("By"); by.IsValid() && e.RequestedBy != by.String() {
				t.Errorf("the event of a %s by %q says requested_by %q: set RequestedBy from its By in eventOf", name, by.String(), e.RequestedBy)
			}
		}
	}
	for _, typ := range record.Types() {
		if !seen[typ] {
			t.Errorf("the generator made no %s", typ)
		}
	}
}
