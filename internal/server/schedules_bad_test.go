package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

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
	for _, c := range badScheduleCreates(with) {
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
	for _, c := range badScheduleCalls(ctx, sc) {
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

// badScheduleCreate is a create that must be refused invalid_argument,
// naming field.
type badScheduleCreate struct {
	name  string
	req   *tenurev1.CreateScheduleRequest
	field string
}

// badScheduleCreates are the refused creates of TestSchedulesBadInput,
// each a valid definition changed by with.
func badScheduleCreates(with func(func(*tenurev1.CreateScheduleRequest)) *tenurev1.CreateScheduleRequest) []badScheduleCreate {
	return []badScheduleCreate{
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
	}
}

// badScheduleCall is a call about one schedule that must fail with code,
// its detail naming field ("" for none).
type badScheduleCall struct {
	name  string
	call  func() error
	code  connect.Code
	field string
}

// badScheduleCalls are the refused calls of TestSchedulesBadInput about
// schedule s of queue q, the one schedule there is.
func badScheduleCalls(ctx context.Context, sc tenurev1connect.ScheduleServiceClient) []badScheduleCall {
	return []badScheduleCall{
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
	}
}
