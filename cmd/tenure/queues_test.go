package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// cliIn runs one tenure command line with stdin, as a terminal when
// interactive, and returns its exit code and output.
func cliIn(t *testing.T, stdin string, interactive bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runApp(context.Background(), args, &app{stdin: strings.NewReader(stdin), interactive: interactive,
		stdout: &out, stderr: &errb, clock: clock.Real})
	return code, out.String(), errb.String()
}

// sdk returns a client of the server at addr.
func sdk(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tasksOf is the tasks of a Lease's answer.
func tasksOf(r client.LeaseResult, err error) ([]client.LeasedTask, error) { return r.Tasks, err }

// queueRow returns the row of namespace/queue in a `tenure queues` table,
// column name → value.
func queueRow(t *testing.T, table, namespace, queue string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	header := strings.Fields(lines[0])
	if len(header) == 0 || header[0] != "NAMESPACE" {
		t.Fatalf("not a queue table:\n%s", table)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == len(header) && f[0] == namespace && f[1] == queue {
			row := map[string]string{}
			for i, h := range header {
				row[h] = f[i]
			}
			return row
		}
	}
	t.Fatalf("no row of %s/%s in:\n%s", namespace, queue, table)
	return nil
}

// failTask leases one task of queue and fails it for good.
func failTask(t *testing.T, c *client.Client, queue string) string {
	t.Helper()
	lt := leaseOne(t, c, queue)
	if _, err := c.Fail(t.Context(), client.FailRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Reason: "boom", Permanent: true}); err != nil {
		t.Fatal(err)
	}
	return lt.ID
}

// completeTask leases one task of queue and completes it.
func completeTask(t *testing.T, c *client.Client, queue string) string {
	t.Helper()
	lt := leaseOne(t, c, queue)
	if err := c.Complete(t.Context(), client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
		t.Fatal(err)
	}
	return lt.ID
}

// TestCLIQueues: `tenure queues` counts a queue's tasks; `queue pause`
// stops its leases and `queue get` shows who paused it and why, until
// `queue resume`; an unknown queue is an error naming it.
func TestCLIQueues(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := startInProcess(t)
	c := sdk(t, addr)
	if code, out, errs := cli(t, "queues", "--addr", addr); code != 0 || out != "" || !strings.Contains(errs, "no queues") {
		t.Fatalf("tenure queues with no queue: exit %d, stdout %q, stderr %q; want \"no queues\"", code, out, errs)
	}
	for range 4 {
		submitTask(t, c, client.SubmitRequest{Queue: "emails"})
	}
	submitTask(t, c, client.SubmitRequest{Namespace: "billing", Queue: "invoices"})
	failTask(t, c, "emails")
	completeTask(t, c, "emails")
	leaseOne(t, c, "emails")

	row := queueRow(t, mustCLI(t, "queues", "--addr", addr), "default", "emails")
	for col, want := range map[string]string{"WAITING": "1", "LEASED": "1", "COMMITTED": "0", "COMPLETED": "1", "FAILED": "1", "DEAD": "0",
		"LEASES": "1", "PAUSED": "no", "DONE/1H": "1", "FAILED/1H": "1", "EXPIRED/1H": "0"} {
		if row[col] != want {
			t.Errorf("tenure queues: %s of default/emails is %q, want %q (row %v)", col, row[col], want, row)
		}
	}
	if out := mustCLI(t, "queues", "--addr", addr, "--namespace", "billing"); strings.Contains(out, "emails") || queueRow(t, out, "billing", "invoices")["WAITING"] != "1" {
		t.Errorf("tenure queues --namespace billing:\n%s", out)
	}

	// Pause: said, shown, and no lease; a second pause says since when,
	// by whom and why.
	if out := mustCLI(t, "queue", "pause", "emails", "--addr", addr, "--reason", "incident 42", "--requested-by", "ops@box"); out != "paused queue default/emails\n" {
		t.Fatalf("queue pause printed %q", out)
	}
	if out := mustCLI(t, "queue", "pause", "emails", "--addr", addr); !strings.HasPrefix(out, "queue default/emails was already paused (since ") || !strings.HasSuffix(out, " by ops@box: incident 42)\n") {
		t.Fatalf("second queue pause printed %q", out)
	}
	get := mustCLI(t, "queue", "get", "emails", "--addr", addr)
	for _, want := range []string{"default/emails", "paused (since ", "by ops@box: incident 42)", "1 waiting, 1 leased, 0 committed, 1 completed, 1 failed, 0 dead", "last hour"} {
		if !strings.Contains(get, want) {
			t.Fatalf("queue get of the paused queue lacks %q:\n%s", want, get)
		}
	}
	if row := queueRow(t, mustCLI(t, "queues", "--addr", addr), "default", "emails"); row["PAUSED"] != "yes" {
		t.Fatalf("tenure queues: PAUSED of the paused queue is %q", row["PAUSED"])
	}
	if lts, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "emails"})); err != nil || len(lts) != 0 {
		t.Fatalf("Lease from the paused queue: %+v, %v; want nothing", lts, err)
	}

	if out := mustCLI(t, "queue", "resume", "emails", "--addr", addr, "--reason", "over"); out != "resumed queue default/emails\n" {
		t.Fatalf("queue resume printed %q", out)
	}
	if out := mustCLI(t, "queue", "resume", "emails", "--addr", addr); out != "queue default/emails was not paused\n" {
		t.Fatalf("second queue resume printed %q", out)
	}
	if get := mustCLI(t, "queue", "get", "emails", "--addr", addr); !strings.Contains(get, "running") || strings.Contains(get, "paused") {
		t.Fatalf("queue get of the resumed queue:\n%s", get)
	}
	leaseOne(t, c, "emails")

	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"queue", "pause", "nope", "--addr", addr}, 1, []string{"tenure queue pause:", `no queue "nope"`, "tenure queues"}},
		{[]string{"queue", "resume", "emails", "--namespace", "billing", "--addr", addr}, 1, []string{`namespace "billing" has no queue "emails"`}},
		{[]string{"queue", "get", "nope", "--addr", addr}, 1, []string{`no queue "nope"`}},
		{[]string{"queue", "get", "--addr", addr}, 2, []string{"expected one queue"}},
		{[]string{"queues", "extra", "--addr", addr}, 2, []string{`unexpected argument "extra"`}},
	} {
		code, _, errs := cli(t, tc.args...)
		for _, w := range tc.want {
			if code != tc.code || !strings.Contains(errs, w) {
				t.Errorf("tenure %s: exit %d (want %d), stderr lacks %q: %s", strings.Join(tc.args, " "), code, tc.code, w, errs)
				break
			}
		}
	}
}

// tasksIn returns the states of the tasks of queue, by id.
func tasksIn(t *testing.T, c *client.Client, queue string) map[string]client.TaskState {
	t.Helper()
	out := map[string]client.TaskState{}
	for task, err := range c.ListTasks(t.Context(), client.ListTasksRequest{Queue: queue, PageSize: 1000}) {
		if err != nil {
			t.Fatal(err)
		}
		out[task.ID] = task.State
	}
	return out
}

// allIn checks that every task of queue is in state, and how many there
// are.
func allIn(t *testing.T, c *client.Client, queue string, n int, state client.TaskState) {
	t.Helper()
	got := tasksIn(t, c, queue)
	if len(got) != n {
		t.Fatalf("%d tasks in %s, want %d: %v", len(got), queue, n, got)
	}
	for id, s := range got {
		if s != state {
			t.Fatalf("task %s of %s is %s, want %s (all: %v)", id, queue, s, state, got)
		}
	}
}

// TestCLITaskRetry: `task retry` makes a FAILED task WAITING and records
// who asked and why; a COMPLETED task is refused with the server's reason.
func TestCLITaskRetry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := startInProcess(t)
	c := sdk(t, addr)
	submitTask(t, c, client.SubmitRequest{Queue: "q"})
	submitTask(t, c, client.SubmitRequest{Queue: "q"})
	failed := failTask(t, c, "q")
	done := completeTask(t, c, "q")

	if out := mustCLI(t, "task", "retry", failed, "--addr", addr, "--reason", "fixed", "--requested-by", "ops@box"); out != failed+" is WAITING\n" {
		t.Fatalf("task retry printed %q, want %q", out, failed+" is WAITING\n")
	}
	if task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: failed}); err != nil || task.State != client.TaskStateWaiting {
		t.Fatalf("the retried task: %+v, %v; want WAITING", task, err)
	}
	h, err := c.GetTaskHistory(ctx, client.GetTaskHistoryRequest{TaskID: failed})
	if err != nil {
		t.Fatal(err)
	}
	if e := h[len(h)-1]; e.Type != "TaskRetried" || e.RequestedBy != "ops@box" || e.Reason != "fixed" {
		t.Fatalf("last history entry %+v; want TaskRetried by ops@box for \"fixed\"", e)
	}
	code, out, errs := cli(t, "task", "retry", done, "--addr", addr)
	if code != 1 || out != "" || !strings.Contains(errs, "tenure task retry: ") || !strings.Contains(errs, "COMPLETED") || !strings.Contains(errs, "submit a new task") {
		t.Fatalf("task retry of a COMPLETED task: exit %d, stdout %q, stderr %q; want exit 1 with the server's reason", code, out, errs)
	}
	if task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: done}); err != nil || task.State != client.TaskStateCompleted {
		t.Fatalf("the COMPLETED task after the refused retry: %+v, %v", task, err)
	}
}

// TestCLIAttemptsAfterRetry: a task of 2 attempts fails twice, an operator
// retries it, and it fails once more: the API and `task get` count the
// attempts of its fresh budget (1 of 2), not of its life (3), which they
// show beside it; `tasks list` shows the budget's count.
func TestCLIAttemptsAfterRetry(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := startInProcess(t)
	c := sdk(t, addr)
	id := submitTask(t, c, client.SubmitRequest{Queue: "q", Retry: &client.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond}})
	fail := func() {
		t.Helper()
		lt := leaseOne(t, c, "q")
		if lt.ID != id {
			t.Fatalf("leased %s, want %s", lt.ID, id)
		}
		if _, err := c.Fail(ctx, client.FailRequest{TaskID: lt.ID, LeaseID: lt.LeaseID, Reason: "upstream timed out"}); err != nil {
			t.Fatal(err)
		}
	}
	// check asserts the task's state and attempts in the API (the SDK's
	// task, and the CLI's JSON, which is the API's) and in `task get` and
	// `tasks list`.
	check := func(when string, state client.TaskState, used, all uint32, attemptRow, listCell string) {
		t.Helper()
		task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: id})
		if err != nil {
			t.Fatal(err)
		}
		if task.State != state || task.AttemptsUsed != used || task.Attempt != all || task.RetryPolicy.MaxAttempts != 2 {
			t.Errorf("%s: the API says %v, attempts used %d, attempt %d of a budget of %d; want %v, %d, %d, 2",
				when, task.State, task.AttemptsUsed, task.Attempt, task.RetryPolicy.MaxAttempts, state, used, all)
		}
		var js struct {
			Task struct {
				Attempt      uint32 `json:"attempt"`
				AttemptsUsed uint32 `json:"attemptsUsed"`
			} `json:"task"`
		}
		if err := json.Unmarshal([]byte(mustCLI(t, "task", "get", id, "--addr", addr, "--json")), &js); err != nil {
			t.Fatal(err)
		}
		if js.Task.Attempt != all || js.Task.AttemptsUsed != used {
			t.Errorf("%s: task get --json says attempt %d, attemptsUsed %d; want %d, %d", when, js.Task.Attempt, js.Task.AttemptsUsed, all, used)
		}
		get := mustCLI(t, "task", "get", id, "--addr", addr)
		if !strings.Contains(get, "\nattempt     "+attemptRow+"\n") {
			t.Errorf("%s: task get's attempt row is not %q:\n%s", when, attemptRow, get)
		}
		list := mustCLI(t, "tasks", "list", "--queue", "q", "--addr", addr)
		if f := strings.Fields(strings.Split(list, "\n")[1]); len(f) < 6 || f[5] != listCell {
			t.Errorf("%s: tasks list's ATTEMPTS column is not %q:\n%s", when, listCell, list)
		}
	}
	fail()
	check("after the first failure", client.TaskStateWaiting, 1, 1, "1 of 2", "1/2")
	fail()
	check("after the second failure", client.TaskStateFailed, 2, 2, "2 of 2", "2/2")
	mustCLI(t, "tasks", "retry", "--queue", "q", "--state", "FAILED", "--yes", "--addr", addr)
	check("after the operator's retry", client.TaskStateWaiting, 0, 2, "0 of 2 since an operator's retry (2 in all)", "0/2")
	fail()
	check("after the third failure", client.TaskStateWaiting, 1, 3, "1 of 2 since an operator's retry (3 in all)", "1/2")
	// Each failed attempt is "failed", as on the dashboard's timeline.
	get := mustCLI(t, "task", "get", id, "--addr", addr)
	for a := 1; a <= 3; a++ {
		if !regexp.MustCompile(fmt.Sprintf(`\n%d +failed +w-q `, a)).MatchString(get) {
			t.Errorf("task get does not show attempt %d as failed:\n%s", a, get)
		}
	}
}

// TestCLIRequestedByDefault: without --requested-by, a control command
// says $USER@hostname asked. (Not parallel: it sets $USER.)
func TestCLIRequestedByDefault(t *testing.T) {
	t.Setenv("USER", "alice")
	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no hostname: %v", err)
	}
	addr := startInProcess(t)
	c := sdk(t, addr)
	id := submitTask(t, c, client.SubmitRequest{Queue: "q"})
	mustCLI(t, "task", "kill", id, "--addr", addr)
	mustCLI(t, "queue", "pause", "q", "--addr", addr)
	h, err := c.GetTaskHistory(t.Context(), client.GetTaskHistoryRequest{TaskID: id})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.GetQueue(t.Context(), client.GetQueueRequest{Namespace: "", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if by := h[len(h)-1].RequestedBy; by != "alice@"+host {
		t.Errorf("task kill: the history says %q asked, want alice@%s", by, host)
	}
	if q.Pause == nil || q.Pause.RequestedBy != "alice@"+host {
		t.Errorf("queue pause: %+v, want paused by alice@%s", q.Pause, host)
	}
}

// TestCLIBulkActions: `tasks kill|retry|purge` act on what the filter
// selects after a confirmation (a terminal's y, or --yes) and print the
// counts; without a filter, with --all and a filter, on "n", at the end of
// stdin, or without a terminal and --yes, they change nothing.
func TestCLIBulkActions(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	c := sdk(t, addr)
	for range 4 {
		submitTask(t, c, client.SubmitRequest{Queue: "bulk"})
	}
	completeTask(t, c, "bulk")
	other := submitTask(t, c, client.SubmitRequest{Queue: "other"})
	unchanged := func(what string) {
		t.Helper()
		if s := tasksIn(t, c, "other"); s[other] != client.TaskStateWaiting {
			t.Fatalf("%s: the task of queue other is %s, want WAITING", what, s[other])
		}
	}

	out := mustCLI(t, "tasks", "kill", "--queue", "bulk", "--namespace", "default", "--yes", "--addr", addr, "--reason", "bad batch", "--requested-by", "ops@box")
	if out != "killed 3 tasks (1 selected task was already finished)\n" {
		t.Fatalf("tasks kill printed %q", out)
	}
	states := tasksIn(t, c, "bulk")
	var dead string
	for id, s := range states {
		if s == client.TaskStateDead {
			dead = id
		}
	}
	if n := len(states); n != 4 || dead == "" {
		t.Fatalf("after tasks kill: %v; want 3 DEAD and 1 COMPLETED", states)
	}
	if task, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: dead}); err != nil || task.FailureReason != "bad batch" {
		t.Fatalf("a killed task: %+v, %v; want failure reason \"bad batch\"", task, err)
	}
	unchanged("tasks kill --queue bulk")

	// Refused before anything is asked or changed.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"tasks", "purge", "--yes"}, []string{"no filter given", "--all to delete every finished task"}},
		{[]string{"tasks", "purge", "--all", "--queue", "bulk", "--yes"}, []string{"--all means every finished task", "give it alone"}},
		{[]string{"tasks", "retry", "--state", "completed", "--yes"}, []string{"--state completed", "only to FAILED and DEAD"}},
		{[]string{"tasks", "kill", "--created-before", "yesterday", "--yes"}, []string{`--created-before "yesterday"`, "RFC 3339", "24h"}},
	} {
		usageRefused(t, append(tc.args, "--addr", addr), tc.want...)
	}
	purge := []string{"tasks", "purge", "--all", "--addr", addr}
	code, _, errs := cliIn(t, "y\n", false, purge...)
	if code != 2 || !strings.Contains(errs, "stdin is not a terminal") || !strings.Contains(errs, "pass --yes to delete every finished task") {
		t.Fatalf("tasks purge --all without a terminal or --yes: exit %d, stderr %q; want a refusal saying to pass --yes", code, errs)
	}
	for _, answer := range []string{"n\n", "no\n", "", "maybe\n"} {
		code, out, errs := cliIn(t, answer, true, purge...)
		if code != 1 || out != "" || !strings.Contains(errs, "delete every finished task (COMPLETED, FAILED or DEAD) of every queue in every namespace? [y/N]") ||
			!strings.Contains(errs, "aborted: nothing changed") {
			t.Fatalf("tasks purge --all answered %q: exit %d, stdout %q, stderr %q; want the question, then aborted with exit 1", answer, code, out, errs)
		}
	}
	if n := len(tasksIn(t, c, "bulk")); n != 4 {
		t.Fatalf("%d tasks in bulk after the refused purges, want 4", n)
	}
	unchanged("the refused purges")

	// Confirmed with y: the DEAD tasks wait again.
	code, out, errs = cliIn(t, "y\n", true, "tasks", "retry", "--queue", "bulk", "--state", "dead", "--addr", addr)
	if code != 0 || out != "retried 3 tasks\n" || !strings.Contains(errs, "retry every DEAD task of the queues named bulk in every namespace? [y/N]") {
		t.Fatalf("tasks retry answered y: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = cliIn(t, "YES\n", true, "tasks", "purge", "--queue", "bulk", "--addr", addr)
	if code != 0 || out != "purged 1 task (3 selected tasks were not finished, and left alone)\n" {
		t.Fatalf("tasks purge answered YES: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	allIn(t, c, "bulk", 3, client.TaskStateWaiting)
	// Created before a time long past: nothing selected.
	if out := mustCLI(t, "tasks", "kill", "--created-before", "2000-01-01T00:00:00Z", "--yes", "--addr", addr); out != "killed 0 tasks\n" {
		t.Fatalf("tasks kill --created-before 2000: %q", out)
	}
	unchanged("tasks kill --created-before 2000")
}

// TestParseCreatedBefore: an RFC 3339 time, or a duration before now.
func TestParseCreatedBefore(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2025-06-01T00:00:00Z":        time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC),
		"2025-06-01T02:00:00.5+02:00": time.Date(2025, 6, 1, 0, 0, 0, 5e8, time.UTC),
		"24h":                         now.Add(-24 * time.Hour),
		"90m":                         now.Add(-90 * time.Minute),
	} {
		if got, err := parseCreatedBefore(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseCreatedBefore(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "-1h", "0s", "2025-06-01"} {
		if _, err := parseCreatedBefore(in, now); err == nil {
			t.Errorf("parseCreatedBefore(%q) accepted it", in)
		}
	}
}

// TestCLIQueuesJSONIsTheAPIsJSON pins the --json output of queues, queue
// get, pause and resume, task retry and the bulk actions: the API's JSON
// of the same answer. The server runs on a fake clock, so that ages and
// per-minute counts do not move between the CLI's call and the API's.
func TestCLIQueuesJSONIsTheAPIsJSON(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	addr := apitest.StartClock(t, clk)
	c := sdk(t, addr)
	queues := tenurev1connect.NewQueueServiceClient(http.DefaultClient, addr, connect.WithProtoJSON())
	tasks := tenurev1connect.NewTaskServiceClient(http.DefaultClient, addr, connect.WithProtoJSON())
	getQueue := func(ns, q string) *tenurev1.Queue {
		t.Helper()
		resp, err := queues.GetQueue(ctx, connect.NewRequest(&tenurev1.GetQueueRequest{Namespace: ns, Queue: q}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetQueue()
	}

	// emails: a task in each state but COMMITTED, the waiting one due for
	// 90s; billing/invoices: paused, with a task not due yet.
	for range 4 {
		submitTask(t, c, client.SubmitRequest{Queue: "emails", ExecutionWindow: time.Hour})
	}
	failed := failTask(t, c, "emails")
	completeTask(t, c, "emails")
	leaseOne(t, c, "emails")
	clk.Advance(90 * time.Second)
	submitTask(t, c, client.SubmitRequest{Namespace: "billing", Queue: "invoices", NotBefore: clk.Now().Add(time.Hour)})
	pause := mustCLI(t, "queue", "pause", "invoices", "--namespace", "billing", "--reason", "audit", "--requested-by", "ops@box", "--json", "--addr", addr)
	sameJSON(t, "queue pause", pause, &tenurev1.PauseQueueResponse{Changed: true, Queue: getQueue("billing", "invoices")})
	limit := mustCLI(t, "queue", "limit", "emails", "--max-concurrency", "3", "--rate", "2.5", "--reason", "slow api", "--requested-by", "ops@box", "--json", "--addr", addr)
	sameJSON(t, "queue limit", limit, &tenurev1.SetQueueLimitsResponse{Changed: true, Queue: getQueue("", "emails")})

	all, err := queues.ListQueues(ctx, connect.NewRequest(&tenurev1.ListQueuesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	list := sameJSON(t, "queues", mustCLI(t, "queues", "--json", "--addr", addr), all.Msg)
	pinJSON(t, "queues", list, "queues", "queues[].namespace", "queues[].queue", "queues[].tasks", "queues[].tasks.waiting",
		"queues[].tasks.leased", "queues[].tasks.completed", "queues[].tasks.failed", "queues[].oldestWaitingAge", "queues[].activeLeases",
		"queues[].paused", "queues[].pause", "queues[].pause.requestedBy", "queues[].pause.reason", "queues[].pause.pausedAt",
		"queues[].lastMinute", "queues[].last5Minutes", "queues[].lastHour", "queues[].lastHour.submitted", "queues[].lastHour.completed",
		"queues[].lastHour.failed", "queues[].perMinute", "queues[].partitions", "queues[].pausedPartitions",
		"queues[].limits", "queues[].limits.maxConcurrency", "queues[].limits.rate", "queues[].limits.burst", "queues[].limits.requestedBy",
		"queues[].limits.reason", "queues[].limits.setAt", "queues[].limitedPartitions")
	emails := list.(map[string]any)["queues"].([]any)[1].(map[string]any)
	if emails["oldestWaitingAge"] != "90s" || emails["tasks"].(map[string]any)["waiting"] != "1" {
		t.Errorf("queues --json: default/emails has oldestWaitingAge %v and waiting %v; want \"90s\" and \"1\" (64-bit counts as strings)",
			emails["oldestWaitingAge"], emails["tasks"].(map[string]any)["waiting"])
	}
	sameJSON(t, "queues --namespace none", mustCLI(t, "queues", "--namespace", "none", "--json", "--addr", addr), &tenurev1.ListQueuesResponse{})
	sameJSON(t, "queue get", mustCLI(t, "queue", "get", "emails", "--json", "--addr", addr), &tenurev1.GetQueueResponse{Queue: getQueue("", "emails")})
	resume := mustCLI(t, "queue", "resume", "invoices", "--namespace", "billing", "--json", "--addr", addr)
	sameJSON(t, "queue resume", resume, &tenurev1.ResumeQueueResponse{Changed: true, Queue: getQueue("billing", "invoices")})
	sameJSON(t, "queue resume (running)", mustCLI(t, "queue", "resume", "invoices", "--namespace", "billing", "--json", "--addr", addr),
		&tenurev1.ResumeQueueResponse{Queue: getQueue("billing", "invoices")})

	retry := mustCLI(t, "task", "retry", failed, "--json", "--addr", addr)
	got, err := tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: failed}))
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "task retry", retry, &tenurev1.RetryTaskResponse{Task: got.Msg.GetTask()})

	sameJSON(t, "tasks kill", mustCLI(t, "tasks", "kill", "--queue", "emails", "--yes", "--json", "--addr", addr),
		&tenurev1.KillTasksResponse{Changed: 3, Skipped: 1})
	sameJSON(t, "tasks retry", mustCLI(t, "tasks", "retry", "--namespace", "billing", "--yes", "--json", "--addr", addr),
		&tenurev1.RetryTasksResponse{Skipped: 1})
	purged := sameJSON(t, "tasks purge", mustCLI(t, "tasks", "purge", "--all", "--yes", "--json", "--addr", addr),
		&tenurev1.PurgeTasksResponse{Changed: 4, Skipped: 1})
	pinJSON(t, "tasks purge", purged, "changed", "skipped")
}

// TestCLIControlHelp: each new command's help says what it does, names
// its flags and gives an example; the control commands document
// --requested-by as self-declared.
func TestCLIControlHelp(t *testing.T) {
	t.Parallel()
	control := []string{"--reason", "--requested-by", "$USER@hostname", "self-declared"}
	bulk := append([]string{"--namespace", "--queue", "--state", "--created-before", "--all", "--yes", "--json", "RFC 3339", "not a terminal"}, control...)
	helpSays(t, map[string][]string{
		"queues":       {"List the queues", "--namespace", "--json", "ListQueuesResponse", "OLDEST-WAITING"},
		"queue get":    {"Show one queue", "--namespace", "--json", "GetQueueResponse"},
		"queue pause":  append([]string{"Pause a queue", "--namespace", "still accepts submits"}, control...),
		"queue resume": append([]string{"Resume a paused queue", "--namespace"}, control...),
		"task retry":   append([]string{"FAILED or DEAD", "COMPLETED"}, control...),
		"task kill":    append([]string{"Kill a task"}, control...),
		"tasks retry":  append([]string{"Retry every FAILED or DEAD task"}, bulk...),
		"tasks kill":   append([]string{"Kill every unfinished task"}, bulk...),
		"tasks purge":  append([]string{"Delete every finished"}, bulk...),
	})
}

// helpSays checks that the --help of each command (by its path: "queue
// get") says what want lists and gives an example of the command.
func helpSays(t *testing.T, want map[string][]string) {
	t.Helper()
	for path, says := range want {
		out := mustCLI(t, append(strings.Fields(path), "--help")...)
		for _, w := range append(says, "Examples:\n  tenure "+path) {
			if !strings.Contains(out, w) {
				t.Errorf("tenure %s --help lacks %q:\n%s", path, w, out)
			}
		}
	}
}

// TestCLIQueueLimit: `tenure queue limit` sets limits and prints them,
// keeps what it is not given, clears with none; `queue get` and `queues`
// show them; a lease asks for more than the limit and gets the limit; bad
// values are usage errors (exit 2) or the server's refusal naming the
// field (exit 1), and change nothing.
func TestCLIQueueLimit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	addr := startInProcess(t)
	c := sdk(t, addr)
	for range 5 {
		submitTask(t, c, client.SubmitRequest{Queue: "api"})
	}
	out := mustCLI(t, "queue", "limit", "api", "--max-concurrency", "2", "--rate", "0.5", "--reason", "provider quota", "--requested-by", "ops@box", "--addr", addr)
	if !strings.HasPrefix(out, "queue default/api limits: max concurrency 2, rate 0.5/s (burst 1) (since ") || !strings.HasSuffix(out, " by ops@box: provider quota)\n") {
		t.Fatalf("queue limit printed %q", out)
	}
	if out := mustCLI(t, "queue", "limit", "api", "--max-concurrency", "2", "--addr", addr); !strings.HasPrefix(out, "queue default/api had these limits already: max concurrency 2, rate 0.5/s (burst 1)") {
		t.Fatalf("the same limit again printed %q", out)
	}
	if get := mustCLI(t, "queue", "get", "api", "--addr", addr); !regexp.MustCompile(`limits +max concurrency 2, rate 0.5/s \(burst 1\) \(since `).MatchString(get) {
		t.Fatalf("queue get does not show the limits:\n%s", get)
	}
	if row := queueRow(t, mustCLI(t, "queues", "--addr", addr), "default", "api"); row["LIMITS"] != "conc=2,rate=0.5/s,burst=1" {
		t.Fatalf("tenure queues: LIMITS is %q", row["LIMITS"])
	}
	if lts, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "api", MaxTasks: 5})); err != nil || len(lts) != 1 {
		t.Fatalf("Lease of 5: %d tasks, %v; want the burst of 1", len(lts), err)
	}

	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--rate", "0"}, 1, "rate"},
		{[]string{"--rate", "-3"}, 1, "rate"},
		{[]string{"--max-concurrency", "0"}, 1, "max_concurrency"},
		{[]string{"--burst", "0"}, 1, "burst"},
		{[]string{"--max-concurrency", "ten"}, 2, "--max-concurrency"},
		{[]string{"--rate", "fast"}, 2, "--rate"},
		{[]string{"--burst", "none"}, 2, "--burst none: the burst is cleared with the rate (--rate none)"},
		{[]string{"--key-burst", "none"}, 2, "--key-burst none: the key burst is cleared with the key rate (--key-rate none)"},
		{[]string{"--key-max-concurrency", "two"}, 2, `--key-max-concurrency "two": want a whole number, or none to clear the limit`},
		{[]string{"--key-rate", "fast"}, 2, `--key-rate "fast": want a number of leases per second, or none to clear the limit`},
		{nil, 2, "no limit given"},
	} {
		args := append([]string{"queue", "limit", "api", "--addr", addr}, bad.args...)
		if code, _, errs := cli(t, args...); code != bad.code || !strings.Contains(errs, bad.want) {
			t.Errorf("tenure %s: exit %d, %q; want exit %d naming %s", strings.Join(args, " "), code, errs, bad.code, bad.want)
		}
	}
	if q, err := c.GetQueue(ctx, client.GetQueueRequest{Namespace: "", Queue: "api"}); err != nil || q.Limits == nil || q.Limits.MaxConcurrency != 2 || q.Limits.Rate != 0.5 || q.Limits.Burst != 1 {
		t.Fatalf("limits after the refused changes: %+v, %v", q.Limits, err)
	}

	if out := mustCLI(t, "queue", "limit", "api", "--rate", "none", "--addr", addr); !strings.HasPrefix(out, "queue default/api limits: max concurrency 2 (since ") {
		t.Fatalf("clearing the rate printed %q", out)
	}
	if out := mustCLI(t, "queue", "limit", "api", "--max-concurrency", "none", "--addr", addr); out != "queue default/api limits: none\n" {
		t.Fatalf("clearing the last limit printed %q", out)
	}
	if row := queueRow(t, mustCLI(t, "queues", "--addr", addr), "default", "api"); row["LIMITS"] != "-" {
		t.Fatalf("tenure queues: LIMITS after clearing is %q", row["LIMITS"])
	}
}
