package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/eventually"
)

// startInProcess runs a real node behind the API and returns its URL.
func startInProcess(t *testing.T) string { return apitest.Start(t, nil) }

// cli runs one tenure command line and returns its exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := cli(t, args...)
	if code != 0 {
		t.Fatalf("tenure %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	return out
}

// usageRefused runs one tenure command line, which must be refused as a
// usage error (exit 2) whose stderr says each of want.
func usageRefused(t *testing.T, args []string, want ...string) {
	t.Helper()
	code, _, errs := cli(t, args...)
	for _, w := range want {
		if code != 2 || !strings.Contains(errs, w) {
			t.Errorf("tenure %s: exit %d (want 2), stderr lacks %q:\n%s", strings.Join(args, " "), code, w, errs)
			return
		}
	}
}

func TestCLITaskCommands(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	id := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "emails", "--request-id", "r1", "hello alice"))
	if len(id) != 26 {
		t.Fatalf("submit printed %q, want a task id", id)
	}
	if out := mustCLI(t, "submit", "--addr", addr, "--queue", "emails", "--request-id", "r1", "hello alice"); !strings.Contains(out, id) || !strings.Contains(out, "duplicate") {
		t.Fatalf("repeated request id: %q", out)
	}
	file := filepath.Join(t.TempDir(), "payload")
	os.WriteFile(file, []byte("from a file"), 0o644)
	id2 := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "emails", "--file", file, "--delay", "1h", "--max-attempts", "5", "--priority", "3"))

	list := mustCLI(t, "tasks", "list", "--addr", addr)
	for _, want := range []string{"TASK", id, id2, "WAITING", `"hello alice"`, `"from a file"`} {
		if !strings.Contains(list, want) {
			t.Fatalf("tasks list lacks %q:\n%s", want, list)
		}
	}
	var listed struct {
		Tasks []struct {
			TaskID string `json:"taskId"`
			State  string `json:"state"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "tasks", "list", "--addr", addr, "--json", "--state", "waiting")), &listed); err != nil || len(listed.Tasks) != 2 {
		t.Fatalf("tasks list --json: %v %+v", err, listed)
	}

	get := mustCLI(t, "task", "get", "--addr", addr, id2)
	for _, want := range []string{"state", "WAITING", "attempt", "0 of 5", "not before", `"from a file"`} {
		if !strings.Contains(get, want) {
			t.Fatalf("task get lacks %q:\n%s", want, get)
		}
	}
	if out := mustCLI(t, "task", "kill", "--addr", addr, "--reason", "no longer needed", "--requested-by", "ops@desk", id2); !strings.Contains(out, "DEAD") {
		t.Fatalf("kill printed %q", out)
	}
	hist := mustCLI(t, "task", "history", "--addr", addr, id2)
	for _, want := range []string{"LSN", "BY", "TaskCreated", "TaskDead", "ops@desk", "killed: no longer needed"} {
		if !strings.Contains(hist, want) {
			t.Fatalf("history lacks %q:\n%s", want, hist)
		}
	}

	// Mistakes: a clear message and a non-zero exit.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"task", "get", "--addr", addr, "01nope"}, 1, `tenure task get: task not found: no task "01nope"`},
		{[]string{"task", "kill", "--addr", addr, id2}, 1, "already DEAD"},
		{[]string{"submit", "--addr", addr, "x"}, 2, "--queue"},
		// A refused field is named as the flag or argument that set it.
		{[]string{"submit", "--addr", addr, "--queue", "a b", "x"}, 1, `tenure submit: --queue: must not contain spaces or control characters (got "a b")`},
		{[]string{"submit", "--addr", addr, "--queue", "q", "--window", "1ms", "x"}, 1, "tenure submit: --window: 1ms is outside 100ms..24h0m0s\n"},
		{[]string{"submit", "--addr", addr, "--queue", "q", "--max-attempts", "5000", "x"}, 1, "tenure submit: --max-attempts: 5000 is outside 1..1000\n"},
		{[]string{"task", "kill", "--addr", addr, ""}, 1, "tenure task kill: the TASK_ID argument: "},
		{[]string{"schedule", "backfill", "s", "--queue", "q", "--from", "2026-03-01T00:00:00Z", "--to", "2999-01-01T00:00:00Z", "--addr", addr}, 1,
			"tenure schedule backfill: --to: 2999-01-01T00:00:00Z is in the future"},
		// No server at the address: say which flag or variable to set.
		{[]string{"task", "get", "--addr", "http://127.0.0.1:1", "x"}, 1, "start one (tenure server), or point --addr (or TENURE_ADDR) at yours\n"},
		{[]string{"tasks", "list", "--addr", addr, "--state", "sleeping"}, 2, "--state"},
		{[]string{"task", "get", "--addr", addr}, 2, "task id"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		code, _, errs := cli(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) || strings.Contains(errs, "client: ") || strings.Contains(errs, "invalid_argument") {
			t.Errorf("tenure %s: exit %d (want %d), stderr %q (want %q, without the client's prefixes)", strings.Join(tc.args, " "), code, tc.code, errs, tc.want)
		}
	}
}

// waitState polls the task until it reaches one of the states, and
// returns it as `tenure task get --json` prints it (its "task").
func waitState(t *testing.T, addr, id string, states ...string) map[string]any {
	t.Helper()
	var task map[string]any
	eventually.NoError(t, fmt.Sprintf("task %s to be one of %v", id, states), func() error {
		var got struct {
			Task map[string]any `json:"task"`
		}
		if err := json.Unmarshal([]byte(mustCLI(t, "task", "get", "--addr", addr, "--json", id)), &got); err != nil {
			return eventually.Stop(err)
		}
		task = got.Task
		if slices.ContainsFunc(states, func(s string) bool { return task["state"] == "TASK_STATE_"+s }) {
			return nil
		}
		return fmt.Errorf("it is %v", task["state"])
	})
	return task
}

func TestCLIExecWorker(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		var out, errb bytes.Buffer
		done <- run(ctx, []string{"worker", "--addr", addr, "--queue", "jobs", "--concurrency", "2", "--exec",
			`read -r line; case "$line" in
			  fail*) echo "it broke: $line" >&2; exit 3;;
			  sleep*) echo $$ > ` + dir + `/pid; exec sleep 60;;
			  *) echo "$line" | tr a-z A-Z;;
			esac`}, &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("worker exited %d", code)
		}
	})

	ok := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "jobs", "hello"))
	task := waitState(t, addr, ok, "COMPLETED")
	if task["result"] != "SEVMTE8K" { // base64 of "HELLO\n"
		t.Fatalf("result %v", task["result"])
	}

	bad := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "jobs", "--max-attempts", "1", "fail now"))
	task = waitState(t, addr, bad, "FAILED")
	if reason, _ := task["failureReason"].(string); !strings.Contains(reason, "it broke: fail now") || !strings.Contains(reason, "exit status 3") {
		t.Fatalf("failure reason %q", reason)
	}

	// A lost lease kills the running command.
	slow := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "jobs", "--window", "1s", "sleep"))
	waitState(t, addr, slow, "LEASED")
	var pid int
	eventually.NoError(t, "the command to start", func() error {
		b, err := os.ReadFile(filepath.Join(dir, "pid"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if pid == 0 {
			return fmt.Errorf("no pid in its file: %v", err)
		}
		return nil
	})
	mustCLI(t, "task", "kill", "--addr", addr, slow)
	eventually.NoError(t, "the command to end once its lease was lost", func() error {
		if syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("command %d still runs", pid)
		}
		return nil
	})
}

// TestCLIExplicitZeroRefused: zero means "unset" in the API and in
// worker.Options, so a flag given as 0 would quietly become the default
// (3 attempts, a 30s window, 1 task at once, 30s of grace). Each is a
// usage error naming the range and saying to omit the flag for the
// default, and nothing is submitted.
func TestCLIExplicitZeroRefused(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"submit", "--addr", addr, "--queue", "q", "--max-attempts", "0", "x"}, []string{"--max-attempts 0", "1..1000", "omit the flag", "3 attempts"}},
		{[]string{"submit", "--addr", addr, "--queue", "q", "--window", "0s", "x"}, []string{"--window 0", "100ms..24h", "omit the flag", "30s"}},
		{[]string{"worker", "--addr", addr, "--queue", "q", "--exec", "cat", "--concurrency", "0"}, []string{"--concurrency 0", "1..10000", "omit the flag"}},
		{[]string{"worker", "--addr", addr, "--queue", "q", "--exec", "cat", "--shutdown-grace", "0s"}, []string{"--shutdown-grace 0", "above 0", "omit the flag", "30s"}},
	} {
		// Already cancelled: a worker that wrongly starts stops at once
		// (exit 0) instead of running until the test times out.
		ctx, cancel := context.WithCancel(context.Background())
		if tc.args[0] == "worker" {
			cancel()
		}
		var out, errb bytes.Buffer
		code := run(ctx, tc.args, &out, &errb)
		cancel()
		for _, want := range tc.want {
			if code != 2 || !strings.Contains(errb.String(), want) {
				t.Errorf("tenure %s: exit %d (want 2), stderr %q (want %q)", strings.Join(tc.args, " "), code, errb.String(), want)
				break
			}
		}
	}
	// Nothing was submitted; given explicitly in range, the values hold.
	if code, _, errs := cli(t, "tasks", "list", "--addr", addr); code != 0 || !strings.Contains(errs, "no tasks match") {
		t.Fatalf("tasks list after the refused submits: exit %d, %s", code, errs)
	}
	id := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "q", "--max-attempts", "1", "--window", "100ms", "x"))
	if get := mustCLI(t, "task", "get", "--addr", addr, id); !strings.Contains(get, "0 of 1") || !strings.Contains(get, "100ms") {
		t.Fatalf("task get:\n%s", get)
	}
}

// TestCLIDeadline: submit --deadline and --timeout. A deadline in the past,
// a malformed one, both flags or a timeout that is not positive are refused
// with a message naming the flag or field, and nothing is submitted; a
// timeout becomes the deadline that task get shows.
func TestCLIDeadline(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--deadline", "2000-01-01T00:00:00Z"}, 1, []string{"deadline", "in the past"}},
		{[]string{"--deadline", "tomorrow"}, 2, []string{"--deadline", "RFC 3339"}},
		{[]string{"--deadline", "2999-01-01T00:00:00Z", "--timeout", "1h"}, 2, []string{"--deadline and --timeout"}},
		{[]string{"--timeout", "0s"}, 2, []string{"--timeout 0s", "not positive"}},
		{[]string{"--timeout", "-1m"}, 2, []string{"--timeout -1m0s", "not positive"}},
	} {
		args := append([]string{"submit", "--addr", addr, "--queue", "q"}, tc.args...)
		code, _, errs := cli(t, append(args, "x")...)
		for _, want := range tc.want {
			if code != tc.code || !strings.Contains(errs, want) {
				t.Errorf("tenure %s: exit %d (want %d), stderr %q (want %q)", strings.Join(args, " "), code, tc.code, errs, want)
				break
			}
		}
	}
	if code, _, errs := cli(t, "tasks", "list", "--addr", addr); code != 0 || !strings.Contains(errs, "no tasks match") {
		t.Fatalf("tasks list after the refused submits: exit %d, %s", code, errs)
	}
	id := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "q", "--timeout", "1h", "x"))
	if get := mustCLI(t, "task", "get", "--addr", addr, id); !strings.Contains(get, "deadline") {
		t.Fatalf("task get shows no deadline:\n%s", get)
	}
	var got struct {
		Task struct {
			Deadline  time.Time `json:"deadline"`
			CreatedAt time.Time `json:"createdAt"`
		} `json:"task"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "task", "get", "--addr", addr, "--json", id)), &got); err != nil || !got.Task.Deadline.Equal(got.Task.CreatedAt.Add(time.Hour)) {
		t.Fatalf("task get --json: deadline %v, created %v (%v); want the deadline an hour after the creation", got.Task.Deadline, got.Task.CreatedAt, err)
	}
}
