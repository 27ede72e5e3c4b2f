package e2e

// GET /metrics of the real binary, alone and as a cluster node, checked by
// promtool.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/eventually"
)

// promtoolCheck runs `promtool check metrics` on a scrape; without
// promtool it skips (CI installs it, and fails without it).
func promtoolCheck(t *testing.T, body string) {
	t.Helper()
	tool := lookTool(t, "promtool", "Debian's prometheus package: apt-get install prometheus")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s\n--- scrape:\n%s", err, out, body)
	}
}

// TestServerMetrics: `tenure server` serves GET /metrics with the WAL's
// metrics, folds the queues past --metrics-max-queues into _other, and
// promtool accepts the output.
func TestServerMetrics(t *testing.T) {
	t.Parallel()
	p := startServerProc(t, t.TempDir(), "--metrics-max-queues", "1")
	for _, q := range []string{"first", "second", "third", "first"} {
		mustCLI(t, "submit", "--addr", p.url(), "--queue", q, "x")
	}
	body := scrape(t, p)
	for _, want := range []string{
		`tenure_tasks_submitted_total{namespace="default",queue="first"} 2`,
		`tenure_tasks_submitted_total{namespace="_other",queue="_other"} 2`,
		`tenure_request_duration_seconds_count{code="ok",procedure="/tenure.v1.TaskService/Submit"} 4`,
		"# TYPE tenure_wal_fsync_duration_seconds histogram",
		"# TYPE tenure_wal_segments gauge",
		"# TYPE tenure_replay_duration_seconds gauge",
		"# TYPE process_cpu_seconds_total counter",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics has no %q", want)
		}
	}
	if strings.Contains(body, `queue="second"`) || strings.Contains(body, "tenure_cluster_") {
		t.Errorf("GET /metrics has a folded queue's own labels or cluster metrics:\n%s", body)
	}
	promtoolCheck(t, body)
}

// TestClusterServerMetrics: a cluster node (`tenure server --mysql`)
// serves GET /metrics with the cluster's metrics: alone, it holds the
// coordinator lock, serves every partition of the queue it was sent a
// task for, and promtool accepts the output.
func TestClusterServerMetrics(t *testing.T) {
	t.Parallel()
	dsn := clustertest.NewDatabase(t) // skips without MySQL, fails under CI
	n := &clNode{id: "m1", dsn: dsn}
	n.proc = start(t, n.launch(""))
	mustCLI(t, "submit", "--addr", n.url(), "--queue", "emails", "x")
	var body string
	partitions := fmt.Sprintf("\ntenure_cluster_partitions %d\n", clPartitions)
	eventually.NoError(t, "the only node to hold the coordinator lock and serve the queue's partitions", func() error {
		body = scrape(t, n.proc)
		if strings.Contains(body, "\ntenure_cluster_coordinator 1\n") && strings.Contains(body, partitions) {
			return nil
		}
		return fmt.Errorf("it reports no coordinator lock or not %d partitions:\n%s", clPartitions, body)
	})
	for _, want := range []string{
		"tenure_tasks_submitted_total{namespace=\"default\",queue=\"emails\"} 1",
		"# TYPE tenure_cluster_db_commit_duration_seconds histogram",
		"# TYPE tenure_cluster_epoch_changes_total counter",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics has no %q", want)
		}
	}
	if strings.Contains(body, "tenure_wal_fsync") {
		t.Errorf("a cluster node serves the embedded WAL's metrics")
	}
	promtoolCheck(t, body)
}
