package coordinator

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
)

// TestSnoozeKeepsTheAttempt: a task of one attempt snoozed three times is
// leased again after each snooze's delay (not before) with attempt 1, and
// completes; its executions show the three snoozes with their reasons.
func TestSnoozeKeepsTheAttempt(t *testing.T) {
	e := newEnv(t, 41)
	task := e.submit("q", func(r *SubmitRequest) { r.Retry.MaxAttempts = 1 })
	for i := range 3 {
		l := e.lease("w", "q")
		if l.Attempt != 1 {
			t.Fatalf("lease %d after %d snoozes has attempt %d, want 1", i+1, i, l.Attempt)
		}
		until, err := e.c.Snooze(ctx, l.TaskID, l.LeaseID, 5*time.Second, "upstream busy")
		if err != nil {
			t.Fatal(err)
		}
		if want := e.clock.Now().Add(5 * time.Second); !until.Equal(want) {
			t.Fatalf("snooze until %v, want %v", until, want)
		}
		if got := e.get(task.ID); got.State != state.Waiting || got.Attempt != 0 || !got.NotBefore.Std().Equal(until) {
			t.Fatalf("after snooze %d: %s attempt %d not before %v", i+1, got.State, got.Attempt, got.NotBefore)
		}
		// Not leasable before its time.
		if ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q"}); err != nil || len(ls) != 0 {
			t.Fatalf("leased %d tasks before the snooze ended (err %v)", len(ls), err)
		}
		e.clock.Advance(5 * time.Second)
	}
	l := e.lease("w", "q")
	if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, []byte("done")); err != nil {
		t.Fatal(err)
	}
	got := e.get(task.ID)
	if got.State != state.Completed || got.Attempt != 1 || len(got.Executions) != 4 {
		t.Fatalf("completed task: %s attempt %d, %d executions", got.State, got.Attempt, len(got.Executions))
	}
	for i, x := range got.Executions[:3] {
		if x.Status != state.ExecSnoozed || x.Attempt != 1 || x.Reason != "upstream busy" {
			t.Fatalf("execution %d: %s attempt %d reason %q", i, x.Status, x.Attempt, x.Reason)
		}
	}
	want := []record.Type{record.TypeTaskCreated}
	for range 3 {
		want = append(want, record.TypeLeaseGranted, record.TypeTaskSnoozed)
	}
	want = append(want, record.TypeLeaseGranted, record.TypeTaskCompleted)
	if got := e.historyTypes(task.ID); !reflect.DeepEqual(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	e.restart()
}

// TestSnoozeRefusals: a snooze is refused, with a reason that says what to
// do, for a delay outside its bounds, a reason too long, a committed task,
// a task at its limit of snoozes, one its deadline would not leave time
// to run after it, and a lease that lost its authority (a snoozed one).
func TestSnoozeRefusals(t *testing.T) {
	e := newEnv(t, 42)
	e.submit("q")
	l := e.lease("w", "q")
	for _, c := range []struct {
		delay  time.Duration
		reason string
		want   error
		says   string
	}{
		{-time.Second, "", ErrInvalidArgument, "delay: -1s is outside 0..24h0m0s"},
		{25 * time.Hour, "", ErrInvalidArgument, "delay: 25h0m0s is outside"},
		{time.Second, strings.Repeat("x", 5000), ErrTooLarge, "reason is 5000 bytes"},
	} {
		_, err := e.c.Snooze(ctx, l.TaskID, l.LeaseID, c.delay, c.reason)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("Snooze(%v): %v, want %v saying %q", c.delay, err, c.want, c.says)
		}
	}
	if _, err := e.c.Commit(ctx, l.TaskID, l.LeaseID, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Snooze(ctx, l.TaskID, l.LeaseID, time.Second, ""); !errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), "cannot snooze") {
		t.Errorf("snooze of a committed task: %v", err)
	}

	// The limit of snoozes per task.
	e.c.cfg.Limits.MaxSnoozes = 2
	task := e.submit("limited")
	var last Lease
	for i := range 3 {
		last = e.lease("w", "limited")
		_, err := e.c.Snooze(ctx, last.TaskID, last.LeaseID, 0, "")
		if i < 2 && err != nil {
			t.Fatalf("snooze %d: %v", i+1, err)
		}
		if i == 2 && (!errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), "was snoozed 2 times")) {
			t.Fatalf("snooze past the limit: %v", err)
		}
	}
	if got := e.get(task.ID); got.State != state.Leased {
		t.Fatalf("a refused snooze changed the task: %s", got.State)
	}
	// A lease that was snoozed has lost its authority.
	first := e.get(task.ID).Executions[0].LeaseID
	if _, err := e.c.Snooze(ctx, task.ID, first, 0, ""); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "was snoozed") {
		t.Fatalf("snooze by a snoozed lease: %v", err)
	}

	// The deadline must leave the minimum window after the snooze.
	due := e.submit("due", func(r *SubmitRequest) { r.Timeout = 10 * time.Second })
	l = e.lease("w", "due")
	if _, err := e.c.Snooze(ctx, due.ID, l.LeaseID, 10*time.Second-DefaultLimits.MinWindow+1, ""); !errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("snooze past the deadline: %v", err)
	}
	if _, err := e.c.Snooze(ctx, due.ID, l.LeaseID, 10*time.Second-DefaultLimits.MinWindow, ""); err != nil {
		t.Fatalf("snooze leaving the minimum window: %v", err)
	}
}

// TestHeartbeatProgress: a heartbeat's progress is the lease's last report,
// shown with the task while the lease holds and gone with it; the same
// report again writes nothing more than the heartbeat would, and at the
// deadline (where a heartbeat writes nothing) a new report still is
// written. Bad reports are refused.
func TestHeartbeatProgress(t *testing.T) {
	e := newEnv(t, 43)
	task := e.submit("q", func(r *SubmitRequest) { r.Timeout = 40 * time.Second }) // a 30 s window
	l := e.lease("w", "q")
	r1 := &state.Report{Message: "copying", Percent: 40, HasPercent: true}
	if _, err := e.c.HeartbeatReport(ctx, l.TaskID, l.LeaseID, r1); err != nil {
		t.Fatal(err)
	}
	v, err := e.c.View(ctx, task.ID)
	if err != nil || v.Report != (state.LastReport{Report: *r1, At: state.TimeOf(e.clock.Now())}) {
		t.Fatalf("view: %+v, %v", v.Report, err)
	}
	n := len(e.historyTypes(task.ID))
	// The same report at the same instant: the expiry cannot move, and the
	// report is not new: no record.
	if _, err := e.c.HeartbeatReport(ctx, l.TaskID, l.LeaseID, r1); err != nil {
		t.Fatal(err)
	}
	if got := len(e.historyTypes(task.ID)); got != n {
		t.Fatalf("a repeated report wrote %d records", got-n)
	}
	// At the deadline the heartbeat cannot extend, but a new report is kept.
	e.clock.Advance(20 * time.Second)
	if exp, err := e.c.Heartbeat(ctx, l.TaskID, l.LeaseID); err != nil || !exp.Equal(epoch.Add(40*time.Second)) {
		t.Fatalf("heartbeat: expiry %v, %v; want the deadline", exp, err)
	}
	n = len(e.historyTypes(task.ID))
	r2 := &state.Report{Message: "almost"}
	if _, err := e.c.HeartbeatReport(ctx, l.TaskID, l.LeaseID, r2); err != nil {
		t.Fatal(err)
	}
	if got := len(e.historyTypes(task.ID)); got != n+1 {
		t.Fatalf("a new report at the deadline wrote %d records, want 1", got-n)
	}
	if v, _ := e.c.View(ctx, task.ID); v.Report.Report != *r2 {
		t.Fatalf("report %+v, want %+v", v.Report, r2)
	}
	e.restart()
	if v, _ := e.c.View(ctx, task.ID); v.Report.Report != *r2 {
		t.Fatalf("after a restart: report %+v, want %+v", v.Report, r2)
	}
	for _, c := range []struct {
		r    state.Report
		want error
		says string
	}{
		{state.Report{Message: strings.Repeat("m", 257)}, ErrTooLarge, "progress.message is 257 bytes"},
		{state.Report{Message: "\xff"}, ErrInvalidArgument, "UTF-8"},
		{state.Report{Percent: 101, HasPercent: true}, ErrInvalidArgument, "progress.percent: 101 is over 100"},
	} {
		if _, err := e.c.HeartbeatReport(ctx, l.TaskID, l.LeaseID, &c.r); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("report %+v: %v, want %v saying %q", c.r, err, c.want, c.says)
		}
	}
	if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := e.c.View(ctx, task.ID); v.Report != (state.LastReport{}) {
		t.Fatalf("a finished task shows report %+v", v.Report)
	}
}

// TestTraceContext: a submit's trace context is given with every lease of
// the task and shown with it; a malformed one is refused, naming the field.
func TestTraceContext(t *testing.T) {
	e := newEnv(t, 44)
	tc := state.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}
	task := e.submit("q", func(r *SubmitRequest) { r.Trace = tc })
	if l := e.lease("w", "q"); l.Trace != tc {
		t.Fatalf("lease trace %+v, want %+v", l.Trace, tc)
	}
	e.restart()
	if v, err := e.c.View(ctx, task.ID); err != nil || v.Trace != tc {
		t.Fatalf("view trace %+v (%v), want %+v", v.Trace, err, tc)
	}
	plain := e.submit("q")
	if v, _ := e.c.View(ctx, plain.ID); v.Trace != (state.TraceContext{}) {
		t.Fatalf("a task submitted without one has trace %+v", v.Trace)
	}
	ok := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		tc   state.TraceContext
		says string
	}{
		{state.TraceContext{State: "a=b"}, "tracestate: set without a traceparent"},
		{state.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"}, "too short"},
		{state.TraceContext{Parent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}, "lowercase hex"},
		{state.TraceContext{Parent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, "trace id is all zeros"},
		{state.TraceContext{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}, "parent id is all zeros"},
		{state.TraceContext{Parent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "version ff"},
		{state.TraceContext{Parent: ok + "-x"}, "version 00 has nothing after the flags"},
		{state.TraceContext{Parent: "01" + ok[2:] + "x"}, "not followed by '-'"},
		{state.TraceContext{Parent: ok, State: strings.Repeat("a", 513)}, "tracestate is 513 bytes"},
		{state.TraceContext{Parent: ok, State: "a=\x01"}, "printable ASCII"},
	} {
		_, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Trace: c.tc})
		if err == nil || !strings.Contains(err.Error(), "trace_context") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("submit with %+v: %v, want an error saying %q", c.tc, err, c.says)
		}
	}
	// A later version may carry more after its flags.
	if _, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Trace: state.TraceContext{Parent: "01" + ok[2:] + "-future"}}); err != nil {
		t.Fatalf("a version 01 traceparent with more fields: %v", err)
	}
}
