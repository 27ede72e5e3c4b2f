package metrics_test

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// clusterNode is a member with metrics behind the API on a loopback port,
// as `tenure server --mysql` runs it.
type clusterNode struct {
	id  string
	m   *member.Member
	mx  *metrics.Metrics
	url string
}

const clusterPartitions = 4

func startClusterNode(t *testing.T, dsn, id string) *clusterNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mx := newMetrics(t, metrics.Config{})
	cfg := member.Config{
		DB:             clustertest.Open(t, dsn),
		NodeID:         id,
		Advertise:      ln.Addr().String(),
		Partitions:     clusterPartitions,
		AssignInterval: 50 * time.Millisecond,
		ProbeInterval:  50 * time.Millisecond,
		Election:       election.Config{TTL: 3 * time.Second, CheckInterval: 50 * time.Millisecond},
		Registry:       registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
		Coordinator:    coordinator.Config{ExpiryScanInterval: 50 * time.Millisecond},
	}
	mx.ConfigureMember(&cfg)
	m, err := member.Start(t.Context(), cfg)
	if err != nil {
		ln.Close()
		t.Fatalf("start %s: %v", id, err)
	}
	mx.WatchMember(m)
	h := server.New(m, server.Options{Snapshots: m, Metrics: mx}).Serve(ln, server.HTTPConfig{})
	t.Cleanup(func() {
		h.Close()
		m.Close()
	})
	return &clusterNode{id: id, m: m, mx: mx, url: h.URL()}
}

func (n *clusterNode) scrape(t *testing.T) ([]byte, families) {
	t.Helper()
	return scrapeURL(t, n.url)
}

// TestClusterMetrics: two cluster nodes on MariaDB. Exactly one reports
// holding the coordinator lock; each reports the partitions it serves and
// the epochs it fenced; a node forwards exactly the submits whose
// partition the other serves and counts them; database commits are timed;
// the embedded WAL's metrics are absent. promtool accepts both scrapes. A
// workflow chain over the partitions is delivered and counted, and its
// links between partitions are remote edges pending.
func TestClusterMetrics(t *testing.T) {
	t.Parallel()
	dsn, db := clustertest.DB(t)
	a := startClusterNode(t, dsn, "a")
	b := startClusterNode(t, dsn, "b")
	ctx := t.Context()
	tasksA := tenurev1connect.NewTaskServiceClient(http.DefaultClient, a.url)
	// The first submit creates the queue; its partitions go to both nodes.
	if _, err := tasksA.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "emails", RequestId: "first"})); err != nil {
		t.Fatal(err)
	}
	owners := func() map[uint64]string {
		as, err := partition.New(db).List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := make(map[uint64]string)
		for _, as := range as {
			out[as.ID] = as.Owner
		}
		return out
	}
	clustertest.Eventually(t, "both nodes serve half of the partitions", func() bool {
		return a.m.Owned() == clusterPartitions/2 && b.m.Owned() == clusterPartitions/2
	})
	byA := 0
	for _, p := range owners() {
		if p == "a" {
			byA++
		}
	}
	if byA != clusterPartitions/2 {
		t.Fatalf("the partition map gives a %d partitions, it serves %d", byA, a.m.Owned())
	}
	_, f := a.scrape(t)
	base := f.find("tenure_cluster_forwarded_requests_total", "procedure", tenurev1connect.TaskServiceSubmitProcedure).GetCounter().GetValue()

	viaB := 0
	own := owners()
	for i := range 20 {
		resp, err := tasksA.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "emails", RequestId: fmt.Sprintf("r%d", i)}))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.Msg.GetTask().GetTaskId()
		p, err := strconv.ParseUint(id[strings.LastIndex(id, "-p")+2:], 10, 64)
		if err != nil {
			t.Fatalf("task id %q: %v", id, err)
		}
		if own[p] == "b" {
			viaB++
		}
	}
	if viaB == 0 || viaB == 20 {
		t.Fatalf("%d of 20 submits went to b's partitions: the request ids do not spread", viaB)
	}

	coordinators := 0
	for _, n := range []*clusterNode{a, b} {
		body, f := n.scrape(t)
		checkMetrics(t, body)
		coordinators += int(f.value(t, "tenure_cluster_coordinator"))
		if got := f.value(t, "tenure_cluster_partitions"); got != clusterPartitions/2 {
			t.Errorf("%s: tenure_cluster_partitions = %v, want %d", n.id, got, clusterPartitions/2)
		}
		if got := f.value(t, "tenure_cluster_epoch_changes_total"); got < clusterPartitions/2 {
			t.Errorf("%s: tenure_cluster_epoch_changes_total = %v, below the %d partitions it took over", n.id, got, clusterPartitions/2)
		}
		if got := f.value(t, "tenure_cluster_db_commit_duration_seconds"); got == 0 {
			t.Errorf("%s: no database commit observed", n.id)
		}
		if got := f.value(t, "tenure_wal_batch_records"); got == 0 {
			t.Errorf("%s: no group commit observed", n.id)
		}
		for _, name := range []string{"tenure_wal_fsync_duration_seconds", "tenure_wal_append_duration_seconds", "tenure_wal_bytes", "tenure_wal_segments"} {
			if f[name] != nil {
				t.Errorf("%s: %s is served in cluster mode", n.id, name)
			}
		}
		if n == a {
			if got := f.value(t, "tenure_cluster_forwarded_requests_total", "procedure", tenurev1connect.TaskServiceSubmitProcedure) - base; got != float64(viaB) {
				t.Errorf("a forwarded %v submits, want %d (those of b's partitions)", got, viaB)
			}
		}
	}
	if coordinators != 1 {
		t.Errorf("%d nodes report holding the coordinator lock, want 1", coordinators)
	}

	// A workflow batch over the partitions, a chain: its home delivers the
	// tasks of the other partitions (counted once, by the home's node),
	// and each link between two partitions is a remote edge pending.
	batch := &tenurev1.SubmitBatchRequest{WorkflowId: "chain"}
	for i := range 8 {
		r := &tenurev1.SubmitRequest{Queue: "emails", RequestId: fmt.Sprintf("w%d", i)}
		if i > 0 {
			r.DependsOn = []string{fmt.Sprintf("w%d", i-1)}
		}
		batch.Requests = append(batch.Requests, r)
	}
	resp, err := tasksA.SubmitBatch(ctx, connect.NewRequest(batch))
	if err != nil {
		t.Fatal(err)
	}
	part := func(id string) string { return id[strings.LastIndex(id, "-p"):] }
	ids := resp.Msg.GetTaskIds()
	delivered, remote := 0, 0
	for i, id := range ids {
		if part(id) != part(ids[0]) {
			delivered++
		}
		if i > 0 && part(id) != part(ids[i-1]) {
			remote++
		}
	}
	if delivered == 0 {
		t.Fatalf("the workflow's tasks %v are all in one partition: the request ids do not spread", ids)
	}
	sum := func(f1, f2 families, name string) float64 { return f1.value(t, name) + f2.value(t, name) }
	clustertest.Eventually(t, "the workflow's tasks delivered, its remote edges pending", func() bool {
		_, fa := a.scrape(t)
		_, fb := b.scrape(t)
		return sum(fa, fb, "tenure_cluster_tasks_delivered_total") == float64(delivered) &&
			sum(fa, fb, "tenure_cluster_deliveries_pending") == 0 &&
			sum(fa, fb, "tenure_cluster_oldest_delivery_age_seconds") == 0 &&
			sum(fa, fb, "tenure_cluster_remote_edges_pending") == float64(remote) &&
			sum(fa, fb, "tenure_cluster_remote_edges_resolved_total") == 0
	})
}
