package server

import (
	"reflect"
	"testing"

	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/state/statetest"
)

// firstOfEachType runs the statetest generator from seeds 0 to seeds-1,
// 100 records each, and calls check with the first record of each type
// that keep keeps, and the type's name; it returns the types checked.
func firstOfEachType(t *testing.T, seeds uint64, keep func(state.Record) bool, check func(name string, r state.Record)) map[record.Type]bool {
	t.Helper()
	seen := map[record.Type]bool{}
	for seed := range seeds {
		for _, r := range statetest.New(seed).Run(state.New(), 100, t.Fatalf) {
			if typ := record.TypeOf(r); !seen[typ] && keep(r) {
				seen[typ] = true
				check(typ.String(), r)
			}
		}
	}
	return seen
}

// byOf returns who asked for r, where r says (its field By).
func byOf(r state.Record) (string, bool) {
	by := reflect.ValueOf(r).Elem().FieldByName("By")
	if !by.IsValid() {
		return "", false
	}
	return by.String(), true
}

// askedBy returns r, or, where r has a field By left empty (the generator
// often leaves it), a copy of r that names who asked: so that a check of
// who asked cannot pass by comparing two empty strings.
func askedBy(r state.Record) state.Record {
	v := reflect.ValueOf(r).Elem()
	if by := v.FieldByName("By"); !by.IsValid() || by.String() != "" {
		return r
	}
	cp := reflect.New(v.Type())
	cp.Elem().Set(v)
	cp.Elem().FieldByName("By").SetString("asker-of-" + v.Type().Name())
	return cp.Interface().(state.Record)
}

// TestEveryRecordHasAnEvent: every record type the generator makes becomes
// an event with its type's name, its time, its task, who asked and its own
// message in Event.record.
func TestEveryRecordHasAnEvent(t *testing.T) {
	t.Parallel()
	seen := firstOfEachType(t, 300, func(state.Record) bool { return true }, func(name string, r state.Record) {
		r = askedBy(r)
		e := eventOf(3, 7, r)
		if e.Type != name || e.Lsn != 7 || e.Partition != 3 || e.TaskId != r.Task() {
			t.Errorf("the event of a %s says type %q, lsn %d, partition %d, task %q", name, e.Type, e.Lsn, e.Partition, e.TaskId)
		}
		if e.Record == nil || e.At == nil {
			t.Errorf("a %s has no event message or no time: add a case for *state.%s to eventOf in internal/server/eventconv.go "+
				"(and its message, %sEvent, to Event.record in proto/tenure/v1/events.proto)", name, reflect.TypeOf(r).Elem().Name(), name)
			return
		}
		if got := reflect.TypeOf(e.Record).Elem().Field(0).Type.Elem().Name(); got != name+"Event" {
			t.Errorf("the event of a %s carries a %s", name, got)
		}
		if by, ok := byOf(r); ok && e.RequestedBy != by {
			t.Errorf("the event of a %s by %q says requested_by %q: set RequestedBy from its By in eventOf", name, by, e.RequestedBy)
		}
	})
	for _, typ := range record.Types() {
		if !seen[typ] {
			t.Errorf("the generator made no %s", typ)
		}
	}
}
