package e2e

// The README's five-minute tour, typed in order against the real binary:
// the commands are read from README.md (between its tour markers; see
// guideshell_test.go), so the tour and this test cannot drift apart.

import (
	"strings"
	"testing"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// TestReadmeTour types README.md's tour into bash, in order, against a real
// server, with ./tenure the binary built from this checkout: each command
// must succeed (a refused one must be refused), and the tasks end as the
// tour says.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	cmds, err := readCommands(repoPath("README.md"), "tour")
	if err != nil {
		t.Fatal(err)
	}
	srv := startServerProc(t, t.TempDir())
	sh := newGuideShell(t, srv.addr)
	sh.run(cmds)
	t.Logf("the tour, %d commands:\n%s", len(cmds), sh.transcript.String())
	if !strings.Contains(sh.transcript.String(), "(duplicate: request id \"order-42\"") {
		t.Errorf("the tour's repeated submit did not say it was a duplicate")
	}

	// What the tour did to the emails queue: every task completed by its
	// worker, the one killed and retried with it.
	c := newJSONClients(t, srv)
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
