package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestCLIFlagsAnywhere: flags may follow the positional arguments, and the
// one-dash long flags of the standard library's flag package still work.
func TestCLIFlagsAnywhere(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	id := strings.TrimSpace(mustCLI(t, "submit", "hello after", "--queue", "emails", "--addr", addr))
	if len(id) != 26 {
		t.Fatalf("submit 'hello after' --queue emails printed %q, want a task id", id)
	}
	if get := mustCLI(t, "task", "get", id, "--addr", addr); !strings.Contains(get, "emails") || !strings.Contains(get, `"hello after"`) {
		t.Fatalf("task get ID --addr A:\n%s", get)
	}
	old := strings.TrimSpace(mustCLI(t, "submit", "-addr", addr, "-queue", "old", "-max-attempts=2", "-json", "one dash"))
	var sub struct {
		Task struct {
			Queue       string `json:"queue"`
			Payload     []byte `json:"payload"`
			RetryPolicy struct {
				MaxAttempts int `json:"maxAttempts"`
			} `json:"retryPolicy"`
		} `json:"task"`
	}
	if err := json.Unmarshal([]byte(old), &sub); err != nil || sub.Task.Queue != "old" || string(sub.Task.Payload) != "one dash" || sub.Task.RetryPolicy.MaxAttempts != 2 {
		t.Fatalf("submit with one-dash flags: %v %+v\n%s", err, sub, old)
	}
	// After "--" nothing is a flag: the payload is "-queue".
	id = strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "dash", "--", "-queue"))
	if get := mustCLI(t, "task", "get", "--addr", addr, id); !strings.Contains(get, `"-queue"`) {
		t.Fatalf("submit -- -queue: the payload is not -queue:\n%s", get)
	}
}

// TestCLIGroupsListTheirCommands: a group of commands run alone lists its
// commands (exit 0); an unknown command is a usage error that suggests
// the near ones; a usage mistake prints the command's usage line.
func TestCLIGroupsListTheirCommands(t *testing.T) {
	t.Parallel()
	for group, want := range map[string][]string{
		"task":       {"get", "show a task and its executions", "history", "kill", "retry"},
		"tasks":      {"list", "list tasks, filtered by namespace, queue and state", "retry", "kill", "purge"},
		"queue":      {"get", "pause", "resume"},
		"wal":        {"verify", "dump", "state"},
		"admin":      {"snapshot"},
		"cluster":    {"status"},
		"completion": {"bash", "zsh", "fish"},
	} {
		code, out, errs := cli(t, group)
		for _, w := range want {
			if code != 0 || !strings.Contains(out, w) {
				t.Errorf("tenure %s: exit %d, stdout lacks %q:\n%s%s", group, code, w, out, errs)
				break
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"task", "frob"}, []string{`tenure task: unknown command "frob" for "tenure task"`, "tenure task --help"}},
		{[]string{"tsk"}, []string{`unknown command "tsk"`, `did you mean "task" or "tasks"?`}},
		{[]string{"submit", "x"}, []string{"tenure submit: --queue is required", "Usage: tenure submit --queue Q [flags] [PAYLOAD | -]", "tenure submit --help"}},
		{[]string{"tasks", "list", "--frob"}, []string{"unknown flag: --frob", "Usage: tenure tasks list"}},
		{[]string{"submit", "--queue", "q", "--window", "soon", "x"}, []string{`invalid argument "soon" for "--window"`}},
	} {
		usageRefused(t, tc.args, tc.want...)
	}
	// Every command the tree holds has a help text that names it.
	for _, path := range [][]string{{"server"}, {"submit"}, {"task", "get"}, {"task", "history"}, {"task", "kill"}, {"task", "retry"},
		{"tasks", "list"}, {"tasks", "retry"}, {"tasks", "kill"}, {"tasks", "purge"}, {"queues"}, {"queue", "get"}, {"queue", "pause"},
		{"queue", "resume"}, {"worker"}, {"admin", "snapshot"}, {"migrate"}, {"cluster", "status"}, {"wal", "verify"}, {"wal", "dump"}, {"wal", "state"},
		{"bench"}, {"version"}} {
		code, out, _ := cli(t, append(path, "--help")...)
		if code != 0 || !strings.Contains(out, "Usage:\n  tenure "+strings.Join(path, " ")) || !strings.Contains(out, "--help") {
			t.Errorf("tenure %s --help: exit %d:\n%s", strings.Join(path, " "), code, out)
		}
	}
}

// TestCLIPositionalArguments: every command refuses positional arguments
// it does not take before it does anything else, as a usage error that
// says what it takes: a command takes none unless its spec's Args says
// otherwise. submit (its payload) and worker check theirs after their
// flags (TestCLIGroupsListTheirCommands, TestCLIExecWorkerEnvAndExitCodes).
func TestCLIPositionalArguments(t *testing.T) {
	t.Parallel()
	after := map[string]bool{"tenure submit": true, "tenure worker": true}
	var leaves [][]string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands():
			for _, sub := range c.Commands() {
				walk(sub)
			}
		case c.Name() != "help" && c.Parent().Name() != "completion" && !after[c.CommandPath()]:
			leaves = append(leaves, strings.Fields(c.CommandPath())[1:])
		}
	}
	walk(newRoot(&app{stdout: io.Discard, stderr: io.Discard, clock: clock.Real}))
	if len(leaves) < 30 {
		t.Fatalf("found %d commands in the tree: %v", len(leaves), leaves)
	}
	// A cancelled context: a command that took the arguments would end
	// at once rather than serve or wait.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, path := range leaves {
		args := append(path, "a1", "a2", "a3")
		var errs bytes.Buffer
		code := runApp(ctx, args, &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &errs, clock: clock.Real})
		if code != 2 || !(strings.Contains(errs.String(), `unexpected argument "a1"`) || strings.Contains(errs.String(), "got 3 arguments")) {
			t.Errorf("tenure %s: exit %d (want 2, refusing the arguments):\n%s", strings.Join(args, " "), code, errs.String())
		}
	}
}

// taskRows returns the task ids of a `tasks list` table.
func taskRows(t *testing.T, table string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "TASK") {
		t.Fatalf("not a task table:\n%s", table)
	}
	var ids []string
	for _, l := range lines[1:] {
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

// TestCLITasksListPages: over 250 tasks, `tasks list` shows 100 and says on
// stderr that more exist, with the command that lists the next page; that
// command, run as printed, lists the next 100, and the one it prints the
// last 50 (with no hint). --all lists all 250, and --json keeps the
// API's next page token (none with --all).
func TestCLITasksListPages(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	c := sdk(t, addr)
	var reqs []client.SubmitRequest
	for i := range 250 {
		reqs = append(reqs, client.SubmitRequest{Queue: "many", Payload: fmt.Appendf(nil, "task %d", i)})
	}
	if _, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs}); err != nil {
		t.Fatal(err)
	}
	hint := regexp.MustCompile(`more tasks exist: (tenure tasks list .*--page-token \S+) \(or --all\)\n`)

	seen := map[string]bool{}
	args := []string{"tasks", "list", "--addr", addr, "--queue", "many"}
	for page, want := range []int{100, 100, 50} {
		code, out, errs := cli(t, args...)
		if code != 0 {
			t.Fatalf("page %d: tenure %s: exit %d: %s", page+1, strings.Join(args, " "), code, errs)
		}
		ids := taskRows(t, out)
		if len(ids) != want {
			t.Fatalf("page %d: %d rows, want %d", page+1, len(ids), want)
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("page %d: task %s was on an earlier page", page+1, id)
			}
			seen[id] = true
		}
		m := hint.FindStringSubmatch(errs)
		if page == 2 {
			if strings.Contains(errs, "more tasks") {
				t.Fatalf("the last page still says more tasks exist: %s", errs)
			}
			break
		}
		if m == nil {
			t.Fatalf("page %d: stderr does not say more tasks exist with the next page's command: %q", page+1, errs)
		}
		args = strings.Fields(m[1])[1:] // the command as printed, without "tenure"
	}

	code, out, errs := cli(t, "tasks", "list", "--addr", addr, "--all")
	if ids := taskRows(t, out); code != 0 || len(ids) != 250 || strings.Contains(errs, "more tasks") {
		t.Fatalf("tasks list --all: exit %d, %d rows (want 250), stderr %q", code, len(ids), errs)
	}
	var list struct {
		Tasks         []map[string]any `json:"tasks"`
		NextPageToken *string          `json:"nextPageToken"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "tasks", "list", "--addr", addr, "--all", "--json")), &list); err != nil ||
		len(list.Tasks) != 250 || list.NextPageToken != nil {
		t.Fatalf("tasks list --all --json: %v, %d tasks (want 250), next page token %v (want none)", err, len(list.Tasks), list.NextPageToken)
	}
	list.Tasks, list.NextPageToken = nil, nil
	if err := json.Unmarshal([]byte(mustCLI(t, "tasks", "list", "--addr", addr, "--json", "--limit", "240")), &list); err != nil ||
		len(list.Tasks) != 240 || list.NextPageToken == nil {
		t.Fatalf("tasks list --json --limit 240: %v, %d tasks (want 240), next page token %v (want one)", err, len(list.Tasks), list.NextPageToken)
	}
	inJSON := map[string]bool{}
	for _, task := range list.Tasks {
		inJSON[task["taskId"].(string)] = true
	}
	code, out, _ = cli(t, "tasks", "list", "--addr", addr, "--page-token", *list.NextPageToken)
	rest := taskRows(t, out)
	if code != 0 || len(rest) != 10 {
		t.Fatalf("tasks list --page-token (the JSON's token): exit %d, %d rows, want the last 10", code, len(rest))
	}
	for _, id := range rest {
		if inJSON[id] {
			t.Fatalf("tasks list --page-token (the JSON's token) shows %s again", id)
		}
	}
	usageRefused(t, []string{"tasks", "list", "--addr", addr, "--all", "--limit", "5"}, "--all or --limit")
}

// TestCLICompletion: `tenure completion bash` prints a bash script that
// completes tenure, and the flags with fixed values complete them.
func TestCLICompletion(t *testing.T) {
	t.Parallel()
	script := mustCLI(t, "completion", "bash")
	for _, want := range []string{"__start_tenure()", "complete -o default -F __start_tenure tenure"} {
		if !strings.Contains(script, want) {
			t.Fatalf("completion bash lacks %q:\n%.500s", want, script)
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		if out := mustCLI(t, "completion", shell); !strings.Contains(out, "tenure") {
			t.Errorf("completion %s names no tenure:\n%.300s", shell, out)
		}
	}
	if out := mustCLI(t, "__complete", "tasks", "list", "--state", ""); !strings.Contains(out, "waiting\nleased\ncommitted\ncompleted\nfailed\ndead\n") {
		t.Errorf("completing --state: %q", out)
	}
	if out := mustCLI(t, "__complete", "tasks", "retry", "--state", ""); !strings.Contains(out, "failed\ndead\n") || strings.Contains(out, "waiting") {
		t.Errorf("completing tasks retry --state: %q; want failed and dead only", out)
	}
	if out := mustCLI(t, "__complete", "ta"); !strings.Contains(out, "task\t") || !strings.Contains(out, "tasks\t") {
		t.Errorf("completing ta: %q", out)
	}
}

// TestVersionOf reads the VCS stamps `go build` records.
func TestVersionOf(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/tenurehq/tenure", Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2025-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}, {Key: "GOOS", Value: "linux"},
	}}
	want := version{Module: "github.com/tenurehq/tenure", Version: "v1.2.3", Revision: "0123abc", Time: "2025-01-02T03:04:05Z", Modified: true, Go: "go1.26.0"}
	if got := versionOf(bi); got != want {
		t.Errorf("versionOf: %+v, want %+v", got, want)
	}
	bi.Settings, bi.Main.Version = nil, ""
	if got := versionOf(bi); got.Version != "(devel)" || got.Revision != "" || got.Modified {
		t.Errorf("versionOf without stamps: %+v", got)
	}
}

// logFile is a log written by a worker running in the test: an
// *os.File, which the worker may write while the test reads it.
type logFile struct{ *os.File }

func workerLog(t *testing.T) logFile {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return logFile{f}
}

// String is what the log holds so far.
func (l logFile) String() string {
	b, _ := os.ReadFile(l.Name())
	return string(b)
}

// TestCLIExecWorkerEnvAndExitCodes: the command sees the task in its
// environment; exit 100 fails the task for good after one attempt
// (whatever its max attempts); another exit is retried; the worker logs
// one line per finished task with its outcome, task, attempt and time.
func TestCLIExecWorkerEnvAndExitCodes(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	// The worker's log, in a file: the worker writes while the test reads.
	logs := workerLog(t)
	go func() {
		done <- run(ctx, []string{"worker", "--addr", addr, "--queue", "envq", "--namespace", "envns", "--exec", fmt.Sprintf(`case "$(cat)" in
			  env) printf '%%s|%%s|%%s|%%s|%%s' "$TENURE_TASK_ID" "$TENURE_ATTEMPT" "$TENURE_LEASE_ID" "$TENURE_NAMESPACE" "$TENURE_QUEUE";;
			  give-up) echo "cannot ever do this" >&2; exit %d;;
			  flaky) echo "try again" >&2; exit 3;;
			esac`, permanentFailureExit)}, &bytes.Buffer{}, logs)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("worker exited %d\n%s", code, logs)
		}
	})
	submit := func(payload string, extra ...string) string {
		return strings.TrimSpace(mustCLI(t, append([]string{"submit", payload, "--addr", addr, "--namespace", "envns", "--queue", "envq"}, extra...)...))
	}

	id := submit("env")
	task := waitState(t, addr, id, "COMPLETED")
	result, _ := base64.StdEncoding.DecodeString(task["result"].(string))
	lease := task["executions"].([]any)[0].(map[string]any)["leaseId"]
	if want := fmt.Sprintf("%s|1|%s|envns|envq", id, lease); string(result) != want {
		t.Fatalf("the command saw %q, want %q", result, want)
	}

	perm := submit("give-up", "--max-attempts", "5")
	task = waitState(t, addr, perm, "FAILED")
	reason, _ := task["failureReason"].(string)
	if task["attempt"] != float64(1) || len(task["executions"].([]any)) != 1 || !strings.Contains(reason, "exit status 100: cannot ever do this") {
		t.Fatalf("exit %d: FAILED at attempt %v with %d executions, reason %q; want attempt 1, no retry, the command's stderr",
			permanentFailureExit, task["attempt"], len(task["executions"].([]any)), reason)
	}

	flaky := submit("flaky", "--max-attempts", "2")

	waitLog := func(want string) {
		t.Helper()
		eventually.NoError(t, fmt.Sprintf("the worker to log %q", want), func() error {
			if !strings.Contains(logs.String(), want) {
				return fmt.Errorf("its log:\n%s", logs)
			}
			return nil
		})
	}
	for _, want := range []string{
		`msg="task finished" outcome=completed task_id=` + id + ` attempt=1 took=`,
		`msg="task finished" outcome="failed permanently" task_id=` + perm + ` attempt=1 took=`,
		`msg="task finished" outcome="failed, will retry" task_id=` + flaky + ` attempt=1 took=`,
		`msg="task finished" outcome="failed, attempts used up" task_id=` + flaky + ` attempt=2 took=`,
	} {
		waitLog(want)
	}
	// One line per failed attempt: the worker's runtime leaves them to
	// the exec worker's "task finished".
	for _, task := range []string{perm, flaky} {
		var lines []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, task) && strings.Contains(l, "fail") {
				lines = append(lines, l)
			}
		}
		if want := map[string]int{perm: 1, flaky: 2}[task]; len(lines) != want {
			t.Errorf("the worker logged %d lines of the failures of %s, want %d (one per attempt):\n%s", len(lines), task, want, strings.Join(lines, "\n"))
		}
	}

	// A paused queue: the worker says so once, and again when resumed.
	mustCLI(t, "queue", "pause", "envq", "--namespace", "envns", "--reason", "incident 7", "--requested-by", "ops@box", "--addr", addr)
	waitLog(`msg="the queue is paused: leasing nothing until it is resumed" worker_id=`)
	waitLog(`paused_by=ops@box reason="incident 7" paused_at=`)
	mustCLI(t, "queue", "resume", "envq", "--namespace", "envns", "--addr", addr)
	again := submit("env")
	waitLog(`msg="the queue was resumed: leasing again"`)
	waitState(t, addr, again, "COMPLETED")
	if n := strings.Count(logs.String(), "the queue is paused"); n != 1 {
		t.Errorf("the worker said %d times that the queue is paused, want once:\n%s", n, logs)
	}
}

// TestServerCommitIntervalRefused: --commit-interval or --wal-segment-bytes
// out of range, or with --mysql (the database's commit is the cluster's),
// is a usage error naming the flag.
func TestServerCommitIntervalRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", t.TempDir(), "--commit-interval", "-1ms"}, "--commit-interval -1ms is outside 0..100ms"},
		{[]string{"--data-dir", t.TempDir(), "--commit-interval", "1s"}, "--commit-interval 1s is outside 0..100ms"},
		{[]string{"--mysql", "root@tcp(127.0.0.1:1)/x", "--commit-interval", "2ms"}, "--commit-interval is for the embedded mode"},
		{[]string{"--data-dir", t.TempDir(), "--wal-segment-bytes", "4095"}, "--wal-segment-bytes 4095 is outside 4096..1073741824"},
		{[]string{"--data-dir", t.TempDir(), "--wal-segment-bytes", "1073741825"}, "--wal-segment-bytes 1073741825 is outside 4096..1073741824"},
		{[]string{"--mysql", "root@tcp(127.0.0.1:1)/x", "--wal-segment-bytes", "65536"}, "--wal-segment-bytes is for the embedded mode"},
	} {
		usageRefused(t, append([]string{"server", "--listen", "127.0.0.1:0"}, tc.args...), tc.want)
	}
}
