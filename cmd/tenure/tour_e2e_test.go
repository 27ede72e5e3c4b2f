package main

// The README's five-minute tour, typed in order against the real binary:
// the commands are read from README.md (between its tour markers), so the
// tour and this test cannot drift apart.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// The markers around the tour in README.md.
const (
	tourStart = "<!-- tour:start -->"
	tourEnd   = "<!-- tour:end -->"
)

// tourCommand is one command of the tour, as typed.
type tourCommand struct {
	line string
	// refused: its comment says the server refuses it ("# refused: …").
	refused bool
}

// readTour returns the commands of the ```sh blocks between the tour
// markers of the README at path: one per line (a line ending in a
// backslash continues on the next), comments and blank lines left out.
func readTour(path string) ([]tourCommand, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text := string(b)
	_, rest, ok := strings.Cut(text, tourStart)
	if !ok {
		return nil, fmt.Errorf("%s has no %q marker: the tour must sit between %q and %q", path, tourStart, tourStart, tourEnd)
	}
	body, _, ok := strings.Cut(rest, tourEnd)
	if !ok {
		return nil, fmt.Errorf("%s has %q but no %q after it", path, tourStart, tourEnd)
	}
	var cmds []tourCommand
	inBlock := false
	pending := ""
	for _, line := range strings.Split(body, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && trimmed == "```sh":
			inBlock = true
			continue
		case !inBlock && strings.HasPrefix(trimmed, "```"):
			return nil, fmt.Errorf("%s: the tour has a code block that is not ```sh: %q", path, trimmed)
		case inBlock && trimmed == "```":
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		if pending == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		full := pending + line
		pending = ""
		cmds = append(cmds, tourCommand{line: full, refused: strings.Contains(full, "# refused")})
	}
	if inBlock || pending != "" {
		return nil, fmt.Errorf("%s: the tour's last code block or command is not closed", path)
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("%s: no commands between the tour markers", path)
	}
	return cmds, nil
}

// tourScript is a bash script that runs cmds in order in one shell (so a
// variable set by one is seen by the next) and stops at the first whose
// exit status is not what the tour says: 0, or 1 for a refused one.
func tourScript(cmds []tourCommand) string {
	var s strings.Builder
	s.WriteString("set -o pipefail\n")
	for i, c := range cmds {
		want := "0"
		if c.refused {
			want = "1"
		}
		fmt.Fprintf(&s, "printf '\\n$ %%s\\n' %s\n%s\n", shellQuote(c.line), c.line)
		fmt.Fprintf(&s, "st=$?; if [ \"$st\" != %s ]; then echo \"tour: command %d exited $st, want %s: \"%s >&2; exit 99; fi\n",
			want, i+1, want, shellQuote(c.line))
	}
	s.WriteString("echo; echo 'tour: every command did as its comment says'\n")
	return s.String()
}

// TestReadmeTour types README.md's tour into bash, in order, against a real
// server, with ./tenure the binary built from this checkout: each command
// must succeed (a refused one must be refused), and the tasks end as the
// tour says.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	cmds, err := readTour(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	srv := startServerProc(t, t.TempDir())
	work := t.TempDir()
	if err := os.Symlink(tenureBin, filepath.Join(work, "tenure")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "tour.sh")
	if err := os.WriteFile(script, []byte(tourScript(cmds)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", script)
	sh.Dir = work
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TENURE_") {
			sh.Env = append(sh.Env, kv)
		}
	}
	sh.Env = append(sh.Env, "TENURE_ADDR="+srv.url())
	out, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the tour failed (%v), after %d commands in all:\n%s", err, len(cmds), out)
	}
	t.Logf("the tour, %d commands:\n%s", len(cmds), out)
	if !strings.Contains(string(out), "(duplicate: request id \"order-42\"") {
		t.Errorf("the tour's repeated submit did not say it was a duplicate")
	}

	// What the tour did to the emails queue: every task completed by its
	// worker, the one killed and retried with it.
	c := newJSONClients(srv)
	defer c.close()
	resp, err := c.tasks.ListTasks(t.Context(), connect.NewRequest(&tenurev1.ListTasksRequest{Queue: "emails", PageSize: 100}))
	if err != nil {
		t.Fatal(err)
	}
	var carol string
	for _, task := range resp.Msg.GetTasks() {
		if task.GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED {
			t.Errorf("task %s (%q) is %v after the tour, want COMPLETED", task.GetTaskId(), task.GetPayload(), task.GetState())
		}
		if string(task.GetPayload()) == "hello carol" {
			carol = task.GetTaskId()
		}
	}
	if carol == "" {
		t.Fatalf("no task with the payload \"hello carol\" in queue emails")
	}
	hist, err := c.tasks.GetTaskHistory(t.Context(), connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: carol}))
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range hist.Msg.GetEntries() {
		types = append(types, e.GetType())
	}
	if got, want := strings.Join(types, " "), "TaskCreated TaskDead TaskRetried LeaseGranted TaskCompleted"; got != want {
		t.Errorf("history of the killed and retried task: %s, want %s", got, want)
	}
}

// TestReadTour: the reader of the tour joins continued lines, leaves out
// comments, marks refused commands, and refuses a README without markers.
func TestReadTour(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "README.md")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cmds, err := readTour(write("intro\n```sh\nnot me\n```\n" + tourStart + "\ntext\n```sh\n# a comment\n\nx=$(echo a)\ncurl -s \\\n  -d y   # after\n./tenure z # refused: no\n```\n" + tourEnd + "\n```sh\nnor me\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%+v", cmds)
	want := fmt.Sprintf("%+v", []tourCommand{{line: "x=$(echo a)"}, {line: "curl -s    -d y   # after"}, {line: "./tenure z # refused: no", refused: true}})
	if got != want {
		t.Errorf("readTour = %s, want %s", got, want)
	}
	for _, bad := range []string{"no markers", tourStart + "\n```sh\na\n```\n", tourStart + "\n" + tourEnd, tourStart + "\n```go\na\n```\n" + tourEnd} {
		if _, err := readTour(write(bad)); err == nil {
			t.Errorf("readTour(%q) = nil error, want one", bad)
		}
	}
}
