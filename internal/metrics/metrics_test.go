package metrics_test

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/mysqllog"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
	"github.com/tenurehq/tenure/internal/wal"
)

// Metrics is every observer the packages below it define.
var (
	_ coordinator.Observer = (*metrics.Metrics)(nil)
	_ host.Observer        = (*metrics.Metrics)(nil)
	_ wal.Observer         = (*metrics.Metrics)(nil)
	_ mysqllog.Observer    = (*metrics.Metrics)(nil)
	_ server.Metrics       = (*metrics.Metrics)(nil)
)

// families is one scrape, parsed.
type families map[string]*dto.MetricFamily

// parse parses the text format of a scrape.
func parse(t *testing.T, r io.Reader) families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return fams
}

// scrape reads m's GET /metrics.
func scrape(t *testing.T, m *metrics.Metrics) families {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return parse(t, rec.Body)
}

// scrapeURL returns GET /metrics of the server at base: the raw text and
// parsed.
func scrapeURL(t *testing.T, base string) ([]byte, families) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s/metrics: %d %v\n%s", base, resp.StatusCode, err, body)
	}
	return body, parse(t, bytes.NewReader(body))
}

// find returns the metric of name whose labels are exactly labels
// (name=value pairs), or nil.
func (f families) find(name string, labels ...string) *dto.Metric {
	fam := f[name]
	if fam == nil {
		return nil
	}
	want := make(map[string]string)
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, m := range fam.GetMetric() {
		got := make(map[string]string)
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if maps.Equal(got, want) {
			return m
		}
	}
	return nil
}

// value returns the value of a counter or gauge, or the sample count of a
// histogram; it fails the test if the series is absent.
func (f families) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	m := f.find(name, labels...)
	if m == nil {
		t.Fatalf("no series %s%v in the scrape (has: %v)", name, labels, f.series(name))
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("%s%v is neither a counter, a gauge nor a histogram", name, labels)
	return 0
}

// series lists the label sets of name, for messages.
func (f families) series(name string) []string {
	var out []string
	for _, m := range f[name].GetMetric() {
		var ls []string
		for _, lp := range m.GetLabel() {
			ls = append(ls, lp.GetName()+"="+lp.GetValue())
		}
		out = append(out, "{"+strings.Join(ls, ",")+"}")
	}
	slices.Sort(out)
	return out
}

func task(namespace, queue string) *state.Task {
	return &state.Task{ID: "t", QueueKey: &state.QueueKey{Namespace: namespace, Queue: queue}}
}

func newMetrics(t *testing.T, cfg metrics.Config) *metrics.Metrics {
	t.Helper()
	m, err := metrics.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestQueueLabelsFoldPastMaxQueues: the first MaxQueues distinct queues
// keep their labels, whatever comes after them; every later queue counts
// under _other, and a queue seen before keeps its labels.
func TestQueueLabelsFoldPastMaxQueues(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, metrics.Config{MaxQueues: 2})
	for _, q := range [][2]string{{"ns1", "a"}, {"ns1", "b"}, {"ns2", "a"}, {"ns1", "a"}, {"ns3", "c"}, {"ns1", "b"}, {"ns2", "a"}} {
		m.Applied(&state.TaskCreated{}, task(q[0], q[1]))
	}
	m.Refused(task("ns4", "d"), state.ActionCommit)
	m.Refused(task("ns1", "a"), state.ActionCommit)
	f := scrape(t, m)
	want := map[[2]string][2]float64{ // submitted, refused
		{"ns1", "a"}:                   {2, 1},
		{"ns1", "b"}:                   {2, 0},
		{metrics.Other, metrics.Other}: {3, 1},
	}
	if got := f.series("tenure_tasks_submitted_total"); len(got) != len(want) {
		t.Fatalf("series of tenure_tasks_submitted_total: %v; want ns1/a, ns1/b and _other only", got)
	}
	for q, w := range want {
		if got := f.value(t, "tenure_tasks_submitted_total", "namespace", q[0], "queue", q[1]); got != w[0] {
			t.Errorf("submitted %v = %v, want %v", q, got, w[0])
		}
		if got := f.value(t, "tenure_refused_stale_attempts_total", "namespace", q[0], "queue", q[1]); got != w[1] {
			t.Errorf("refused %v = %v, want %v", q, got, w[1])
		}
	}
}

// TestEventsByRecordType: each record type counts in its own counter;
// the others (and types this package does not know) count in none.
func TestEventsByRecordType(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, metrics.Config{})
	tk := task("default", "q")
	recs := []state.Record{
		&state.TaskCreated{}, &state.TaskCreated{},
		&state.LeaseGranted{}, &state.LeaseGranted{}, &state.LeaseGranted{},
		&state.TaskCommitted{},
		&state.TaskCompleted{}, &state.TaskCompleted{},
		&state.TaskFailed{},
		&state.LeaseExpired{}, &state.LeaseExpired{},
		&state.TaskDead{},
		&state.TaskDeadlineExceeded{}, &state.TaskDeadlineExceeded{},
		// Counted in none of them.
		&state.LeaseExtended{}, &state.ExecutionStarted{}, &state.TaskCancelled{},
	}
	for _, r := range recs {
		m.Applied(r, tk)
	}
	m.Applied(&state.TasksPurged{}, nil)
	m.Applied(&state.TaskCreated{}, nil) // no task: not counted
	m.Applied(&state.Fence{}, nil)
	m.Applied(&state.Fence{}, nil)
	// A schedule's fire submits a task; a skip submits none.
	m.Applied(&state.ScheduleFired{Namespace: "default", Queue: "q"}, tk)
	m.Applied(&state.ScheduleSkipped{Namespace: "default", Queue: "q"}, nil)
	m.Applied(&state.ScheduleSkipped{Namespace: "default", Queue: "q"}, nil)
	f := scrape(t, m)
	for name, want := range map[string]float64{
		"tenure_schedule_fires_total":          1,
		"tenure_schedule_skips_total":          2,
		"tenure_tasks_submitted_total":         3,
		"tenure_tasks_leased_total":            3,
		"tenure_tasks_committed_total":         1,
		"tenure_tasks_completed_total":         2,
		"tenure_tasks_failed_total":            1,
		"tenure_leases_expired_total":          2,
		"tenure_tasks_killed_total":            1,
		"tenure_refused_stale_attempts_total":  0,
		"tenure_tasks_deadline_exceeded_total": 2,
	} {
		if got := f.value(t, name, "namespace", "default", "queue", "q"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// The epoch counter is a cluster metric: registered by ConfigureMember
	// only, it counted the fences all the same.
	if f["tenure_cluster_epoch_changes_total"] != nil {
		t.Errorf("tenure_cluster_epoch_changes_total is served without ConfigureMember")
	}
}

// TestQueueCollector: samples of one queue (its partitions) are summed,
// every state is reported, the shares of a queue's limits add up, queues
// past the limit fold into _other, where the oldest age is the largest and
// paused counts the paused queues.
func TestQueueCollector(t *testing.T) {
	t.Parallel()
	samples := []metrics.QueueSample{
		{Namespace: "default", Queue: "emails", Tasks: map[string]int{"WAITING": 2, "LEASED": 1}, OldestWaitingAge: 5 * time.Second, Leases: 1, Paused: true,
			MaxConcurrency: 3, Rate: 2.5},
		{Namespace: "default", Queue: "sms", Tasks: map[string]int{"COMPLETED": 4}},
		{Namespace: "default", Queue: "emails", Tasks: map[string]int{"WAITING": 3}, OldestWaitingAge: 9 * time.Second, Leases: 2, Paused: true,
			MaxConcurrency: 2, Rate: 2.5},
		{Namespace: "a", Queue: "x", Tasks: map[string]int{"WAITING": 1}, OldestWaitingAge: 4 * time.Second, Paused: true},
		{Namespace: "b", Queue: "y", Tasks: map[string]int{"DEAD": 2, "ARCHIVED": 1}, OldestWaitingAge: 7 * time.Second, Leases: 5},
		{Namespace: "a", Queue: "x", Tasks: map[string]int{"WAITING": 1}, Paused: true},
	}
	m := newMetrics(t, metrics.Config{MaxQueues: 2, Queues: func() []metrics.QueueSample { return samples }})
	f := scrape(t, m)
	type q = [2]string
	other := q{metrics.Other, metrics.Other}
	wantTasks := map[q]map[string]float64{
		{"default", "emails"}: {"WAITING": 5, "LEASED": 1},
		{"default", "sms"}:    {"COMPLETED": 4},
		other:                 {"WAITING": 2, "DEAD": 2, "ARCHIVED": 1},
	}
	for k, states := range wantTasks {
		for _, st := range []string{"WAITING", "LEASED", "COMMITTED", "COMPLETED", "FAILED", "DEAD", "BLOCKED"} {
			if got := f.value(t, "tenure_tasks", "namespace", k[0], "queue", k[1], "state", st); got != states[st] {
				t.Errorf("tenure_tasks %v %s = %v, want %v", k, st, got, states[st])
			}
		}
	}
	if got := f.value(t, "tenure_tasks", "namespace", other[0], "queue", other[1], "state", "ARCHIVED"); got != 1 {
		t.Errorf("a state this package does not know: %v, want 1", got)
	}
	if n := len(f.series("tenure_tasks")); n != 3*7+1 {
		t.Errorf("tenure_tasks has %d series, want %d: %v", n, 3*7+1, f.series("tenure_tasks"))
	}
	for _, c := range []struct {
		name string
		k    q
		want float64
	}{
		{"tenure_queue_oldest_waiting_age_seconds", q{"default", "emails"}, 9},
		{"tenure_queue_oldest_waiting_age_seconds", q{"default", "sms"}, 0},
		{"tenure_queue_oldest_waiting_age_seconds", other, 7},
		{"tenure_queue_active_leases", q{"default", "emails"}, 3},
		{"tenure_queue_active_leases", other, 5},
		{"tenure_queue_paused", q{"default", "emails"}, 1}, // paused in both partitions: one queue
		{"tenure_queue_paused", q{"default", "sms"}, 0},
		{"tenure_queue_paused", other, 1},                           // a/x
		{"tenure_queue_max_concurrency", q{"default", "emails"}, 5}, // the shares of two partitions
		{"tenure_queue_max_concurrency", q{"default", "sms"}, 0},
		{"tenure_queue_rate_limit", q{"default", "emails"}, 5},
		{"tenure_queue_rate_limit", q{"default", "sms"}, 0},
	} {
		if got := f.value(t, c.name, "namespace", c.k[0], "queue", c.k[1]); got != c.want {
			t.Errorf("%s %v = %v, want %v", c.name, c.k, got, c.want)
		}
	}
	// The scrape took the label slots: a later event of another queue
	// folds.
	m.Applied(&state.TaskCreated{}, task("c", "z"))
	f = scrape(t, m)
	if got := f.value(t, "tenure_tasks_submitted_total", "namespace", metrics.Other, "queue", metrics.Other); got != 1 {
		t.Errorf("a queue seen after the scrape filled the labels: _other = %v, want 1", got)
	}
}

// TestKeyMetrics: a queue with keys reports its keys, those held back by
// each limit and the holds so far, summed over partitions, with a label
// per limit and none per key; a queue without keys reports none of them.
func TestKeyMetrics(t *testing.T) {
	t.Parallel()
	samples := []metrics.QueueSample{
		{Namespace: "default", Queue: "payments", Tasks: map[string]int{"WAITING": 9}, Keyed: true, Keys: 4,
			KeysHeld: map[string]int{"concurrency": 2, "rate": 0, "order": 1}, KeyHolds: map[string]uint64{"concurrency": 7, "rate": 3, "order": 1}},
		{Namespace: "default", Queue: "payments", Tasks: map[string]int{"WAITING": 1}, Keyed: true, Keys: 1,
			KeysHeld: map[string]int{"rate": 1}, KeyHolds: map[string]uint64{"rate": 2}},
		{Namespace: "default", Queue: "sms", Tasks: map[string]int{"WAITING": 1}},
	}
	f := scrape(t, newMetrics(t, metrics.Config{Queues: func() []metrics.QueueSample { return samples }}))
	if got := f.value(t, "tenure_queue_keys", "namespace", "default", "queue", "payments"); got != 5 {
		t.Errorf("tenure_queue_keys = %v, want 5", got)
	}
	for _, c := range []struct {
		name, reason string
		want         float64
	}{
		{"tenure_queue_keys_held", "concurrency", 2}, {"tenure_queue_keys_held", "rate", 1}, {"tenure_queue_keys_held", "order", 1},
		{"tenure_queue_key_holds_total", "concurrency", 7}, {"tenure_queue_key_holds_total", "rate", 5}, {"tenure_queue_key_holds_total", "order", 1},
	} {
		if got := f.value(t, c.name, "namespace", "default", "queue", "payments", "reason", c.reason); got != c.want {
			t.Errorf("%s %s = %v, want %v", c.name, c.reason, got, c.want)
		}
	}
	for _, name := range []string{"tenure_queue_keys", "tenure_queue_keys_held", "tenure_queue_key_holds_total"} {
		for _, sr := range f.series(name) {
			if strings.Contains(sr, "sms") || strings.Contains(sr, "key=") {
				t.Errorf("%s has series %s", name, sr)
			}
		}
	}
}

// TestNoQueueSource: without Config.Queues the per-queue gauges are
// absent, not zero.
func TestNoQueueSource(t *testing.T) {
	t.Parallel()
	f := scrape(t, newMetrics(t, metrics.Config{}))
	for _, name := range []string{"tenure_tasks", "tenure_queue_oldest_waiting_age_seconds", "tenure_queue_active_leases", "tenure_queue_paused",
		"tenure_queue_max_concurrency", "tenure_queue_rate_limit"} {
		if f[name] != nil {
			t.Errorf("%s is served without a source", name)
		}
	}
	if f["go_goroutines"] == nil || f["process_cpu_seconds_total"] == nil {
		t.Errorf("the Go and process collectors are missing")
	}
}

// TestSnapshotAgeAndReplay: the age is that of the partition longest
// without a snapshot, counted from its opening until its first; a
// reopen keeps it; a closed partition leaves it.
func TestSnapshotAgeAndReplay(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	m := newMetrics(t, metrics.Config{Clock: clk})
	h1, h2 := new(host.Host), new(host.Host)
	age := func() float64 { return scrape(t, m).value(t, "tenure_snapshot_age_seconds") }
	if got := age(); got != 0 {
		t.Fatalf("age with no partition = %v, want 0", got)
	}
	m.Opened(h1, 2*time.Second)
	if got := scrape(t, m).value(t, "tenure_replay_duration_seconds"); got != 2 {
		t.Errorf("replay duration = %v, want 2", got)
	}
	clk.Advance(10 * time.Second)
	m.Opened(h2, 500*time.Millisecond)
	clk.Advance(5 * time.Second)
	if got := age(); got != 15 {
		t.Errorf("age = %v, want 15 (h1, opened 15s ago)", got)
	}
	m.Snapshotted(h1, 3*time.Second, clk.Now())
	m.Purged(h1, coordinator.PurgeResult{Purged: 120, Records: 2, Took: 40 * time.Millisecond})
	m.Purged(h2, coordinator.PurgeResult{Took: time.Millisecond})
	if got := age(); got != 5 {
		t.Errorf("age after h1's snapshot = %v, want 5 (h2)", got)
	}
	clk.Advance(time.Second)
	m.Opened(h2, time.Second) // a reopen: the age goes on
	if got := age(); got != 6 {
		t.Errorf("age after h2's reopen = %v, want 6", got)
	}
	m.Closed(h2)
	if got := age(); got != 1 {
		t.Errorf("age after h2 closed = %v, want 1 (h1)", got)
	}
	f := scrape(t, m)
	if got := f.value(t, "tenure_snapshot_duration_seconds"); got != 1 {
		t.Errorf("snapshots observed = %v, want 1", got)
	}
	if got := f.find("tenure_snapshot_duration_seconds").GetHistogram().GetSampleSum(); got != 3 {
		t.Errorf("snapshot duration sum = %v, want 3", got)
	}
	if got := f.value(t, "tenure_purge_duration_seconds"); got != 2 {
		t.Errorf("purges observed = %v, want 2", got)
	}
	if got := f.find("tenure_purge_duration_seconds").GetHistogram().GetSampleSum(); math.Abs(got-0.041) > 1e-9 {
		t.Errorf("purge duration sum = %v, want 0.041", got)
	}
	if got := f.value(t, "tenure_tasks_purged_total"); got != 120 {
		t.Errorf("tasks purged = %v, want 120", got)
	}
	if got := f.value(t, "tenure_replay_duration_seconds"); got != 1 {
		t.Errorf("replay duration = %v, want 1 (the last opening)", got)
	}
}

// TestLimitHits: each hit of a server limit counts once under its name;
// a limit never hit has no series.
func TestLimitHits(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, metrics.Config{})
	m.LimitHit(server.LimitConnections)
	m.LimitHit(server.LimitConnections)
	m.LimitHit(server.LimitLongPolls)
	f := scrape(t, m)
	if got := f.value(t, "tenure_limit_hits_total", "limit", server.LimitConnections); got != 2 {
		t.Errorf("connections hits = %v, want 2", got)
	}
	if got := f.value(t, "tenure_limit_hits_total", "limit", server.LimitLongPolls); got != 1 {
		t.Errorf("long_polls hits = %v, want 1", got)
	}
	if f.find("tenure_limit_hits_total", "limit", server.LimitRequestBytes) != nil {
		t.Errorf("request_bytes has a series without a hit")
	}
}

// TestMaxQueuesChecked: a bad limit is refused with its range and the
// default.
func TestMaxQueuesChecked(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, metrics.MaxMaxQueues + 1} {
		_, err := metrics.New(metrics.Config{MaxQueues: n})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("1..%d", metrics.MaxMaxQueues)) || !strings.Contains(err.Error(), "default of 100") {
			t.Errorf("MaxQueues %d: %v", n, err)
		}
	}
	if err := metrics.CheckMaxQueues(0); err == nil {
		t.Errorf("CheckMaxQueues(0) accepted")
	}
	if err := metrics.CheckMaxQueues(metrics.MaxMaxQueues); err != nil {
		t.Errorf("CheckMaxQueues(%d): %v", metrics.MaxMaxQueues, err)
	}
}

// promtool returns the path of promtool, or skips the test.
func promtool(t *testing.T) string {
	t.Helper()
	return lookTool(t, "promtool")
}

// checkMetrics runs `promtool check metrics` on a scrape, in a subtest
// that skips without promtool (the rest of the test goes on).
func checkMetrics(t *testing.T, body []byte) {
	t.Helper()
	t.Run("promtool check metrics", func(t *testing.T) {
		out, err := runTool(t, promtool(t), bytes.NewReader(body), "check", "metrics")
		if err != nil {
			t.Fatalf("promtool check metrics: %v\n%s\n--- scrape:\n%s", err, out, body)
		}
	})
}

// TestCrossPartitionMetrics: the pending deliveries and remote edges of the
// partitions a node serves are summed into one series each, the oldest
// delivery's age is the largest; a TasksDelivered counts its tasks, a
// DependencyResolved one edge, both registered by ConfigureMember only.
func TestCrossPartitionMetrics(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, metrics.Config{})
	var figures []coordinator.CrossPartition
	m.WatchCrossPartition(func() []coordinator.CrossPartition { return figures })
	m.ConfigureMember(&member.Config{})
	gauges := func(when string, deliveries, oldest, edges float64) {
		t.Helper()
		f := scrape(t, m)
		for name, want := range map[string]float64{
			"tenure_cluster_deliveries_pending":          deliveries,
			"tenure_cluster_oldest_delivery_age_seconds": oldest,
			"tenure_cluster_remote_edges_pending":        edges,
		} {
			if got := f.value(t, name); got != want {
				t.Errorf("%s: %s = %v, want %v", when, name, got, want)
			}
		}
	}
	gauges("no partition", 0, 0, 0)
	figures = []coordinator.CrossPartition{
		{Deliveries: 3, OldestDelivery: 40 * time.Second, RemoteEdges: 1},
		{},
		{Deliveries: 2, OldestDelivery: 95 * time.Second, RemoteEdges: 4},
	}
	gauges("three partitions", 5, 95, 5)

	m.Applied(&state.TasksDelivered{TaskIDs: []string{"a", "b", "c"}}, nil)
	m.Applied(&state.TasksDelivered{TaskIDs: []string{"d"}}, nil)
	m.Applied(&state.DependencyResolved{TaskID: "x", Dependency: "a"}, task("default", "q"))
	m.Applied(&state.DependencyResolved{TaskID: "y", Dependency: "a"}, task("default", "q"))
	f := scrape(t, m)
	if got := f.value(t, "tenure_cluster_tasks_delivered_total"); got != 4 {
		t.Errorf("tenure_cluster_tasks_delivered_total = %v, want 4", got)
	}
	if got := f.value(t, "tenure_cluster_remote_edges_resolved_total"); got != 2 {
		t.Errorf("tenure_cluster_remote_edges_resolved_total = %v, want 2", got)
	}
}
