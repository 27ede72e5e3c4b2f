package e2e

import (
	"errors"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/sdk/client"
)

// TestSubmitWaitTwoSteps: against the real binary, a workflow of two
// steps on two queues, each worked off by an exec worker: `tenure submit
// --wait` of the second step, which depends on the first, prints the
// second step's result, made from the first one's (passed to it in
// TENURE_DEPENDENCY_RESULT_0); a step whose dependency failed ends DEAD,
// and --wait says so and exits 1.
func TestSubmitWaitTwoSteps(t *testing.T) {
	t.Parallel()
	srv := startServerProc(t, t.TempDir())
	addr := srv.url()
	spawn(t, "worker-upper", "", []string{"worker", "--addr", addr, "--queue", "upper", "--exec",
		`p=$(cat); if [ "$p" = bad ]; then exit 100; fi; printf '%s' "$p" | tr a-z A-Z`})
	spawn(t, "worker-greet", "", []string{"worker", "--addr", addr, "--queue", "greet", "--exec",
		`printf 'hello, %s (from %s)' "$TENURE_DEPENDENCY_RESULT_0" "$(cat)"`})

	first := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "upper", "alice"))
	code, out, errs := cli(t, "submit", "--addr", addr, "--queue", "greet", "--depends-on", first, "--wait", "--wait-timeout", "1m", "step two")
	if code != 0 || out != "hello, ALICE (from step two)" || !strings.Contains(errs, "submitted ") {
		t.Fatalf("submit --wait: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	bad := strings.TrimSpace(mustCLI(t, "submit", "--addr", addr, "--queue", "upper", "bad"))
	code, out, errs = cli(t, "submit", "--addr", addr, "--queue", "greet", "--depends-on", bad, "--wait", "never")
	if code != 1 || out != "" || !strings.Contains(errs, "ended DEAD: dependency_failed: task "+bad+" is FAILED") {
		t.Fatalf("submit --wait of a step whose dependency failed: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := cli(t, "submit", "--addr", addr, "--queue", "greet", "--depends-on", "no-such-task", "x"); code != 1 || !strings.Contains(errs, "depends_on[0]") {
		t.Fatalf("submit naming an unknown dependency: exit %d, stderr %q", code, errs)
	}
}

// TestCancelRunningWorkflow: against the real binary, `tenure workflow
// cancel` of a workflow whose first step a worker holds leased ends all
// of it: the held lease cannot complete, nothing of it is leased, before
// and after a kill -9 and a replay; `tenure workflow get` shows it
// CANCELLED with its graph, and `tenure workflow retry` runs it again.
func TestCancelRunningWorkflow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServerProc(t, dir)
	c := sdk(t, srv.url())
	ctx := t.Context()
	res, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{WorkflowID: "nightly", Requests: []client.SubmitRequest{
		{Queue: "etl", RequestID: "extract"},
		{Queue: "etl", RequestID: "load", DependsOn: []string{"extract"}},
		{Queue: "etl", DependsOn: []string{"load", "extract"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	held, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "etl"})
	if err != nil || len(held.Tasks) != 1 || held.Tasks[0].ID != res[0].TaskID {
		t.Fatalf("lease of the first step: %+v %v", held, err)
	}
	out := mustCLI(t, "workflow", "cancel", "nightly", "--addr", srv.url(), "--reason", "bad input")
	if !strings.Contains(out, "cancelled: 3 tasks; now CANCELLED, 3 dead") {
		t.Fatalf("workflow cancel printed %q", out)
	}
	nothingLeasable := func(c *client.Client) {
		t.Helper()
		if got, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w2", Queue: "etl", MaxTasks: 10}); err != nil || len(got.Tasks) != 0 {
			t.Fatalf("a cancelled workflow leased %d tasks (%v)", len(got.Tasks), err)
		}
	}
	nothingLeasable(c)
	l := held.Tasks[0]
	if err := c.Complete(ctx, client.CompleteRequest{TaskID: l.ID, LeaseID: l.LeaseID}); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("the held lease of a cancelled step completed: %v", err)
	}
	srv.kill9(t)
	srv = startServerProc(t, dir)
	c = sdk(t, srv.url())
	nothingLeasable(c)
	out = mustCLI(t, "workflow", "get", "nightly", "--addr", srv.url())
	for _, want := range []string{"CANCELLED (since", "bad input", "3: 3 dead", "#3", "#2 #1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("workflow get after the restart does not say %q:\n%s", want, out)
		}
	}
	if out := mustCLI(t, "workflow", "retry", "nightly", "--addr", srv.url()); !strings.Contains(out, "retried: 3 tasks; now RUNNING, 2 blocked, 1 waiting") {
		t.Fatalf("workflow retry printed %q", out)
	}
}
