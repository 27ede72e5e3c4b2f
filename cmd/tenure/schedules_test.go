package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/eventually"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// waitSchedule polls a schedule until cond holds of it, or fails the test.
func waitSchedule(t *testing.T, c *client.Client, queue, name, what string, cond func(*client.Schedule) bool) *client.Schedule {
	t.Helper()
	var sc *client.Schedule
	eventually.NoError(t, fmt.Sprintf("schedule %s/%s: %s", queue, name, what), func() error {
		var err error
		if sc, err = c.GetSchedule(t.Context(), client.GetScheduleRequest{Namespace: "", Queue: queue, Name: name}); err != nil {
			return err
		}
		if !cond(sc) {
			return fmt.Errorf("not yet: %+v", sc)
		}
		return nil
	})
	return sc
}

// onFakeClock runs a real node whose clock reads start until the test
// moves it, and returns the clock, the node's URL and an SDK client.
func onFakeClock(t *testing.T, start time.Time) (*clock.Fake, string, *client.Client) {
	t.Helper()
	clk := clock.NewFake(start)
	addr := apitest.StartClock(t, clk)
	return clk, addr, sdk(t, addr)
}

// TestCLISchedules drives every schedule command against a server on a
// fake clock: bad input is refused naming the field and creates nothing;
// a schedule fires one task per tick, which get shows with its state;
// update keeps what no flag changes; pause, resume, backfill and delete
// say what they did.
func TestCLISchedules(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 5, 6, 7, 8, 0, 0, time.UTC)
	clk, addr, c := onFakeClock(t, start)

	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--cron", "every day"}, 1, []string{`tenure schedule create: --cron: "every day" does not parse`}},
		{[]string{"--cron", "@daily", "--time-zone", "Europe/Atlantis"}, 1, []string{`tenure schedule create: --time-zone: "Europe/Atlantis" is not a zone`, "IANA"}},
		{[]string{"--cron", "@daily", "--catch-up", "1ms"}, 1, []string{"tenure schedule create: --catch-up: 1ms is outside"}},
		{[]string{"--cron", "@daily", "--overlap", "sometimes"}, 2, []string{`--overlap "sometimes"`, "skip, allow or buffer-one"}},
		{[]string{"--cron", "@daily", "--max-attempts", "0"}, 2, []string{"--max-attempts 0"}},
		{[]string{"--cron", "@daily", "--payload", "a", "--payload-file", "f"}, 2, []string{"not both"}},
		{nil, 2, []string{"--cron is required"}},
	} {
		args := append([]string{"schedule", "create", "s", "--queue", "q", "--addr", addr}, tc.args...)
		code, _, errs := cli(t, args...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d: %s", tc.args, code, tc.code, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%v: stderr lacks %q: %s", tc.args, w, errs)
			}
		}
	}
	if code, out, errs := cli(t, "schedule", "list", "--addr", addr); code != 0 || out != "" || !strings.Contains(errs, "no schedules") {
		t.Fatalf("schedule list after refused creates: exit %d, %q, %q; want no schedules", code, out, errs)
	}
	usageRefused(t, []string{"schedule", "create", "s", "--cron", "@daily", "--addr", addr}, "--queue is required")

	out := mustCLI(t, "schedule", "create", "tick", "--queue", "q", "--cron", "* * * * * *", "--overlap", "allow", "--payload", "ping",
		"--priority", "4", "--max-attempts", "2", "--requested-by", "ops@box", "--addr", addr)
	if !strings.HasPrefix(out, "created schedule default/q/tick\nnext fires (UTC):\n") || strings.Count(out, "\n  ") != 5 ||
		!strings.Contains(out, "  "+fmtTimeIn(start.Add(time.Second), time.UTC)+"\n") {
		t.Fatalf("schedule create printed:\n%s", out)
	}
	again := mustCLI(t, "schedule", "create", "tick", "--queue", "q", "--cron", "* * * * * *", "--overlap", "allow", "--payload", "ping",
		"--priority", "4", "--max-attempts", "2", "--addr", addr)
	if !strings.Contains(again, "exists already with this definition") {
		t.Fatalf("schedule create again printed:\n%s", again)
	}
	if code, _, errs := cli(t, "schedule", "create", "tick", "--queue", "q", "--cron", "@daily", "--addr", addr); code != 1 || !strings.Contains(errs, `tenure schedule create: schedule "tick" already exists`) {
		t.Fatalf("create with another definition: exit %d: %s", code, errs)
	}

	clk.Advance(2 * time.Second)
	sc := waitSchedule(t, c, "q", "tick", "two fires", func(sc *client.Schedule) bool { return len(sc.Recent) == 2 })
	get := mustCLI(t, "schedule", "get", "tick", "--queue", "q", "--addr", addr)
	for _, want := range []string{"default/q/tick", "* * * * * * (UTC)", "ALLOW", "1h0m0s", `payload "ping", window 30s, up to 2 attempts, priority 4`,
		"running", "by ops@box", "next fires (UTC):", "recent decisions (ticks in UTC):", "TICK", sc.Recent[0].TaskID, sc.Recent[1].TaskID, "FIRED", "WAITING"} {
		if !strings.Contains(get, want) {
			t.Errorf("schedule get lacks %q:\n%s", want, get)
		}
	}
	row := queueRowOf(t, mustCLI(t, "schedule", "list", "--addr", addr), "tick")
	if row[1] != "default/q" || !strings.HasPrefix(row[2], "*") || !strings.Contains(strings.Join(row, " "), "FIRED") || row[len(row)-1] != "no" {
		t.Errorf("schedule list row: %q", row)
	}

	// Update: only --cron changes; payload, priority and attempts stay.
	up := mustCLI(t, "schedule", "update", "tick", "--queue", "q", "--cron", "@hourly", "--reason", "calmer", "--addr", addr)
	if !strings.HasPrefix(up, "updated schedule default/q/tick\n") {
		t.Fatalf("schedule update printed:\n%s", up)
	}
	sc, err := c.GetSchedule(t.Context(), client.GetScheduleRequest{Namespace: "", Queue: "q", Name: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Cron != "@hourly" || string(sc.Payload) != "ping" || sc.Priority != 4 || sc.RetryPolicy.MaxAttempts != 2 || sc.Overlap != client.OverlapAllow {
		t.Fatalf("after update --cron: %+v", sc)
	}

	if out := mustCLI(t, "schedule", "pause", "tick", "--queue", "q", "--reason", "audit", "--requested-by", "ops@box", "--addr", addr); out != "paused schedule default/q/tick\n" {
		t.Fatalf("schedule pause printed %q", out)
	}
	if out := mustCLI(t, "schedule", "pause", "tick", "--queue", "q", "--addr", addr); !strings.Contains(out, "was already paused (since ") || !strings.Contains(out, "by ops@box: audit") {
		t.Fatalf("second schedule pause printed %q", out)
	}
	if get := mustCLI(t, "schedule", "get", "tick", "--queue", "q", "--addr", addr); !strings.Contains(get, "paused (since") || !strings.Contains(get, "next fires: none") {
		t.Fatalf("schedule get of the paused schedule:\n%s", get)
	}
	if out := mustCLI(t, "schedule", "resume", "tick", "--queue", "q", "--addr", addr); !strings.HasPrefix(out, "resumed schedule default/q/tick\nnext fires (UTC):") {
		t.Fatalf("schedule resume printed %q", out)
	}
	if out := mustCLI(t, "schedule", "resume", "tick", "--queue", "q", "--addr", addr); out != "schedule default/q/tick was not paused\n" {
		t.Fatalf("second schedule resume printed %q", out)
	}

	// Backfill: the hourly ticks of the two hours before start, once.
	from, to := start.Truncate(time.Hour).Add(-2*time.Hour).Format(time.RFC3339), start.Truncate(time.Hour).Add(-time.Hour).Format(time.RFC3339)
	bf := mustCLI(t, "schedule", "backfill", "tick", "--queue", "q", "--from", from, "--to", to, "--addr", addr)
	if !strings.HasPrefix(bf, "fired 2 ticks; 0 ticks had fired already\n") {
		t.Fatalf("schedule backfill printed:\n%s", bf)
	}
	if bf := mustCLI(t, "schedule", "backfill", "tick", "--queue", "q", "--from", from, "--to", to, "--addr", addr); bf != "fired 0 ticks; 2 ticks had fired already\n" {
		t.Fatalf("second schedule backfill printed %q", bf)
	}
	usageRefused(t, []string{"schedule", "backfill", "tick", "--queue", "q", "--from", "yesterday", "--to", to, "--addr", addr}, "RFC 3339")

	// Delete: asks; --yes; the tasks stay.
	if code, _, errs := cliIn(t, "", false, "schedule", "delete", "tick", "--queue", "q", "--addr", addr); code != 2 || !strings.Contains(errs, "pass --yes") {
		t.Fatalf("delete without a terminal nor --yes: exit %d: %s", code, errs)
	}
	if code, _, errs := cliIn(t, "n\n", true, "schedule", "delete", "tick", "--queue", "q", "--addr", addr); code != 1 || !strings.Contains(errs, "aborted") {
		t.Fatalf("delete answered n: exit %d: %s", code, errs)
	}
	if code, out, errs := cliIn(t, "y\n", true, "schedule", "delete", "tick", "--queue", "q", "--addr", addr); code != 0 || out != "deleted schedule default/q/tick\n" {
		t.Fatalf("delete answered y: exit %d: %q %s", code, out, errs)
	}
	if code, _, errs := cli(t, "schedule", "get", "tick", "--queue", "q", "--addr", addr); code != 1 || !strings.Contains(errs, `tenure schedule get: schedule not found: no schedule "tick"`) {
		t.Fatalf("get of the deleted schedule: exit %d: %s", code, errs)
	}
	if n := len(tasksIn(t, c, "q")); n != 4 {
		t.Fatalf("%d tasks after the delete, want the 4 the schedule submitted", n)
	}
}

// queueRowOf returns the fields of the line of `tenure schedule list`
// whose first column is name.
func queueRowOf(t *testing.T, table, name string) []string {
	t.Helper()
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return f
		}
	}
	t.Fatalf("no row of %s in:\n%s", name, table)
	return nil
}

// TestCLISchedulesJSONIsTheAPIsJSON pins the --json output of the schedule
// commands: the API's JSON of the same answer.
func TestCLISchedulesJSONIsTheAPIsJSON(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	start := time.Date(2026, 5, 6, 7, 8, 0, 0, time.UTC)
	clk, addr, c := onFakeClock(t, start)
	api := tenurev1connect.NewScheduleServiceClient(http.DefaultClient, addr, connect.WithProtoJSON())
	get := func(name string) *tenurev1.Schedule {
		t.Helper()
		resp, err := api.GetSchedule(ctx, connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "q", Name: name}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetSchedule()
	}

	created := mustCLI(t, "schedule", "create", "tick", "--queue", "q", "--cron", "* * * * * *", "--overlap", "buffer-one", "--payload", "ping",
		"--time-zone", "Europe/Berlin", "--requested-by", "ops@box", "--json", "--addr", addr)
	sameJSON(t, "schedule create", created, &tenurev1.CreateScheduleResponse{Schedule: get("tick"), Created: true})
	// Two ticks: the first fires, the second is held (its task waits).
	clk.Advance(2 * time.Second)
	waitSchedule(t, c, "q", "tick", "a held tick", func(sc *client.Schedule) bool { return !sc.HeldTick.IsZero() })
	one := sameJSON(t, "schedule get", mustCLI(t, "schedule", "get", "tick", "--queue", "q", "--json", "--addr", addr), &tenurev1.GetScheduleResponse{Schedule: get("tick")})
	pinJSON(t, "schedule get", one, "schedule.namespace", "schedule.queue", "schedule.name", "schedule.cron", "schedule.timeZone", "schedule.overlap",
		"schedule.catchUpWindow", "schedule.payload", "schedule.executionWindow", "schedule.retryPolicy.maxAttempts", "schedule.nextFires",
		"schedule.recent", "schedule.recent[].tick", "schedule.recent[].outcome", "schedule.recent[].taskId", "schedule.recent[].taskState",
		"schedule.recent[].at", "schedule.createdAt", "schedule.createdBy", "schedule.updatedAt", "schedule.heldTick")

	pause := mustCLI(t, "schedule", "pause", "tick", "--queue", "q", "--reason", "audit", "--json", "--addr", addr)
	p := sameJSON(t, "schedule pause", pause, &tenurev1.PauseScheduleResponse{Changed: true, Schedule: get("tick")})
	pinJSON(t, "schedule pause", p, "changed", "schedule.paused", "schedule.pause.reason", "schedule.pause.pausedAt")
	sameJSON(t, "schedule resume", mustCLI(t, "schedule", "resume", "tick", "--queue", "q", "--json", "--addr", addr),
		&tenurev1.ResumeScheduleResponse{Changed: true, Schedule: get("tick")})
	if _, err := c.CreateSchedule(ctx, client.ScheduleRequest{Namespace: "billing", Queue: "inv", Name: "monthly", Cron: "@monthly"}); err != nil {
		t.Fatal(err)
	}
	all, err := api.ListSchedules(ctx, connect.NewRequest(&tenurev1.ListSchedulesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "schedule list", mustCLI(t, "schedule", "list", "--json", "--addr", addr), all.Msg)
	sameJSON(t, "schedule list (none)", mustCLI(t, "schedule", "list", "--namespace", "none", "--json", "--addr", addr), &tenurev1.ListSchedulesResponse{})
	updated := mustCLI(t, "schedule", "update", "tick", "--queue", "q", "--priority", "9", "--json", "--addr", addr)
	sameJSON(t, "schedule update", updated, &tenurev1.UpdateScheduleResponse{Schedule: get("tick")})

	// A backfill of two past ticks (the zone's minutes are the same).
	from, to := start.Add(-10*time.Second).Format(time.RFC3339), start.Add(-9*time.Second).Format(time.RFC3339)
	bfOut := mustCLI(t, "schedule", "backfill", "tick", "--queue", "q", "--from", from, "--to", to, "--json", "--addr", addr)
	bfWant := &tenurev1.BackfillScheduleResponse{}
	for _, f := range get("tick").GetRecent() {
		if f.GetOutcome() == tenurev1.FireOutcome_FIRE_OUTCOME_BACKFILLED {
			f.TaskState = tenurev1.TaskState_TASK_STATE_WAITING // as created
			bfWant.Fired = append(bfWant.Fired, f)
		}
	}
	bf := sameJSON(t, "schedule backfill", bfOut, bfWant)
	pinJSON(t, "schedule backfill", bf, "fired", "fired[].tick", "fired[].outcome", "fired[].taskId", "fired[].taskState", "fired[].at")
	sameJSON(t, "schedule backfill (again)", mustCLI(t, "schedule", "backfill", "tick", "--queue", "q", "--from", from, "--to", to, "--json", "--addr", addr),
		&tenurev1.BackfillScheduleResponse{AlreadyFired: 2})
	sameJSON(t, "schedule delete", mustCLI(t, "schedule", "delete", "tick", "--queue", "q", "--yes", "--json", "--addr", addr), &tenurev1.DeleteScheduleResponse{})
}

// TestCLIScheduleHelp: each schedule command's help says what it does,
// names its flags and gives an example.
func TestCLIScheduleHelp(t *testing.T) {
	t.Parallel()
	def := []string{"--cron", "--time-zone", "--overlap", "--catch-up", "--payload", "--payload-file", "--window", "--max-attempts", "--priority", "--queue", "--namespace"}
	helpSays(t, map[string][]string{
		"schedule create":   append([]string{"Create a schedule", "once and only once", "--requested-by", "CreateScheduleResponse"}, def...),
		"schedule update":   append([]string{"keeps its value", "--reason", "UpdateScheduleResponse"}, def...),
		"schedule list":     {"NEXT", "LAST", "PAUSED", "--queue", "--namespace", "--json", "ListSchedulesResponse"},
		"schedule get":      {"next", "recent decisions", "--queue", "GetScheduleResponse"},
		"schedule pause":    {"Pause a schedule", "--reason", "--requested-by", "PauseScheduleResponse"},
		"schedule resume":   {"skipped", "--reason", "ResumeScheduleResponse"},
		"schedule delete":   {"tasks it submitted stay", "--yes", "--reason"},
		"schedule backfill": {"--from", "--to", "RFC 3339", "had fired", "BackfillScheduleResponse"},
	})
}

// TestCLIScheduleWaiting: a schedule whose ticks come due while the task
// of its last fire is unfinished (overlap SKIP) says so: `schedule get`
// names the task it waits for and since which tick, its next fires say
// they depend on it, `schedule list` shows it instead of a next fire, and
// the JSON is the API's. Once the task finishes the waiting ticks are
// skipped for overlap and the schedule fires again.
func TestCLIScheduleWaiting(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 5, 6, 7, 8, 0, 0, time.UTC)
	clk, addr, c := onFakeClock(t, start)
	mustCLI(t, "schedule", "create", "tick", "--queue", "q", "--cron", "* * * * * *", "--addr", addr)
	clk.Advance(time.Second)
	sc := waitSchedule(t, c, "q", "tick", "the first fire", func(sc *client.Schedule) bool { return len(sc.Recent) == 1 })
	task := sc.Recent[0].TaskID
	if sc.WaitingForTask != "" {
		t.Fatalf("waiting for %s right after the fire, before another tick is due", sc.WaitingForTask)
	}
	clk.Advance(3 * time.Second)
	sc = waitSchedule(t, c, "q", "tick", "ticks waiting", func(sc *client.Schedule) bool { return sc.WaitingForTask != "" })
	if sc.WaitingForTask != task || !sc.WaitingSince.Equal(start.Add(2*time.Second)) {
		t.Fatalf("waiting for %q since %v; want the last fire's task %s since the tick after it, %v", sc.WaitingForTask, sc.WaitingSince, task, start.Add(2*time.Second))
	}
	get := mustCLI(t, "schedule", "get", "tick", "--queue", "q", "--addr", addr)
	for _, want := range []string{
		"\nwaiting   since 2026-05-06 07:08:02.000 UTC for task " + task + " (WAITING) of the last fire (overlap SKIP): the ticks due until it finishes are skipped then\n",
		"\nnext fires (UTC, if task " + task + " has finished by then):\n",
	} {
		if !strings.Contains(get, want) {
			t.Errorf("schedule get lacks %q:\n%s", want, get)
		}
	}
	if row := queueRowOf(t, mustCLI(t, "schedule", "list", "--addr", addr), "tick"); !strings.Contains(strings.Join(row, " "), "waiting for task "+task) {
		t.Errorf("schedule list row %q does not say it waits for %s", row, task)
	}
	api := tenurev1connect.NewScheduleServiceClient(http.DefaultClient, addr, connect.WithProtoJSON())
	resp, err := api.GetSchedule(t.Context(), connect.NewRequest(&tenurev1.GetScheduleRequest{Queue: "q", Name: "tick"}))
	if err != nil {
		t.Fatal(err)
	}
	js := sameJSON(t, "schedule get", mustCLI(t, "schedule", "get", "tick", "--queue", "q", "--json", "--addr", addr), resp.Msg)
	pinJSON(t, "schedule get", js, "schedule.waitingForTask", "schedule.waitingSince")

	// The task finishes: the ticks that waited are skipped, the one due
	// at its finish fires.
	lt := leaseOne(t, c, "q")
	if err := c.Complete(t.Context(), client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
		t.Fatal(err)
	}
	// (The clock stands still: the next tick, 07:08:05, is not due.)
	sc = waitSchedule(t, c, "q", "tick", "a fire after the skip", func(sc *client.Schedule) bool {
		return len(sc.Recent) >= 3 && sc.Recent[len(sc.Recent)-1].Outcome == client.FireOutcomeFired
	})
	if skip := sc.Recent[1]; skip.Outcome != client.FireOutcomeSkipped || skip.Reason != "overlap" || !skip.Tick.Equal(start.Add(2*time.Second)) || sc.WaitingForTask != "" {
		t.Errorf("after the task finished: decision %+v, waiting for %q; want the waiting ticks skipped for overlap from 07:08:02, and no wait", skip, sc.WaitingForTask)
	}
	if get := mustCLI(t, "schedule", "get", "tick", "--queue", "q", "--addr", addr); strings.Contains(get, "waiting ") {
		t.Errorf("schedule get still says it waits:\n%s", get)
	}
}

// TestCLISchedulePayloadFile: create and update read a schedule's payload
// from --payload-file, from stdin for "-"; a file that cannot be read
// fails naming it, and changes nothing.
func TestCLISchedulePayloadFile(t *testing.T) {
	t.Parallel()
	_, addr, c := onFakeClock(t, time.Date(2026, 5, 6, 7, 8, 0, 0, time.UTC))
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte(`{"from":"file"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	payload := func() string {
		t.Helper()
		sc, err := c.GetSchedule(t.Context(), client.GetScheduleRequest{Queue: "reports", Name: "nightly"})
		if err != nil {
			t.Fatal(err)
		}
		return string(sc.Payload)
	}
	mustCLI(t, "schedule", "create", "nightly", "--queue", "reports", "--cron", "@daily", "--payload-file", file, "--addr", addr)
	if got := payload(); got != `{"from":"file"}` {
		t.Fatalf("payload after create --payload-file %s: %q", file, got)
	}
	if code, _, errs := cliIn(t, `{"from":"stdin"}`, false, "schedule", "update", "nightly", "--queue", "reports", "--payload-file", "-", "--addr", addr); code != 0 {
		t.Fatalf("update --payload-file -: exit %d: %s", code, errs)
	}
	if got := payload(); got != `{"from":"stdin"}` {
		t.Fatalf("payload after update --payload-file - with stdin: %q", got)
	}
	missing := filepath.Join(t.TempDir(), "missing.json")
	code, _, errs := cli(t, "schedule", "update", "nightly", "--queue", "reports", "--payload-file", missing, "--addr", addr)
	if code != 1 || !strings.Contains(errs, "reading the payload") || !strings.Contains(errs, missing) {
		t.Fatalf("update --payload-file of a missing file: exit %d: %s", code, errs)
	}
	if got := payload(); got != `{"from":"stdin"}` {
		t.Fatalf("payload after a failed update: %q", got)
	}
}
