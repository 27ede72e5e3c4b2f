package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

func (e *apiEnv) schedules() tenurev1connect.ScheduleServiceClient {
	return tenurev1connect.NewScheduleServiceClient(e.hc, e.url)
}

func (e *apiEnv) getSchedule(t *testing.T, queue, name string) *tenurev1.Schedule {
	t.Helper()
	resp, err := e.schedules().GetSchedule(apiCtx(t), connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: queue, Name: name}))
	if err != nil {
		t.Fatalf("GetSchedule(%s/%s): %v", queue, name, err)
	}
	return resp.Msg.GetSchedule()
}

func (e *apiEnv) listSchedules(t *testing.T, req *tenurev1.ListSchedulesRequest) []*tenurev1.Schedule {
	t.Helper()
	resp, err := e.schedules().ListSchedules(apiCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("ListSchedules(%v): %v", req, err)
	}
	return resp.Msg.GetSchedules()
}

// tasksOf returns the tasks of queue by request id.
func (e *apiEnv) tasksOf(t *testing.T, queue string) map[string]*tenurev1.Task {
	t.Helper()
	resp, err := e.tasks.ListTasks(apiCtx(t), connect.NewRequest(&tenurev1.ListTasksRequest{Queue: queue, PageSize: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tenurev1.Task{}
	for _, tk := range resp.Msg.GetTasks() {
		if out[tk.GetRequestId()] != nil {
			t.Fatalf("two tasks with request id %q", tk.GetRequestId())
		}
		out[tk.GetRequestId()] = tk
	}
	return out
}

// fireID is the request id of the task of a tick (state.FireRequestID,
// as the API documents it).
func fireID(queue, name string, tick time.Time) string {
	return fmt.Sprintf("schedule %s/%s %d", queue, name, tick.UnixNano())
}

// errDetail returns the field and reason of an API error's detail.
func errDetail(t *testing.T, err error) (string, tenurev1.ErrorReason) {
	t.Helper()
	d := apitest.ErrorDetail(err)
	if d == nil {
		t.Fatalf("no ErrorDetail in %v", err)
	}
	return d.GetField(), d.GetReason()
}

// TestSchedulesAPI drives every call of ScheduleService on an embedded
// node whose clock the test moves: a schedule fires one task per tick,
// with the tick's request id, and shows its next fires and its recent
// decisions with each task's state; create is idempotent for the same
// definition and refused for another; pause stops the ticks and resume
// skips those that passed; update, backfill and delete do what they say.
func TestSchedulesAPI(t *testing.T) {
	start := time.Date(2026, 3, 4, 10, 0, 0, 500e6, time.UTC)
	clk := clock.NewFake(start)
	e := newAPIEnvClock(t, clk)
	s := &scheduleRun{e: e, clk: clk, start: start, sc: e.schedules()}
	s.created(t)
	s.fired(t)
	s.pausedAndResumed(t)
	s.backfilled(t, s.updated(t))
	s.listed(t)
	s.deleted(t)
}

// scheduleRun is the node of TestSchedulesAPI, on a clock that started
// at start and that the test moves, and its ScheduleService.
type scheduleRun struct {
	e     *apiEnv
	clk   *clock.Fake
	start time.Time
	sc    tenurev1connect.ScheduleServiceClient
}

// created: a schedule is created with its defaults filled in and its next
// five fires; created again with the same definition it is answered as it
// is, with another it is refused.
func (s *scheduleRun) created(t *testing.T) {
	ctx := apiCtx(t)
	create := &tenurev1.CreateScheduleRequest{Queue: "reports", Name: "tick", Cron: "* * * * * *", Overlap: tenurev1.OverlapPolicy_OVERLAP_POLICY_ALLOW,
		Payload: []byte("report"), Priority: 3, RequestedBy: "ops@box"}
	resp, err := s.sc.CreateSchedule(ctx, connect.NewRequest(create))
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Msg.GetSchedule()
	if !resp.Msg.GetCreated() || got.GetNamespace() != "default" || got.GetCreatedBy() != "ops@box" || got.GetPaused() {
		t.Fatalf("CreateSchedule: %v", resp.Msg)
	}
	// Defaults filled in, as a submit's.
	if got.GetOverlap() != tenurev1.OverlapPolicy_OVERLAP_POLICY_ALLOW || got.GetCatchUpWindow().AsDuration() != time.Hour ||
		got.GetExecutionWindow().AsDuration() != 30*time.Second || got.GetRetryPolicy().GetMaxAttempts() != 3 || got.GetPriority() != 3 {
		t.Fatalf("definition with defaults: %v", got)
	}
	next := got.GetNextFires()
	if len(next) != 5 {
		t.Fatalf("%d next fires, want 5", len(next))
	}
	for i, ts := range next {
		if want := s.start.Truncate(time.Second).Add(time.Duration(i+1) * time.Second); !ts.AsTime().Equal(want) {
			t.Fatalf("next fire %d is %v, want %v", i, ts.AsTime(), want)
		}
	}
	again, err := s.sc.CreateSchedule(ctx, connect.NewRequest(create))
	if err != nil || again.Msg.GetCreated() {
		t.Fatalf("CreateSchedule again with the same definition: %v, %v; want the schedule, created false", again, err)
	}
	other := proto.CloneOf(create)
	other.Cron = "@hourly"
	_, err = s.sc.CreateSchedule(ctx, connect.NewRequest(other))
	if _, reason := errDetail(t, err); connect.CodeOf(err) != connect.CodeAlreadyExists || reason != tenurev1.ErrorReason_ERROR_REASON_ALREADY_EXISTS {
		t.Fatalf("CreateSchedule with another definition: %v; want already_exists, ALREADY_EXISTS", err)
	}
}

// fired: three ticks pass: one task each, with the tick's request id, the
// template's payload and priority; the schedule's recent fires show each
// task's state as it changes.
func (s *scheduleRun) fired(t *testing.T) {
	// Three ticks pass: one task each, with the tick's request id.
	s.clk.Advance(3 * time.Second)
	var ticks []time.Time
	for i := 1; i <= 3; i++ {
		ticks = append(ticks, s.start.Truncate(time.Second).Add(time.Duration(i)*time.Second))
	}
	waitFor(t, "three fires", func() bool { return len(s.e.getSchedule(t, "reports", "tick").GetRecent()) == 3 })
	tasks := s.e.tasksOf(t, "reports")
	got := s.e.getSchedule(t, "reports", "tick")
	for i, f := range got.GetRecent() {
		tk := tasks[fireID("reports", "tick", ticks[i])]
		if f.GetOutcome() != tenurev1.FireOutcome_FIRE_OUTCOME_FIRED || !f.GetTick().AsTime().Equal(ticks[i]) || tk == nil ||
			f.GetTaskId() != tk.GetTaskId() || f.GetTaskState() != tenurev1.TaskState_TASK_STATE_WAITING {
			t.Fatalf("recent[%d] = %v; task of the tick %v", i, f, tk)
		}
		if string(tk.GetPayload()) != "report" || tk.GetPriority() != 3 {
			t.Fatalf("the task of a fire is not the template's: %v", tk)
		}
	}
	if len(tasks) != 3 {
		t.Fatalf("%d tasks in the queue, want 3", len(tasks))
	}
	if n := got.GetNextFires(); len(n) != 5 || !n[0].AsTime().Equal(ticks[2].Add(time.Second)) {
		t.Fatalf("next fires after three ticks: %v", n)
	}
	// The task's state follows it.
	l := s.e.leaseOne(t, "w", "reports")
	if l == nil {
		t.Fatal("nothing to lease")
	}
	for _, f := range s.e.getSchedule(t, "reports", "tick").GetRecent() {
		if f.GetTaskId() == l.GetTaskId() && f.GetTaskState() != tenurev1.TaskState_TASK_STATE_LEASED {
			t.Fatalf("recent shows the leased task as %v", f.GetTaskState())
		}
	}
}

// pausedAndResumed: a paused schedule fires nothing and has no next
// fires; resumed, it skips the ticks that passed.
func (s *scheduleRun) pausedAndResumed(t *testing.T) {
	ctx := apiCtx(t)
	// Pause: nothing fires, no next fires; resume skips what passed.
	p, err := s.sc.PauseSchedule(ctx, connect.NewRequest(&tenurev1.PauseScheduleRequest{Queue: "reports", Name: "tick", Reason: "maintenance", RequestedBy: "ops@box"}))
	if err != nil || !p.Msg.GetChanged() || !p.Msg.GetSchedule().GetPaused() || p.Msg.GetSchedule().GetPause().GetReason() != "maintenance" ||
		len(p.Msg.GetSchedule().GetNextFires()) != 0 {
		t.Fatalf("PauseSchedule: %v, %v", p, err)
	}
	if p, err := s.sc.PauseSchedule(ctx, connect.NewRequest(&tenurev1.PauseScheduleRequest{Queue: "reports", Name: "tick"})); err != nil || p.Msg.GetChanged() {
		t.Fatalf("PauseSchedule of a paused schedule: %v, %v; want changed false", p, err)
	}
	s.clk.Advance(5 * time.Second)
	r, err := s.sc.ResumeSchedule(ctx, connect.NewRequest(&tenurev1.ResumeScheduleRequest{Queue: "reports", Name: "tick"}))
	if err != nil || !r.Msg.GetChanged() || r.Msg.GetSchedule().GetPaused() || len(r.Msg.GetSchedule().GetNextFires()) != 5 {
		t.Fatalf("ResumeSchedule: %v, %v", r, err)
	}
	if n := len(s.e.tasksOf(t, "reports")); n != 3 {
		t.Fatalf("%d tasks after the pause, want 3", n)
	}
	if r, err := s.sc.ResumeSchedule(ctx, connect.NewRequest(&tenurev1.ResumeScheduleRequest{Queue: "reports", Name: "tick"})); err != nil || r.Msg.GetChanged() {
		t.Fatalf("ResumeSchedule of a running schedule: %v, %v; want changed false", r, err)
	}
}

// updated: a new expression, whose ticks start after now; it returns the
// first of them.
func (s *scheduleRun) updated(t *testing.T) time.Time {
	ctx := apiCtx(t)
	// Update: a new expression; its ticks s.start after now.
	up, err := s.sc.UpdateSchedule(ctx, connect.NewRequest(&tenurev1.UpdateScheduleRequest{Queue: "reports", Name: "tick", Cron: "@hourly",
		Payload: []byte("hourly"), Reason: "less often"}))
	if err != nil {
		t.Fatal(err)
	}
	u := up.Msg.GetSchedule()
	wantNext := s.clk.Now().Truncate(time.Hour).Add(time.Hour)
	if u.GetCron() != "@hourly" || string(u.GetPayload()) != "hourly" || u.GetOverlap() != tenurev1.OverlapPolicy_OVERLAP_POLICY_SKIP ||
		!u.GetNextFires()[0].AsTime().Equal(wantNext) {
		t.Fatalf("UpdateSchedule: %v; want @hourly, payload hourly, SKIP (the default), next %v", u, wantNext)
	}
	return wantNext
}

// backfilled: the hourly ticks of the three hours before next, once.
func (s *scheduleRun) backfilled(t *testing.T, wantNext time.Time) {
	ctx := apiCtx(t)
	// Backfill: the hourly ticks of the last three hours, once.
	from, to := wantNext.Add(-3*time.Hour), wantNext.Add(-time.Hour)
	bf := &tenurev1.BackfillScheduleRequest{Queue: "reports", Name: "tick", Start: timestamppb.New(from), End: timestamppb.New(to), RequestedBy: "ops@box"}
	b, err := s.sc.BackfillSchedule(ctx, connect.NewRequest(bf))
	if err != nil || len(b.Msg.GetFired()) != 3 || b.Msg.GetAlreadyFired() != 0 {
		t.Fatalf("BackfillSchedule: %v, %v; want 3 fired", b, err)
	}
	for i, f := range b.Msg.GetFired() {
		if want := from.Add(time.Duration(i) * time.Hour); !f.GetTick().AsTime().Equal(want) || f.GetOutcome() != tenurev1.FireOutcome_FIRE_OUTCOME_BACKFILLED ||
			f.GetTaskState() != tenurev1.TaskState_TASK_STATE_WAITING || s.e.tasksOf(t, "reports")[fireID("reports", "tick", want)] == nil {
			t.Fatalf("fired[%d] = %v, want the tick of %v with its task", i, f, want)
		}
	}
	if b, err := s.sc.BackfillSchedule(ctx, connect.NewRequest(bf)); err != nil || len(b.Msg.GetFired()) != 0 || b.Msg.GetAlreadyFired() != 3 {
		t.Fatalf("BackfillSchedule again: %v, %v; want 0 fired, 3 already", b, err)
	}
}

// listed: schedules are listed by namespace, queue and name, filtered.
func (s *scheduleRun) listed(t *testing.T) {
	ctx := apiCtx(t)
	// Listing: ordered by namespace, queue and name; filters.
	for _, c := range []*tenurev1.CreateScheduleRequest{
		{Namespace: "billing", Queue: "invoices", Name: "monthly", Cron: "@monthly", TimeZone: "Europe/Berlin"},
		{Queue: "reports", Name: "a-first", Cron: "0 9 * * 1-5"},
	} {
		if _, err := s.sc.CreateSchedule(ctx, connect.NewRequest(c)); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ss []*tenurev1.Schedule) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.GetNamespace()+"/"+s.GetQueue()+"/"+s.GetName())
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		req  *tenurev1.ListSchedulesRequest
		want string
	}{
		{&tenurev1.ListSchedulesRequest{}, "billing/invoices/monthly default/reports/a-first default/reports/tick"},
		{&tenurev1.ListSchedulesRequest{Namespace: "billing"}, "billing/invoices/monthly"},
		{&tenurev1.ListSchedulesRequest{Queue: "reports"}, "default/reports/a-first default/reports/tick"},
		{&tenurev1.ListSchedulesRequest{Namespace: "none"}, ""},
	} {
		if got := names(s.e.listSchedules(t, c.req)); got != c.want {
			t.Errorf("ListSchedules(%v) = %q, want %q", c.req, got, c.want)
		}
	}
	if tz := s.e.listSchedules(t, &tenurev1.ListSchedulesRequest{Namespace: "billing"})[0].GetTimeZone(); tz != "Europe/Berlin" {
		t.Errorf("time zone %q", tz)
	}
}

// deleted: a deleted schedule is gone, the tasks it submitted stay.
func (s *scheduleRun) deleted(t *testing.T) {
	ctx := apiCtx(t)
	// Delete: gone, its tasks stay.
	if _, err := s.sc.DeleteSchedule(ctx, connect.NewRequest(&tenurev1.DeleteScheduleRequest{Queue: "reports", Name: "tick", Reason: "done"})); err != nil {
		t.Fatal(err)
	}
	_, err := s.sc.GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "reports", Name: "tick"}))
	if _, reason := errDetail(t, err); connect.CodeOf(err) != connect.CodeNotFound || reason != tenurev1.ErrorReason_ERROR_REASON_NOT_FOUND || !strings.Contains(err.Error(), `"tick"`) {
		t.Fatalf("GetSchedule of a deleted schedule: %v", err)
	}
	if n := len(s.e.tasksOf(t, "reports")); n != 6 {
		t.Fatalf("%d tasks after the delete, want the 6 it submitted", n)
	}
}

// waitFor polls cond until it holds, or fails the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
