package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/logbuf"
	"github.com/tenurehq/tenure/sdk/client"
)

// A time as the CLI may write it: a date and a time of day, and then what
// must follow it, a zone (an abbreviation or an offset after a space, or
// RFC 3339's Z or offset).
var (
	anyTime   = regexp.MustCompile(`\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?`)
	zonedTime = regexp.MustCompile(`\d{4}-\d\d-\d\d( \d\d:\d\d:\d\d(\.\d+)? ([A-Z]{2,5}|[+-]\d\d(\d\d)?)\b|T\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d))`)
)

// TestCLITimesCarryTheirZone runs the binary with TZ=America/New_York
// against a server whose clock reads 2026-12-01 22:16 UTC: every time any
// command prints carries its zone (EST for the viewer's local times), and
// `schedule get` of a Europe/Berlin schedule shows its next fires in the
// schedule's zone and in UTC, side by side.
func TestCLITimesCarryTheirZone(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 22, 16, 0, 0, time.UTC)
	addr := apitest.StartClock(t, clock.NewFake(start))
	c := sdk(t, addr)
	tenure := func(args ...string) string {
		t.Helper()
		var out logbuf.Buffer
		if code := execTenure(t, []string{"TZ=America/New_York", "TENURE_ADDR=" + addr}, &out, &out, args...); code != 0 {
			t.Fatalf("tenure %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
		}
		return out.String()
	}

	created := tenure("schedule", "create", "nightly", "--queue", "reports", "--cron", "0 2 * * *", "--time-zone", "Europe/Berlin", "--requested-by", "ops@box")
	get := tenure("schedule", "get", "nightly", "--queue", "reports")
	var want strings.Builder
	want.WriteString("next fires (Europe/Berlin, and UTC):\n")
	for day := 2; day <= 6; day++ {
		want.WriteString("  2026-12-0" + string(rune('0'+day)) + " 02:00:00.000 CET   2026-12-0" + string(rune('0'+day)) + " 01:00:00.000 UTC\n")
	}
	if !strings.Contains(get, want.String()) {
		t.Errorf("schedule get does not show the next fires in Berlin and UTC as\n%s\nit printed:\n%s", want.String(), get)
	}
	if !strings.Contains(get, "created   2026-12-01 17:16:00.000 EST by ops@box") {
		t.Errorf("schedule get does not show its creation in the viewer's zone, with it:\n%s", get)
	}
	if !strings.Contains(tenure("schedule", "list"), "2026-12-02 02:00:00.000 CET") {
		t.Errorf("schedule list does not show the next fire in the schedule's zone")
	}

	// A task with a failed attempt and a retry due: its times, its
	// history's, the queues' and the lists'.
	id := strings.TrimSpace(tenure("submit", "hello", "--queue", "emails"))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w-emails", Queue: "emails", Wait: 10 * time.Second})
	if err != nil || len(res.Tasks) != 1 {
		t.Fatalf("Lease of emails: %+v, %v", res, err)
	}
	lt := res.Tasks[0]
	if _, err := c.Fail(t.Context(), client.FailRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Reason: "upstream timed out"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseQueue(t.Context(), client.PauseQueueRequest{Queue: "emails", Reason: "incident"}); err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{
		"schedule create": created,
		"schedule get":    get,
		"schedule list":   tenure("schedule", "list"),
		"task get":        tenure("task", "get", id),
		"task history":    tenure("task", "history", id),
		"tasks list":      tenure("tasks", "list"),
		"queue get":       tenure("queue", "get", "emails"),
		"backfill":        tenure("schedule", "backfill", "nightly", "--queue", "reports", "--from", "2026-11-28T00:00:00Z", "--to", "2026-11-29T23:00:00Z"),
	}
	for what, out := range outputs {
		times, zoned := anyTime.FindAllString(out, -1), zonedTime.FindAllString(out, -1)
		if len(times) == 0 || len(times) != len(zoned) {
			t.Errorf("%s prints %d times, %d of them with their zone; want every one with it:\n%s", what, len(times), len(zoned), out)
		}
	}
	for _, w := range []string{"created     2026-12-01 17:16:00.000 EST", "not before  2026-12-01 17:16:01.000 EST"} {
		if !strings.Contains(outputs["task get"], w) {
			t.Errorf("task get lacks %q:\n%s", w, outputs["task get"])
		}
	}
	if !strings.Contains(outputs["task history"], "retry not before 1s later") {
		t.Errorf("task history does not give the retry's time relative to its record's:\n%s", outputs["task history"])
	}
}
