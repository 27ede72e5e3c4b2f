package state

import "testing"

// TestAttribute: the principal becomes the By of the records that say who
// asked, over what was declared; a FIRED tick stays the schedule's own
// even in a call's records, a backfill is the caller's; records without a
// By and an empty principal are left alone. (That every record type with
// a By is attributed is TestEveryRecordWithByIsAttributed, in
// internal/record.)
func TestAttribute(t *testing.T) {
	paused := &QueuePaused{Namespace: "n", Queue: "q", By: "declared"}
	fired := &ScheduleFired{Outcome: Fired}
	backfilled := &ScheduleFired{Outcome: Backfilled, By: "declared"}
	expired := &LeaseExpired{TaskID: "t"}
	recs := []Record{paused, fired, backfilled, expired}

	Attribute(recs, "")
	if paused.By != "declared" || fired.By != "" || backfilled.By != "declared" {
		t.Errorf("without a principal: By %q, %q, %q, want what was declared", paused.By, fired.By, backfilled.By)
	}
	Attribute(recs, "ops")
	if paused.By != "ops" || backfilled.By != "ops" {
		t.Errorf("a pause by %q and a backfill by %q, want the principal ops", paused.By, backfilled.By)
	}
	if fired.By != "" {
		t.Errorf("a FIRED tick by %q, want none: the schedule fired it", fired.By)
	}
	if *expired != (LeaseExpired{TaskID: "t"}) {
		t.Errorf("an expiry changed: %+v", expired)
	}
}
