package coordinator

import (
	"reflect"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/principal"
	"github.com/tenurehq/tenure/internal/state"
)

// TestRecordsCarryThePrincipal: every record a call writes names the
// principal of its context, over what an operator declared; records the
// server writes on its own (an expiry) and calls without a principal name
// nobody, or what was declared.
func TestRecordsCarryThePrincipal(t *testing.T) {
	e := newEnv(t, 3)
	sub := principal.With(ctx, "ci-submitter")
	wrk := principal.With(ctx, "worker-7")
	ops := principal.With(ctx, "ops-admin")

	a, err := e.c.Submit(sub, SubmitRequest{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := e.c.Lease(wrk, LeaseRequest{WorkerID: "w", Queue: "q"})
	if err != nil || len(ls) != 1 {
		t.Fatalf("lease: %v, %v", ls, err)
	}
	if err := e.c.Start(wrk, a.Task.ID, ls[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second) // so that the heartbeat moves the expiry
	if _, err := e.c.Heartbeat(wrk, a.Task.ID, ls[0].LeaseID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Fail(wrk, a.Task.ID, ls[0].LeaseID, "boom", true); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Retry(ops, a.Task.ID, Actor{By: "said-someone-else", Reason: "fixed"}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Kill(ctx, a.Task.ID, Actor{By: "declared", Reason: "no principal"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Pause(ops, PauseRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"TaskCreated": "ci-submitter", "LeaseGranted": "worker-7", "ExecutionStarted": "worker-7",
		"LeaseExtended": "worker-7", "TaskFailed": "worker-7", "TaskRetried": "ops-admin", "TaskDead": "declared",
	}
	hist, err := e.c.History(ctx, a.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != len(want) {
		var got []string
		for _, h := range hist {
			n, _ := byOf(t, h.Record)
			got = append(got, n)
		}
		t.Fatalf("history %v, want the records of %v", got, want)
	}
	for _, h := range hist {
		name, by := byOf(t, h.Record)
		if w, ok := want[name]; !ok {
			t.Errorf("unexpected record %s in the history", name)
		} else if by != w {
			t.Errorf("%s by %q, want %q", name, by, w)
		}
	}
}

// byOf returns the type name and By of a record that has By.
func byOf(t *testing.T, r state.Record) (string, string) {
	v := reflect.ValueOf(r).Elem()
	by := v.FieldByName("By")
	if !by.IsValid() || by.Kind() != reflect.String {
		t.Fatalf("record %T has no By", r)
	}
	return v.Type().Name(), by.String()
}
