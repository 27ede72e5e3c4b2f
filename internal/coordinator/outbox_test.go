package coordinator

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// relayRow is a row of an outbox for Relay.
func relayRow(row int64, rid, payload string) RelayItem {
	return RelayItem{Row: row, Req: SubmitRequest{Queue: "emails", Payload: []byte(payload), RequestID: rid}}
}

// TestRelayHoldsUntilReleased: Relay creates a task per new row and
// answers a duplicate for a row whose request id names one, in one append
// whose first record holds every row; a row the coordinator refuses is
// answered alone. The retention purge keeps a finished task while a row
// holds its request id, across a restart (so a row relayed again after
// the retention is still a duplicate), and drops it once the rows are
// released; releasing what is not held writes nothing.
func TestRelayHoldsUntilReleased(t *testing.T) {
	e := newEnv(t, 1)
	before := e.c.st.LastLSN()
	res, err := e.c.Relay(ctx, "pg:shop", []RelayItem{
		relayRow(1, "order-1", "a"), relayRow(2, "order-2", "b"), relayRow(3, "order-1", "a"),
		{Row: 4, Req: SubmitRequest{Payload: []byte("no queue"), RequestID: "order-4"}},
		{Row: 5, Req: SubmitRequest{Queue: "emails"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].ID == "" || res[0].Duplicate || res[1].ID == "" || res[1].ID == res[0].ID || res[2].ID != res[0].ID || !res[2].Duplicate {
		t.Fatalf("rows 1-3: %+v; want two tasks, the third row a duplicate of the first", res[:3])
	}
	var fe *FieldError
	if !errors.As(res[3].Err, &fe) || fe.Field != "queue" || res[3].ID != "" || !errors.As(res[4].Err, &fe) || fe.Field != "request_id" {
		t.Fatalf("rows 4 and 5: %+v, %+v; want each refused, naming queue and request_id", res[3], res[4])
	}
	var types []record.Type
	if err := e.log.Replay(before+1, func(_ uint64, en wal.Entry) error {
		types = append(types, record.Type(en.Type))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []record.Type{record.TypeOutboxHeld, record.TypeTaskCreated, record.TypeTaskCreated}; !slices.Equal(types, want) {
		t.Fatalf("the relay appended %v; want %v", types, want)
	}
	if h := e.c.st.Holds("pg:shop"); len(h) != 3 || h[2].RequestID != "order-1" {
		t.Fatalf("holds %+v; want rows 1, 2 and 3", h)
	}

	// Both tasks finish; a week and a day later the purge keeps them.
	for range 2 {
		l := e.lease("w", "emails")
		if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(8 * 24 * time.Hour)
	if _, err := e.c.Purge(ctx, 0); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if e.c.st.Task(res[0].ID) == nil || e.c.st.Task(res[1].ID) == nil {
		t.Fatalf("the purge dropped a task a row holds")
	}
	again, err := e.c.Relay(ctx, "pg:shop", []RelayItem{relayRow(1, "order-1", "a"), relayRow(2, "order-2", "b")})
	if err != nil || again[0].ID != res[0].ID || !again[0].Duplicate || again[1].ID != res[1].ID || !again[1].Duplicate {
		t.Fatalf("the rows relayed again after the retention: %+v, %v; want duplicates of their tasks", again, err)
	}

	// Rows 1 and 3 released: order-1 is held no more, and goes; order-2
	// stays for row 2.
	if err := e.c.ReleaseOutbox(ctx, "pg:shop", []int64{1, 3, 99}); err != nil {
		t.Fatal(err)
	}
	lsn := e.c.st.LastLSN()
	if err := e.c.ReleaseOutbox(ctx, "pg:shop", []int64{1, 99}); err != nil || e.c.st.LastLSN() != lsn {
		t.Fatalf("releasing rows not held: %v, wrote %d records; want none", err, e.c.st.LastLSN()-lsn)
	}
	if _, err := e.c.Purge(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if e.c.st.Task(res[0].ID) != nil || e.c.st.Task(res[1].ID) == nil {
		t.Fatalf("after releasing rows 1 and 3: task of order-1 kept %v, of order-2 kept %v; want dropped and kept",
			e.c.st.Task(res[0].ID) != nil, e.c.st.Task(res[1].ID) != nil)
	}
	// An operator's purge keeps it too.
	if r, err := e.c.Bulk(ctx, BulkRequest{Action: BulkPurge, Filter: BulkFilter{All: true}}); err != nil || r.Changed != 0 || e.c.st.Task(res[1].ID) == nil {
		t.Fatalf("an operator's purge: %+v, %v; want the held task kept", r, err)
	}
	if err := e.c.ReleaseOutbox(ctx, "pg:shop", []int64{2}); err != nil {
		t.Fatal(err)
	}
	if r, err := e.c.Bulk(ctx, BulkRequest{Action: BulkPurge, Filter: BulkFilter{All: true}}); err != nil || r.Changed != 1 {
		t.Fatalf("an operator's purge once released: %+v, %v; want the task deleted", r, err)
	}
	if h := e.c.st.Holds(""); len(h) != 0 {
		t.Fatalf("holds left: %+v", h)
	}
	e.restart()
}

// TestRelayRefusals: a call without an outbox, with a row twice or with
// more rows than a record holds is refused whole; a row whose request id
// names a task with another payload is refused alone.
func TestRelayRefusals(t *testing.T) {
	e := newEnv(t, 2)
	if _, err := e.c.Relay(ctx, "", []RelayItem{relayRow(1, "a", "x")}); err == nil || !strings.Contains(err.Error(), "outbox") {
		t.Errorf("no outbox: %v", err)
	}
	if _, err := e.c.Relay(ctx, "o", []RelayItem{relayRow(1, "a", "x"), relayRow(1, "b", "x")}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a row twice: %v", err)
	}
	if _, err := e.c.Relay(ctx, "o", make([]RelayItem, state.MaxOutboxRowsPerRecord+1)); err == nil {
		t.Errorf("too many rows: accepted")
	}
	e.submit("emails", func(r *SubmitRequest) { r.RequestID = "taken" })
	res, err := e.c.Relay(ctx, "o", []RelayItem{relayRow(7, "taken", "another payload"), relayRow(8, "free", "x")})
	if err != nil || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "already used") || res[1].Err != nil || res[1].ID == "" {
		t.Fatalf("%+v, %v; want row 7 refused (its request id taken by another payload), row 8 submitted", res, err)
	}
	if h := e.c.st.Holds("o"); len(h) != 1 || h[0].Row != 8 {
		t.Fatalf("holds %+v; want row 8's alone", h)
	}
}
