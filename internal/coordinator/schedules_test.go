package coordinator

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/state"
)

func (e *env) createSchedule(req ScheduleRequest) ScheduleView {
	e.t.Helper()
	v, created, err := e.c.CreateSchedule(ctx, req)
	if err != nil || !created {
		e.t.Fatalf("create schedule: %v (created %v)", err, created)
	}
	return v
}

func (e *env) fireDue() int {
	e.t.Helper()
	n, err := e.c.FireDue(ctx)
	if err != nil {
		e.t.Fatalf("fire due: %v", err)
	}
	return n
}

func (e *env) schedule(k state.ScheduleKey) ScheduleView {
	e.t.Helper()
	vs, err := e.c.Schedules(ctx, k.Namespace, k.Queue, k.Name)
	if err != nil || len(vs) != 1 {
		e.t.Fatalf("schedule %s: %v, %d found", k, err, len(vs))
	}
	return vs[0]
}

// fired lists the tasks of queue q by the tick their request id names.
func (e *env) fired(k state.ScheduleKey, ticks ...time.Time) {
	e.t.Helper()
	for _, tick := range ticks {
		id := state.FireRequestID(k, state.TimeOf(tick))
		if e.c.Export(); e.c.st.ByRequest(k.Namespace, id) == nil {
			e.t.Errorf("tick %s did not fire", tick.Format(time.RFC3339))
		}
	}
}

func tasksOf(e *env, queue string) []*state.Task {
	var out []*state.Task
	for _, t := range e.c.Export().Tasks {
		if t.Queue == queue {
			out = append(out, t)
		}
	}
	return out
}

var minutely = state.ScheduleKey{Namespace: "default", Queue: "reports", Name: "minutely"}

func TestScheduleFiresEachTickOnce(t *testing.T) {
	e := newEnv(t, 1)
	v := e.createSchedule(ScheduleRequest{Queue: "reports", Name: "minutely", Cron: "* * * * *", Payload: []byte("p"),
		Overlap: state.OverlapAllow})
	if want := epoch.Add(time.Minute); !v.Next.Std().Equal(want) || len(v.NextFires) != NextFires || !v.NextFires[1].Equal(want.Add(time.Minute)) {
		t.Fatalf("next %s, next fires %v; want %s first", v.Next, v.NextFires, want)
	}
	e.clock.Advance(30 * time.Second)
	if n := e.fireDue(); n != 0 {
		t.Fatalf("fired %d records before the first tick", n)
	}
	e.clock.Advance(30 * time.Second)
	if n := e.fireDue(); n != 1 {
		t.Fatalf("%d records at the first tick, want 1", n)
	}
	if n := e.fireDue(); n != 0 {
		t.Fatalf("the same tick fired again: %d records", n)
	}
	e.restart()
	if n := e.fireDue(); n != 0 {
		t.Fatalf("the tick fired again after a restart: %d records", n)
	}
	ts := tasksOf(e, "reports")
	if len(ts) != 1 || !reflect.DeepEqual(ts[0].Payload, []byte("p")) || ts[0].RequestID != state.FireRequestID(minutely, state.TimeOf(epoch.Add(time.Minute))) {
		t.Fatalf("tasks %+v", ts)
	}
	got := e.schedule(minutely)
	if len(got.Recent) != 1 || got.Recent[0].Outcome != state.Fired || got.Recent[0].TaskID != ts[0].ID || got.TaskStates[ts[0].ID] != state.Waiting {
		t.Fatalf("recent %+v, states %v", got.Recent, got.TaskStates)
	}
	if e.replayFromDisk().Schedules[0].Next != got.Next {
		t.Fatal("a replay of the log has another cursor")
	}
}

func TestScheduleOverlapPolicies(t *testing.T) {
	for _, tc := range []struct {
		overlap state.Overlap
		// outcomes of the ticks at +1, +2 and +3 min while the first
		// task runs, and of the pass after it completes at +3:10
		want []state.Outcome
		// records written while it ran (+1 to +3), and after
		during, after int
	}{
		// Every tick fires.
		{state.OverlapAllow, []state.Outcome{state.Fired, state.Fired, state.Fired}, 3, 0},
		// +2 and +3 wait for the task, then are skipped in one record.
		{state.OverlapSkip, []state.Outcome{state.Fired, state.Skipped}, 1, 1},
		// +2 is held; +3 waits; at the end +2 fires, late, and +3 is
		// skipped: it came due while a tick was held.
		{state.OverlapBufferOne, []state.Outcome{state.Fired, state.Held, state.Fired, state.Skipped}, 2, 2},
	} {
		t.Run(tc.overlap.String(), func(t *testing.T) {
			e := newEnv(t, 2)
			e.createSchedule(ScheduleRequest{Queue: "reports", Name: "minutely", Cron: "* * * * *", Overlap: tc.overlap,
				ExecutionWindow: time.Hour})
			during := 0
			for i := range 3 {
				e.clock.Advance(time.Minute)
				during += e.fireDue()
				if i == 0 {
					e.lease("w", "reports") // the first task runs and stays unfinished
				}
			}
			e.clock.Advance(10 * time.Second)
			for _, task := range tasksOf(e, "reports") {
				if task.State == state.Leased {
					if err := e.c.Complete(ctx, task.ID, task.CurrentLease().LeaseID, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			e.clock.Advance(20 * time.Second)
			after := e.fireDue()
			if during != tc.during || after != tc.after {
				t.Errorf("%d records while the task ran and %d after, want %d and %d", during, after, tc.during, tc.after)
			}
			var got []state.Outcome
			for _, f := range e.schedule(minutely).Recent {
				got = append(got, f.Outcome)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("outcomes %v, want %v", got, tc.want)
			}
		})
	}
}

func TestScheduleCatchUpWindow(t *testing.T) {
	e := newEnv(t, 3)
	e.createSchedule(ScheduleRequest{Queue: "reports", Name: "minutely", Cron: "* * * * *", Overlap: state.OverlapAllow,
		CatchUp: 10 * time.Minute})
	e.close()
	e.clock.Advance(3 * time.Hour) // down for three hours
	e.open()
	e.fireDue()
	sc := e.schedule(minutely)
	// Ticks older than 10 minutes are skipped in one record; the 11 ticks
	// from 2:50 to 3:00 (both included) fire.
	if len(sc.Recent) != 12 || sc.Recent[0].Outcome != state.Skipped || sc.Recent[0].Reason != state.SkipCatchUp {
		t.Fatalf("recent %+v", sc.Recent)
	}
	if from, until := sc.Recent[0].Tick.Std(), sc.Recent[0].Until.Std(); !from.Equal(epoch.Add(time.Minute)) || !until.Equal(epoch.Add(170*time.Minute)) {
		t.Fatalf("skipped %s..%s", from, until)
	}
	if n := len(tasksOf(e, "reports")); n != 11 {
		t.Fatalf("%d tasks fired, want 11", n)
	}
	e.fired(minutely, epoch.Add(170*time.Minute), epoch.Add(180*time.Minute))
	if !sc.Next.Std().Equal(epoch.Add(181 * time.Minute)) {
		t.Fatalf("next %s", sc.Next)
	}

	// A backfill fires the skipped ticks of a range once.
	res, err := e.c.Backfill(ctx, minutely, epoch.Add(100*time.Minute), epoch.Add(175*time.Minute), Actor{By: "ops"})
	if err != nil || len(res.Fired) != 70 || res.AlreadyFired != 6 {
		t.Fatalf("backfill: %d fired, %d already fired, %v", len(res.Fired), res.AlreadyFired, err)
	}
	res, err = e.c.Backfill(ctx, minutely, epoch.Add(100*time.Minute), epoch.Add(175*time.Minute), Actor{By: "ops"})
	if err != nil || len(res.Fired) != 0 || res.AlreadyFired != 76 {
		t.Fatalf("second backfill: %d fired, %d already fired, %v", len(res.Fired), res.AlreadyFired, err)
	}
	_, err = e.c.Backfill(ctx, minutely, epoch, e.clock.Now().Add(time.Minute), Actor{})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "end" {
		t.Fatalf("a backfill into the future: %v", err)
	}
}

func TestSchedulePauseResume(t *testing.T) {
	e := newEnv(t, 4)
	e.createSchedule(ScheduleRequest{Queue: "reports", Name: "minutely", Cron: "* * * * *"})
	if _, changed, err := e.c.PauseSchedule(ctx, minutely, Actor{By: "ops", Reason: "maintenance"}); err != nil || !changed {
		t.Fatalf("pause: %v %v", changed, err)
	}
	e.clock.Advance(5*time.Minute + 30*time.Second)
	if n := e.fireDue(); n != 0 {
		t.Fatalf("a paused schedule fired: %d records", n)
	}
	if v := e.schedule(minutely); v.Paused == nil || v.Paused.Reason != "maintenance" || v.NextFires != nil {
		t.Fatalf("paused view %+v", v)
	}
	v, changed, err := e.c.ResumeSchedule(ctx, minutely, Actor{By: "ops"})
	if err != nil || !changed {
		t.Fatalf("resume: %v %v", changed, err)
	}
	if !v.Next.Std().Equal(epoch.Add(6*time.Minute)) || len(v.Recent) != 1 || v.Recent[0].Reason != state.SkipPaused {
		t.Fatalf("after resume: next %s, recent %+v", v.Next, v.Recent)
	}
	if _, changed, err := e.c.ResumeSchedule(ctx, minutely, Actor{}); err != nil || changed {
		t.Fatalf("a second resume: %v %v", changed, err)
	}
	if err := e.c.DeleteSchedule(ctx, minutely, Actor{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Schedules(ctx, minutely.Namespace, minutely.Queue, minutely.Name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a deleted schedule: %v", err)
	}
}

func TestScheduleCreateIsIdempotent(t *testing.T) {
	e := newEnv(t, 5)
	req := ScheduleRequest{Queue: "reports", Name: "minutely", Cron: "*/5 * * * *", Payload: []byte("x")}
	e.createSchedule(req)
	if _, created, err := e.c.CreateSchedule(ctx, req); err != nil || created {
		t.Fatalf("the same create again: %v %v", created, err)
	}
	req.Payload = []byte("y")
	if _, _, err := e.c.CreateSchedule(ctx, req); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("another definition under the same name: %v", err)
	}
	e.clock.Advance(7 * time.Minute)
	v, err := e.c.UpdateSchedule(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// The old definition's due tick (0:05) is decided first.
	if len(v.Recent) != 1 || v.Recent[0].Outcome != state.Fired || !v.Next.Std().Equal(epoch.Add(10*time.Minute)) ||
		!reflect.DeepEqual(v.Def.Payload, []byte("y")) {
		t.Fatalf("after update: %+v", v.Schedule)
	}
}

func TestScheduleBadInput(t *testing.T) {
	e := newEnv(t, 6)
	before := e.c.Stats().LastLSN
	for _, tc := range []struct {
		field string
		mod   func(*ScheduleRequest)
	}{
		{"cron", func(r *ScheduleRequest) { r.Cron = "every day" }},
		{"cron", func(r *ScheduleRequest) { r.Cron = "61 * * * *" }},
		{"cron", func(r *ScheduleRequest) { r.Cron = "" }},
		{"cron", func(r *ScheduleRequest) { r.Cron = "0 0 30 2 *" }}, // never fires
		{"cron", func(r *ScheduleRequest) { r.Cron = "TZ=Europe/Berlin 0 3 * * *" }},
		{"cron", func(r *ScheduleRequest) { r.Cron = "TZ=" }},
		{"time_zone", func(r *ScheduleRequest) { r.TimeZone = "Mars/Olympus" }},
		{"time_zone", func(r *ScheduleRequest) { r.TimeZone = "Local" }},
		{"catch_up_window", func(r *ScheduleRequest) { r.CatchUp = -time.Second }},
		{"overlap", func(r *ScheduleRequest) { r.Overlap = 9 }},
		{"name", func(r *ScheduleRequest) { r.Name = "" }},
		{"name", func(r *ScheduleRequest) { r.Name = "two words" }},
		{"queue", func(r *ScheduleRequest) { r.Queue = "" }},
		{"execution_window", func(r *ScheduleRequest) { r.ExecutionWindow = time.Nanosecond }},
	} {
		req := ScheduleRequest{Queue: "reports", Name: "nightly", Cron: "0 2 * * *"}
		tc.mod(&req)
		_, _, err := e.c.CreateSchedule(ctx, req)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: got %v, want an error naming %s", req, err, tc.field)
		}
	}
	if after := e.c.Stats().LastLSN; after != before {
		t.Fatalf("refused creates wrote records: lsn %d -> %d", before, after)
	}
}

// TestCronDaylightSaving pins what github.com/robfig/cron/v3 does across
// daylight-saving changes (docs/guides/schedules.md says it): a
// daily tick in the skipped hour does not fire that day, and one in the
// repeated hour fires twice, once at each instant with that wall time.
func TestCronDaylightSaving(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	ticks := func(expr string, from time.Time, n int) []string {
		cr, err := ParseCron(expr, "America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tk := range cr.Ticks(state.TimeOf(from), n) {
			out = append(out, tk.In(ny).Format("01-02 15:04 MST"))
		}
		return out
	}
	// 2026-03-08: 02:00 EST jumps to 03:00 EDT.
	if got, want := ticks("30 2 * * *", time.Date(2026, 3, 6, 12, 0, 0, 0, ny), 3), []string{"03-07 02:30 EST", "03-09 02:30 EDT", "03-10 02:30 EDT"}; !reflect.DeepEqual(got, want) {
		t.Errorf("spring forward: %v, want %v", got, want)
	}
	// 2026-11-01: 02:00 EDT falls back to 01:00 EST.
	if got, want := ticks("30 1 * * *", time.Date(2026, 10, 31, 12, 0, 0, 0, ny), 3), []string{"11-01 01:30 EDT", "11-01 01:30 EST", "11-02 01:30 EST"}; !reflect.DeepEqual(got, want) {
		t.Errorf("fall back: %v, want %v", got, want)
	}
	if got, want := ticks("@every 90s", time.Date(2026, 1, 1, 0, 0, 0, 0, ny), 2), []string{"01-01 00:01 EST", "01-01 00:03 EST"}; !reflect.DeepEqual(got, want) {
		t.Errorf("@every: %v, want %v", got, want)
	}
}

// TestRunFiresTicks checks that the background loop wakes for a tick.
func TestRunFiresTicks(t *testing.T) {
	e := newEnv(t, 7)
	e.createSchedule(ScheduleRequest{Queue: "reports", Name: "minutely", Cron: "@every 10m"})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.c.Run(runCtx) }()
	e.clock.WaitForTimers(1)
	e.clock.Advance(10 * time.Minute)
	e.clock.WaitForTimers(1) // the loop waits again: the tick was decided
	cancel()
	<-done
	if n := len(tasksOf(e, "reports")); n != 1 {
		t.Fatalf("%d tasks after the first tick, want 1", n)
	}
}

// TestRunWaitsForTheLastTask: with the policy SKIP, ticks that come due
// while the last task runs write nothing; when it finishes, the loop wakes
// and skips them in one record.
func TestRunWaitsForTheLastTask(t *testing.T) {
	e := newEnv(t, 8)
	e.createSchedule(ScheduleRequest{Queue: "reports", Name: "minutely", Cron: "* * * * *", ExecutionWindow: time.Hour})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.c.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	e.clock.WaitForTimers(1)
	e.clock.Advance(time.Minute)
	e.clock.WaitForTimers(1)
	l := e.lease("w", "reports")
	lsn := e.c.Stats().LastLSN
	for range 5 { // five ticks come due while the task runs
		e.clock.Advance(time.Minute)
		e.clock.WaitForTimers(1)
	}
	if got := e.c.Stats().LastLSN; got != lsn {
		t.Fatalf("%d records written while the last task ran", got-lsn)
	}
	if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		// The task finished at 0:06, as the 0:06 tick came due: 0:02 to
		// 0:05 are skipped, 0:06 fires.
		if r := e.schedule(minutely).Recent; len(r) == 3 {
			if r[1].Outcome != state.Skipped || r[1].Reason != state.SkipOverlap ||
				!r[1].Tick.Std().Equal(epoch.Add(2*time.Minute)) || !r[1].Until.Std().Equal(epoch.Add(6*time.Minute)) ||
				r[2].Outcome != state.Fired || !r[2].Tick.Std().Equal(epoch.Add(6*time.Minute)) {
				t.Fatalf("after the task finished: %+v", r[1:])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop did not decide the waiting ticks when the task finished: %+v", e.schedule(minutely).Recent)
		}
		time.Sleep(time.Millisecond)
	}
}
