package state_test

import (
	"errors"
	"testing"

	"github.com/tenurehq/tenure/internal/state"
)

// TestOutboxHolds: OutboxHeld refuses a record without an outbox, with a
// row twice or a row without its namespace, queue or request id; a row
// held again holds its new request id in place of the old; two rows hold
// one request id until both are released; OutboxReleased passes over rows
// that hold nothing.
func TestOutboxHolds(t *testing.T) {
	s := state.New()
	lsn := uint64(0)
	apply := func(r state.Record) error {
		lsn++
		err := s.Apply(lsn, r)
		if err != nil {
			lsn--
		}
		return err
	}
	row := func(n int64, rid string) state.OutboxHeldRow {
		return state.OutboxHeldRow{Row: n, Namespace: "default", Queue: "q", RequestID: rid}
	}
	for _, bad := range []state.Record{
		&state.OutboxHeld{Rows: []state.OutboxHeldRow{row(1, "a")}},
		&state.OutboxHeld{Outbox: "o"},
		&state.OutboxHeld{Outbox: "o", Rows: []state.OutboxHeldRow{row(1, "a"), row(1, "b")}},
		&state.OutboxHeld{Outbox: "o", Rows: []state.OutboxHeldRow{row(1, "")}},
		&state.OutboxHeld{Outbox: "o", Rows: []state.OutboxHeldRow{{Row: 1, Queue: "q", RequestID: "a"}}},
		&state.OutboxReleased{Outbox: "o"},
	} {
		if err := apply(bad); !errors.Is(err, state.ErrPrecondition) {
			t.Errorf("%+v applied (%v); want a precondition failure", bad, err)
		}
	}
	if err := apply(&state.OutboxHeld{Outbox: "o", Rows: []state.OutboxHeldRow{row(1, "a"), row(2, "a"), row(3, "b")}}); err != nil {
		t.Fatal(err)
	}
	if err := apply(&state.OutboxHeld{Outbox: "o", Rows: []state.OutboxHeldRow{row(3, "c")}}); err != nil {
		t.Fatal(err)
	}
	if !s.Held("default", "a") || s.Held("default", "b") || !s.Held("default", "c") || s.Held("other", "a") || s.HoldCount() != 3 {
		t.Fatalf("holds %+v; want a (rows 1, 2) and c (row 3)", s.Holds(""))
	}
	if err := apply(&state.OutboxReleased{Outbox: "o", Rows: []int64{1, 9}}); err != nil {
		t.Fatal(err)
	}
	if !s.Held("default", "a") {
		t.Fatalf("a is held by row 2 still")
	}
	if err := apply(&state.OutboxReleased{Outbox: "o", Rows: []int64{2, 3}}); err != nil {
		t.Fatal(err)
	}
	if s.Held("default", "a") || s.Held("default", "c") || s.HoldCount() != 0 {
		t.Fatalf("holds left: %+v", s.Holds(""))
	}
	if err := s.Invariants(); err != nil {
		t.Fatal(err)
	}
}
