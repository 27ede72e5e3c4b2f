package client_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestSchedules calls every schedule method against a real server on a
// fake clock, once per protocol: a schedule fires one task per tick and
// shows it; create is idempotent for the same definition and
// ErrAlreadyExists for another; bad input is ErrInvalidArgument naming the
// field; pause, resume, update, backfill and delete do what they say, and
// who asked is Options.RequestedBy.
func TestSchedules(t *testing.T) {
	eachOps(t, func(t *testing.T, clk *clock.Fake, c *client.Client) {
		ctx := t.Context()
		req := client.ScheduleRequest{Queue: "q", Name: "tick", Cron: "* * * * * *", Overlap: client.OverlapAllow,
			Payload: []byte("p"), Retry: &client.RetryPolicy{MaxAttempts: 2}}

		res, err := c.CreateSchedule(ctx, req)
		sc, created := &res.Schedule, res.Created
		if err != nil || !created || sc.CreatedBy != "ops@box" || sc.Overlap != client.OverlapAllow || sc.RetryPolicy.MaxAttempts != 2 ||
			sc.CatchUpWindow != time.Hour || len(sc.NextFires) != 5 || !sc.NextFires[0].Equal(t0.Add(time.Second)) {
			t.Fatalf("CreateSchedule: %+v, %v, %v", sc, created, err)
		}
		if res, err := c.CreateSchedule(ctx, req); err != nil || res.Created || res.Schedule.Name != "tick" {
			t.Fatalf("CreateSchedule again: created %v, %v; want the schedule, not created", res.Created, err)
		}
		other := req
		other.Cron = "@daily"
		_, err = c.CreateSchedule(ctx, other)
		checkError(t, "CreateSchedule of another definition", err, errorCase{client.ErrAlreadyExists,
			client.Error{Op: "CreateSchedule", Code: connect.CodeAlreadyExists, Reason: client.ReasonAlreadyExists}})
		bad := req
		bad.Name, bad.TimeZone = "bad", "Moon/Tranquility"
		_, err = c.CreateSchedule(ctx, bad)
		checkError(t, "CreateSchedule in an unknown zone", err, errorCase{client.ErrInvalidArgument,
			client.Error{Op: "CreateSchedule", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "time_zone"}})

		clk.Advance(2 * time.Second)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if sc, err = c.GetSchedule(ctx, client.GetScheduleRequest{Namespace: "", Queue: "q", Name: "tick"}); err == nil && len(sc.Recent) == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no two fires: %+v, %v", sc, err)
			}
		}
		for i, f := range sc.Recent {
			if f.Outcome != client.FireOutcomeFired || !f.Tick.Equal(t0.Add(time.Duration(i+1)*time.Second)) || f.TaskID == "" ||
				f.TaskState != client.TaskStateWaiting {
				t.Fatalf("recent[%d] = %+v", i, f)
			}
			task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: f.TaskID})
			if err != nil || string(task.Payload) != "p" || task.RetryPolicy.MaxAttempts != 2 {
				t.Fatalf("the task of a fire: %+v, %v", task, err)
			}
		}
		if ss, err := client.Collect(c.ListSchedules(ctx, client.ListSchedulesRequest{Queue: "q"})); err != nil || len(ss) != 1 || ss[0].Name != "tick" {
			t.Fatalf("ListSchedules: %+v, %v", ss, err)
		}

		p, err := c.PauseSchedule(ctx, client.ScheduleControlRequest{Queue: "q", Name: "tick", Reason: "audit"})
		if err != nil || !p.Changed || !p.Schedule.Paused || p.Schedule.Pause.RequestedBy != "ops@box" || p.Schedule.Pause.Reason != "audit" {
			t.Fatalf("PauseSchedule: %+v, %v", p, err)
		}
		if r, err := c.ResumeSchedule(ctx, client.ScheduleControlRequest{Queue: "q", Name: "tick"}); err != nil || !r.Changed || r.Schedule.Paused {
			t.Fatalf("ResumeSchedule: %+v, %v", r, err)
		}
		up := req
		up.Cron, up.Reason = "@hourly", "calmer"
		if sc, err := c.UpdateSchedule(ctx, up); err != nil || sc.Cron != "@hourly" || !sc.NextFires[0].Equal(t0.Truncate(time.Hour).Add(time.Hour)) {
			t.Fatalf("UpdateSchedule: %+v, %v", sc, err)
		}
		b, err := c.BackfillSchedule(ctx, client.BackfillRequest{Queue: "q", Name: "tick", Start: t0.Add(-2 * time.Hour), End: t0})
		if err != nil || len(b.Fired) != 2 || b.AlreadyFired != 0 || b.Fired[0].Outcome != client.FireOutcomeBackfilled ||
			!b.Fired[0].Tick.Equal(t0.Truncate(time.Hour).Add(-time.Hour)) {
			t.Fatalf("BackfillSchedule: %+v, %v", b, err)
		}
		if err := c.DeleteSchedule(ctx, client.ScheduleControlRequest{Queue: "q", Name: "tick"}); err != nil {
			t.Fatal(err)
		}
		_, err = c.GetSchedule(ctx, client.GetScheduleRequest{Namespace: "", Queue: "q", Name: "tick"})
		checkError(t, "GetSchedule of a deleted schedule", err, errorCase{client.ErrNotFound,
			client.Error{Op: "GetSchedule", Code: connect.CodeNotFound, Reason: client.ReasonNotFound}})
	})
}
