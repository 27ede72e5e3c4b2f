package e2e

import (
	"strings"
	"testing"
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
