package metrics_test

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// embedded is an embedded node with metrics behind the API on a loopback
// port, as `tenure server` runs it.
type embedded struct {
	n       *node.Node
	m       *metrics.Metrics
	url     string
	srv     *server.HTTP
	tasks   tenurev1connect.TaskServiceClient
	workers tenurev1connect.WorkerServiceClient
	admin   tenurev1connect.AdminServiceClient
}

// startEmbedded opens a node on dir (fsync always) with metrics on clk;
// its per-queue gauges come from the node's queue statistics, as in
// `tenure server`. Close stops it (also at the end of the test).
func startEmbedded(t *testing.T, dir string, clk clock.Clock) *embedded {
	t.Helper()
	m := newMetrics(t, metrics.Config{Clock: clk})
	mem := coordinator.NewMemoryBudget(1<<30, time.Minute)
	cfg := node.Config{
		DataDir:     dir,
		Sync:        wal.SyncAlways,
		Coordinator: coordinator.Config{Clock: clk, Memory: mem},
		// Snapshots only when the test asks (AdminService.Snapshot).
		Snapshots: host.Schedule{Disabled: true},
	}
	m.ConfigureNode(&cfg)
	n, err := node.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("open node: %v", err)
	}
	m.WatchNode(n)
	m.WatchMemory(mem)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(n.Router(), server.Options{Snapshots: n, Metrics: m, Clock: clk}).Serve(ln, server.HTTPConfig{})
	url := srv.URL()
	e := &embedded{
		n: n, m: m, url: url, srv: srv,
		tasks:   tenurev1connect.NewTaskServiceClient(http.DefaultClient, url),
		workers: tenurev1connect.NewWorkerServiceClient(http.DefaultClient, url),
		admin:   tenurev1connect.NewAdminServiceClient(http.DefaultClient, url),
	}
	t.Cleanup(e.close)
	return e
}

func (e *embedded) close() {
	if e.srv == nil {
		return
	}
	e.srv.Close()
	e.n.Close()
	e.srv = nil
}

// scrape returns GET /metrics of the live server: the raw text and parsed.
func (e *embedded) scrape(t *testing.T) ([]byte, families) {
	t.Helper()
	return scrapeURL(t, e.url)
}

// The counters of one queue's events.
var eventCounters = []string{
	"tenure_tasks_submitted_total",
	"tenure_tasks_leased_total",
	"tenure_tasks_committed_total",
	"tenure_tasks_completed_total",
	"tenure_tasks_failed_total",
	"tenure_leases_expired_total",
	"tenure_tasks_killed_total",
	"tenure_refused_stale_attempts_total",
	"tenure_tasks_deadline_exceeded_total",
}

// counters reads the event counters of default/emails; an absent series
// is 0 (no event of that queue yet).
func counters(f families) map[string]float64 {
	out := make(map[string]float64)
	for _, name := range eventCounters {
		if m := f.find(name, "namespace", "default", "queue", "emails"); m != nil {
			out[name] = m.GetCounter().GetValue()
		}
	}
	return out
}

// leaseLost reports whether err is the API's LEASE_LOST refusal.
func leaseLost(err error) bool {
	return connect.CodeOf(err) == connect.CodeFailedPrecondition && apitest.ErrorDetail(err).GetReason() == tenurev1.ErrorReason_ERROR_REASON_LEASE_LOST
}

// TestWorkloadCounters runs a known workload through a live server and
// checks that every counter moved by exactly its share: submit 7, lease 5,
// commit 1 of them, complete 3, fail 1 for good, let 1 lease expire (the
// fake clock passes its window) and have its worker's commit refused.
// promtool accepts the scrape. A restart counts nothing of what it
// replays.
func TestWorkloadCounters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	clk := clock.NewFake(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	e := startEmbedded(t, dir, clk)
	_, before := e.scrape(t)
	base := counters(before)

	for range 7 {
		if _, err := e.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "emails", Payload: []byte("hi")})); err != nil {
			t.Fatal(err)
		}
	}
	lr, err := e.workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w1", Queue: "emails", MaxTasks: 5}))
	if err != nil {
		t.Fatal(err)
	}
	leased := lr.Msg.GetTasks()
	if len(leased) != 5 {
		t.Fatalf("leased %d tasks, want 5", len(leased))
	}
	lease := func(i int) (string, string) { return leased[i].GetTaskId(), leased[i].GetLeaseId() }
	id, l := lease(0)
	if _, err := e.workers.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: id, LeaseId: l, Result: []byte("r")})); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		id, l := lease(i)
		if _, err := e.workers.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: id, LeaseId: l, Result: []byte("r")})); err != nil {
			t.Fatal(err)
		}
	}
	id, l = lease(3)
	if _, err := e.workers.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{TaskId: id, LeaseId: l, Reason: "bad input", Permanent: true})); err != nil {
		t.Fatal(err)
	}
	// The fifth lease runs out; its worker, unaware, commits.
	clk.Advance(31 * time.Second)
	staleID, staleLease := lease(4)
	stale := connect.NewRequest(&tenurev1.CommitRequest{TaskId: staleID, LeaseId: staleLease, Result: []byte("late")})
	if _, err := e.workers.Commit(ctx, stale); !leaseLost(err) {
		t.Fatalf("commit by the expired lease: %v, want LEASE_LOST", err)
	}

	body, f := e.scrape(t)
	checkMetrics(t, body)
	got := counters(f)
	want := map[string]float64{
		"tenure_tasks_submitted_total":         7,
		"tenure_tasks_leased_total":            5,
		"tenure_tasks_committed_total":         1,
		"tenure_tasks_completed_total":         3,
		"tenure_tasks_failed_total":            1,
		"tenure_leases_expired_total":          1,
		"tenure_tasks_killed_total":            0,
		"tenure_refused_stale_attempts_total":  1,
		"tenure_tasks_deadline_exceeded_total": 0,
	}
	for _, name := range eventCounters {
		if d := got[name] - base[name]; d != want[name] {
			t.Errorf("%s moved by %v, want %v", name, d, want[name])
		}
	}

	// Every call is timed under its procedure and code.
	for _, c := range []struct {
		procedure, code string
		want            float64
	}{
		{tenurev1connect.TaskServiceSubmitProcedure, "ok", 7},
		{tenurev1connect.WorkerServiceLeaseProcedure, "ok", 1},
		{tenurev1connect.WorkerServiceCommitProcedure, "ok", 1},
		{tenurev1connect.WorkerServiceCommitProcedure, "failed_precondition", 1},
		{tenurev1connect.WorkerServiceCompleteProcedure, "ok", 3},
		{tenurev1connect.WorkerServiceFailProcedure, "ok", 1},
	} {
		if got := f.value(t, "tenure_request_duration_seconds", "procedure", c.procedure, "code", c.code); got != c.want {
			t.Errorf("requests %s %s = %v, want %v", c.procedure, c.code, got, c.want)
		}
	}

	// The WAL's histograms saw every write and fsync the WAL counted, and
	// its gauges show what is on disk.
	st := e.n.WALStats()
	if got := f.value(t, "tenure_wal_append_duration_seconds"); got != float64(st.Batches) || st.Batches == 0 {
		t.Errorf("WAL appends observed %v, the WAL wrote %d batches", got, st.Batches)
	}
	if got := f.value(t, "tenure_wal_fsync_duration_seconds"); got != float64(st.Fsyncs) || st.Fsyncs == 0 {
		t.Errorf("WAL fsyncs observed %v, the WAL fsynced %d times", got, st.Fsyncs)
	}
	if got := f.find("tenure_wal_batch_records").GetHistogram().GetSampleSum(); got != float64(st.Records) || st.Records == 0 {
		t.Errorf("records in the observed batches %v, the WAL wrote %d", got, st.Records)
	}
	segs, bytes := walFiles(t, filepath.Join(dir, node.WALDir))
	if got := f.value(t, "tenure_wal_segments"); got != float64(segs) {
		t.Errorf("tenure_wal_segments = %v, %d on disk", got, segs)
	}
	if got := f.value(t, "tenure_wal_bytes"); got != float64(bytes) {
		t.Errorf("tenure_wal_bytes = %v, %d on disk", got, bytes)
	}

	// The memory budget's gauges: what the partition's state holds, and
	// the budget.
	if got, want := f.value(t, "tenure_memory_held_bytes"), float64(e.n.Coordinator().Stats().HeldBytes); got != want || want <= 0 {
		t.Errorf("tenure_memory_held_bytes = %v, the node's state holds %v", got, want)
	}
	if got := f.value(t, "tenure_memory_budget_bytes"); got != 1<<30 {
		t.Errorf("tenure_memory_budget_bytes = %v, want %d", got, 1<<30)
	}

	// The queue's gauges: 2 never leased and the expired one waiting (the
	// latter for its retry), 3 completed, 1 failed.
	for st, want := range map[string]float64{"WAITING": 3, "LEASED": 0, "COMMITTED": 0, "COMPLETED": 3, "FAILED": 1, "DEAD": 0} {
		if got := f.value(t, "tenure_tasks", "namespace", "default", "queue", "emails", "state", st); got != want {
			t.Errorf("tenure_tasks %s = %v, want %v", st, got, want)
		}
	}
	if got := f.value(t, "tenure_queue_oldest_waiting_age_seconds", "namespace", "default", "queue", "emails"); got != 31 {
		t.Errorf("oldest waiting age = %v, want 31", got)
	}

	// A snapshot is timed and resets the age.
	clk.Advance(time.Minute)
	if _, err := e.admin.Snapshot(ctx, connect.NewRequest(&tenurev1.SnapshotRequest{})); err != nil {
		t.Fatal(err)
	}
	_, f = e.scrape(t)
	if got := f.value(t, "tenure_snapshot_duration_seconds"); got != 1 {
		t.Errorf("snapshots observed = %v, want 1", got)
	}
	if got := f.value(t, "tenure_snapshot_age_seconds"); got != 0 {
		t.Errorf("snapshot age right after one = %v, want 0", got)
	}

	// The same stale commit again: answered from memory, with no second
	// TaskCancelled, and counted again.
	if _, err := e.workers.Commit(ctx, stale); !leaseLost(err) {
		t.Fatalf("repeated commit by the expired lease: %v, want LEASE_LOST", err)
	}
	_, f = e.scrape(t)
	if d := counters(f)["tenure_refused_stale_attempts_total"] - base["tenure_refused_stale_attempts_total"]; d != 2 {
		t.Errorf("refused stale attempts moved by %v after the repeat, want 2", d)
	}
	hist, err := e.n.Coordinator().History(ctx, staleID)
	if err != nil {
		t.Fatal(err)
	}
	cancelled := 0
	for _, h := range hist {
		if _, ok := h.Record.(*state.TaskCancelled); ok {
			cancelled++
		}
	}
	if cancelled != 1 {
		t.Errorf("TaskCancelled records of the stale lease: %d, want 1 (a repeat is answered from memory)", cancelled)
	}

	// A restart replays everything and counts none of it.
	e.close()
	e = startEmbedded(t, dir, clk)
	body, f = e.scrape(t)
	checkMetrics(t, body)
	for name, v := range counters(f) {
		if v != 0 {
			t.Errorf("after a restart, %s = %v: replayed records counted", name, v)
		}
	}
	if got := f.value(t, "tenure_tasks", "namespace", "default", "queue", "emails", "state", "COMPLETED"); got != 3 {
		t.Errorf("after a restart, tenure_tasks COMPLETED = %v, want 3", got)
	}
	if f.find("tenure_replay_duration_seconds") == nil {
		t.Errorf("no tenure_replay_duration_seconds after a restart")
	}
}

// walFiles counts the segment files of a WAL directory and their bytes.
func walFiles(t *testing.T, dir string) (int, int64) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n, size := 0, int64(0)
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".wal" {
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n++
		size += info.Size()
	}
	return n, size
}
