package server_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/clock"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
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
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("not a Connect error: %v", err)
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if td, ok := v.(*tenurev1.ErrorDetail); ok {
				return td.GetField(), td.GetReason()
			}
		}
	}
	t.Fatalf("no ErrorDetail in %v", err)
	return "", 0
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
	ctx := apiCtx(t)
	sc := e.schedules()

	create := &tenurev1.CreateScheduleRequest{Queue: "reports", Name: "tick", Cron: "* * * * * *", Overlap: tenurev1.OverlapPolicy_OVERLAP_POLICY_ALLOW,
		Payload: []byte("report"), Priority: 3, RequestedBy: "ops@box"}
	resp, err := sc.CreateSchedule(ctx, connect.NewRequest(create))
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
		if want := start.Truncate(time.Second).Add(time.Duration(i+1) * time.Second); !ts.AsTime().Equal(want) {
			t.Fatalf("next fire %d is %v, want %v", i, ts.AsTime(), want)
		}
	}
	again, err := sc.CreateSchedule(ctx, connect.NewRequest(create))
	if err != nil || again.Msg.GetCreated() {
		t.Fatalf("CreateSchedule again with the same definition: %v, %v; want the schedule, created false", again, err)
	}
	other := proto.CloneOf(create)
	other.Cron = "@hourly"
	_, err = sc.CreateSchedule(ctx, connect.NewRequest(other))
	if _, reason := errDetail(t, err); connect.CodeOf(err) != connect.CodeAlreadyExists || reason != tenurev1.ErrorReason_ERROR_REASON_ALREADY_EXISTS {
		t.Fatalf("CreateSchedule with another definition: %v; want already_exists, ALREADY_EXISTS", err)
	}

	// Three ticks pass: one task each, with the tick's request id.
	clk.Advance(3 * time.Second)
	var ticks []time.Time
	for i := 1; i <= 3; i++ {
		ticks = append(ticks, start.Truncate(time.Second).Add(time.Duration(i)*time.Second))
	}
	waitFor(t, "three fires", func() bool { return len(e.getSchedule(t, "reports", "tick").GetRecent()) == 3 })
	tasks := e.tasksOf(t, "reports")
	got = e.getSchedule(t, "reports", "tick")
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
	l := e.leaseOne(t, "w", "reports")
	if l == nil {
		t.Fatal("nothing to lease")
	}
	for _, f := range e.getSchedule(t, "reports", "tick").GetRecent() {
		if f.GetTaskId() == l.GetTaskId() && f.GetTaskState() != tenurev1.TaskState_TASK_STATE_LEASED {
			t.Fatalf("recent shows the leased task as %v", f.GetTaskState())
		}
	}

	// Pause: nothing fires, no next fires; resume skips what passed.
	p, err := sc.PauseSchedule(ctx, connect.NewRequest(&tenurev1.PauseScheduleRequest{Queue: "reports", Name: "tick", Reason: "maintenance", RequestedBy: "ops@box"}))
	if err != nil || !p.Msg.GetChanged() || !p.Msg.GetSchedule().GetPaused() || p.Msg.GetSchedule().GetPause().GetReason() != "maintenance" ||
		len(p.Msg.GetSchedule().GetNextFires()) != 0 {
		t.Fatalf("PauseSchedule: %v, %v", p, err)
	}
	if p, err := sc.PauseSchedule(ctx, connect.NewRequest(&tenurev1.PauseScheduleRequest{Queue: "reports", Name: "tick"})); err != nil || p.Msg.GetChanged() {
		t.Fatalf("PauseSchedule of a paused schedule: %v, %v; want changed false", p, err)
	}
	clk.Advance(5 * time.Second)
	r, err := sc.ResumeSchedule(ctx, connect.NewRequest(&tenurev1.ResumeScheduleRequest{Queue: "reports", Name: "tick"}))
	if err != nil || !r.Msg.GetChanged() || r.Msg.GetSchedule().GetPaused() || len(r.Msg.GetSchedule().GetNextFires()) != 5 {
		t.Fatalf("ResumeSchedule: %v, %v", r, err)
	}
	if n := len(e.tasksOf(t, "reports")); n != 3 {
		t.Fatalf("%d tasks after the pause, want 3", n)
	}
	if r, err := sc.ResumeSchedule(ctx, connect.NewRequest(&tenurev1.ResumeScheduleRequest{Queue: "reports", Name: "tick"})); err != nil || r.Msg.GetChanged() {
		t.Fatalf("ResumeSchedule of a running schedule: %v, %v; want changed false", r, err)
	}

	// Update: a new expression; its ticks start after now.
	up, err := sc.UpdateSchedule(ctx, connect.NewRequest(&tenurev1.UpdateScheduleRequest{Queue: "reports", Name: "tick", Cron: "@hourly",
		Payload: []byte("hourly"), Reason: "less often"}))
	if err != nil {
		t.Fatal(err)
	}
	u := up.Msg.GetSchedule()
	wantNext := clk.Now().Truncate(time.Hour).Add(time.Hour)
	if u.GetCron() != "@hourly" || string(u.GetPayload()) != "hourly" || u.GetOverlap() != tenurev1.OverlapPolicy_OVERLAP_POLICY_SKIP ||
		!u.GetNextFires()[0].AsTime().Equal(wantNext) {
		t.Fatalf("UpdateSchedule: %v; want @hourly, payload hourly, SKIP (the default), next %v", u, wantNext)
	}

	// Backfill: the hourly ticks of the last three hours, once.
	from, to := wantNext.Add(-3*time.Hour), wantNext.Add(-time.Hour)
	bf := &tenurev1.BackfillScheduleRequest{Queue: "reports", Name: "tick", Start: timestamppb.New(from), End: timestamppb.New(to), RequestedBy: "ops@box"}
	b, err := sc.BackfillSchedule(ctx, connect.NewRequest(bf))
	if err != nil || len(b.Msg.GetFired()) != 3 || b.Msg.GetAlreadyFired() != 0 {
		t.Fatalf("BackfillSchedule: %v, %v; want 3 fired", b, err)
	}
	for i, f := range b.Msg.GetFired() {
		if want := from.Add(time.Duration(i) * time.Hour); !f.GetTick().AsTime().Equal(want) || f.GetOutcome() != tenurev1.FireOutcome_FIRE_OUTCOME_BACKFILLED ||
			f.GetTaskState() != tenurev1.TaskState_TASK_STATE_WAITING || e.tasksOf(t, "reports")[fireID("reports", "tick", want)] == nil {
			t.Fatalf("fired[%d] = %v, want the tick of %v with its task", i, f, want)
		}
	}
	if b, err := sc.BackfillSchedule(ctx, connect.NewRequest(bf)); err != nil || len(b.Msg.GetFired()) != 0 || b.Msg.GetAlreadyFired() != 3 {
		t.Fatalf("BackfillSchedule again: %v, %v; want 0 fired, 3 already", b, err)
	}

	// Listing: ordered by namespace, queue and name; filters.
	for _, c := range []*tenurev1.CreateScheduleRequest{
		{Namespace: "billing", Queue: "invoices", Name: "monthly", Cron: "@monthly", TimeZone: "Europe/Berlin"},
		{Queue: "reports", Name: "a-first", Cron: "0 9 * * 1-5"},
	} {
		if _, err := sc.CreateSchedule(ctx, connect.NewRequest(c)); err != nil {
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
		if got := names(e.listSchedules(t, c.req)); got != c.want {
			t.Errorf("ListSchedules(%v) = %q, want %q", c.req, got, c.want)
		}
	}
	if tz := e.listSchedules(t, &tenurev1.ListSchedulesRequest{Namespace: "billing"})[0].GetTimeZone(); tz != "Europe/Berlin" {
		t.Errorf("time zone %q", tz)
	}

	// Delete: gone, its tasks stay.
	if _, err := sc.DeleteSchedule(ctx, connect.NewRequest(&tenurev1.DeleteScheduleRequest{Queue: "reports", Name: "tick", Reason: "done"})); err != nil {
		t.Fatal(err)
	}
	_, err = sc.GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "reports", Name: "tick"}))
	if _, reason := errDetail(t, err); connect.CodeOf(err) != connect.CodeNotFound || reason != tenurev1.ErrorReason_ERROR_REASON_NOT_FOUND || !strings.Contains(err.Error(), `"tick"`) {
		t.Fatalf("GetSchedule of a deleted schedule: %v", err)
	}
	if n := len(e.tasksOf(t, "reports")); n != 6 {
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

// TestSchedulesBadInput: every bad request is INVALID_ARGUMENT (or
// NOT_FOUND for a schedule that does not exist) naming the field, and
// nothing is created: no schedule, and no queue.
func TestSchedulesBadInput(t *testing.T) {
	e := newAPIEnv(t)
	ctx := apiCtx(t)
	sc := e.schedules()
	valid := func() *tenurev1.CreateScheduleRequest {
		return &tenurev1.CreateScheduleRequest{Queue: "q", Name: "s", Cron: "@daily"}
	}
	with := func(f func(*tenurev1.CreateScheduleRequest)) *tenurev1.CreateScheduleRequest {
		r := valid()
		f(r)
		return r
	}
	for _, c := range []struct {
		name  string
		req   *tenurev1.CreateScheduleRequest
		field string
	}{
		{"a cron expression that does not parse", with(func(r *tenurev1.CreateScheduleRequest) { r.Cron = "every tuesday" }), "cron"},
		{"a cron expression with 7 fields", with(func(r *tenurev1.CreateScheduleRequest) { r.Cron = "0 0 0 * * * *" }), "cron"},
		{"a minute out of range", with(func(r *tenurev1.CreateScheduleRequest) { r.Cron = "61 * * * *" }), "cron"},
		{"no cron expression", with(func(r *tenurev1.CreateScheduleRequest) { r.Cron = "" }), "cron"},
		{"a time zone in the expression", with(func(r *tenurev1.CreateScheduleRequest) { r.Cron = "TZ=Europe/Paris 0 9 * * *" }), "cron"},
		{"an unknown time zone", with(func(r *tenurev1.CreateScheduleRequest) { r.TimeZone = "Mars/Olympus_Mons" }), "time_zone"},
		{"the Local time zone", with(func(r *tenurev1.CreateScheduleRequest) { r.TimeZone = "Local" }), "time_zone"},
		{"an unknown overlap policy", with(func(r *tenurev1.CreateScheduleRequest) { r.Overlap = 9 }), "overlap"},
		{"a catch-up window too short", with(func(r *tenurev1.CreateScheduleRequest) { r.CatchUpWindow = durationpb.New(time.Millisecond) }), "catch_up_window"},
		{"a negative catch-up window", with(func(r *tenurev1.CreateScheduleRequest) { r.CatchUpWindow = durationpb.New(-time.Second) }), "catch_up_window"},
		{"an execution window too short", with(func(r *tenurev1.CreateScheduleRequest) { r.ExecutionWindow = durationpb.New(time.Millisecond) }), "execution_window"},
		{"too many attempts", with(func(r *tenurev1.CreateScheduleRequest) { r.RetryPolicy = &tenurev1.RetryPolicy{MaxAttempts: 5000} }), "retry_policy.max_attempts"},
		{"no queue", with(func(r *tenurev1.CreateScheduleRequest) { r.Queue = "" }), "queue"},
		{"no name", with(func(r *tenurev1.CreateScheduleRequest) { r.Name = "" }), "name"},
		{"a name with a space", with(func(r *tenurev1.CreateScheduleRequest) { r.Name = "a b" }), "name"},
		{"a namespace with a space", with(func(r *tenurev1.CreateScheduleRequest) { r.Namespace = "a b" }), "namespace"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := sc.CreateSchedule(ctx, connect.NewRequest(c.req))
			field, reason := errDetail(t, err)
			if connect.CodeOf(err) != connect.CodeInvalidArgument || reason != tenurev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT || field != c.field {
				t.Fatalf("got %v (field %q, reason %v); want invalid_argument naming %q", err, field, reason, c.field)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("the message does not name %s: %v", c.field, err)
			}
		})
	}
	if ss := e.listSchedules(t, &tenurev1.ListSchedulesRequest{}); len(ss) != 0 {
		t.Fatalf("refused creates left schedules: %v", ss)
	}
	if qs, err := e.queues().ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{})); err != nil || len(qs.Msg.GetQueues()) != 0 {
		t.Fatalf("refused creates left queues: %v, %v", qs, err)
	}

	// The calls about one schedule: unknown, or badly named.
	if _, err := sc.CreateSchedule(ctx, connect.NewRequest(valid())); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		call  func() error
		code  connect.Code
		field string
	}{
		{"get of an unknown schedule", func() error {
			_, err := sc.GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "q", Name: "nope"}))
			return err
		}, connect.CodeNotFound, ""},
		{"pause of a schedule of another queue", func() error {
			_, err := sc.PauseSchedule(ctx, connect.NewRequest(&tenurev1.PauseScheduleRequest{Queue: "other", Name: "s"}))
			return err
		}, connect.CodeNotFound, ""},
		{"get without a queue", func() error {
			_, err := sc.GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Name: "s"}))
			return err
		}, connect.CodeInvalidArgument, "queue"},
		{"resume without a name", func() error {
			_, err := sc.ResumeSchedule(ctx, connect.NewRequest(&tenurev1.ResumeScheduleRequest{Queue: "q"}))
			return err
		}, connect.CodeInvalidArgument, "name"},
		{"update to a bad expression", func() error {
			_, err := sc.UpdateSchedule(ctx, connect.NewRequest(&tenurev1.UpdateScheduleRequest{Queue: "q", Name: "s", Cron: "@sometimes"}))
			return err
		}, connect.CodeInvalidArgument, "cron"},
		{"update of an unknown schedule", func() error {
			_, err := sc.UpdateSchedule(ctx, connect.NewRequest(&tenurev1.UpdateScheduleRequest{Queue: "q", Name: "nope", Cron: "@daily"}))
			return err
		}, connect.CodeNotFound, ""},
		{"delete of an unknown schedule", func() error {
			_, err := sc.DeleteSchedule(ctx, connect.NewRequest(&tenurev1.DeleteScheduleRequest{Queue: "q", Name: "nope"}))
			return err
		}, connect.CodeNotFound, ""},
		{"backfill without an end", func() error {
			_, err := sc.BackfillSchedule(ctx, connect.NewRequest(&tenurev1.BackfillScheduleRequest{Queue: "q", Name: "s", Start: timestamppb.Now()}))
			return err
		}, connect.CodeInvalidArgument, "end"},
		{"backfill of the future", func() error {
			_, err := sc.BackfillSchedule(ctx, connect.NewRequest(&tenurev1.BackfillScheduleRequest{Queue: "q", Name: "s",
				Start: timestamppb.New(time.Now().Add(-time.Hour)), End: timestamppb.New(time.Now().Add(48 * time.Hour))}))
			return err
		}, connect.CodeInvalidArgument, "end"},
		{"backfill with an end before its start", func() error {
			_, err := sc.BackfillSchedule(ctx, connect.NewRequest(&tenurev1.BackfillScheduleRequest{Queue: "q", Name: "s",
				Start: timestamppb.New(time.Now().Add(-time.Hour)), End: timestamppb.New(time.Now().Add(-2 * time.Hour))}))
			return err
		}, connect.CodeInvalidArgument, "end"},
		{"backfill with an invalid start", func() error {
			_, err := sc.BackfillSchedule(ctx, connect.NewRequest(&tenurev1.BackfillScheduleRequest{Queue: "q", Name: "s",
				Start: &timestamppb.Timestamp{Nanos: -1}, End: timestamppb.Now()}))
			return err
		}, connect.CodeInvalidArgument, "start"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			field, _ := errDetail(t, err)
			if connect.CodeOf(err) != c.code || field != c.field {
				t.Fatalf("got %v (field %q); want %v naming %q", err, field, c.code, c.field)
			}
		})
	}
	got := e.getSchedule(t, "q", "s")
	if got.GetCron() != "@daily" || len(got.GetRecent()) != 0 || len(e.tasksOf(t, "q")) != 0 {
		t.Fatalf("refused calls changed the schedule: %v", got)
	}
}
