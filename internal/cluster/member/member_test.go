package member_test

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/cluster/remote"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
)

// testNode is a member behind the API on a loopback port.
type testNode struct {
	id  string
	m   *member.Member
	url string
	srv *http.Server
}

func (n *testNode) close() {
	n.srv.Close()
	n.m.Close()
}

func startNode(t *testing.T, db *sql.DB, id string) *testNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := member.Start(t.Context(), member.Config{
		DB:             db,
		NodeID:         id,
		Advertise:      ln.Addr().String(),
		Partitions:     4,
		AssignInterval: 50 * time.Millisecond,
		Election:       election.Config{TTL: 3 * time.Second, CheckInterval: 50 * time.Millisecond},
		Registry:       registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
		Coordinator:    coordinator.Config{ExpiryScanInterval: 50 * time.Millisecond},
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		ln.Close()
		t.Fatalf("start %s: %v", id, err)
	}
	srv := &http.Server{Handler: server.New(m, server.Options{}).Handler(), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	n := &testNode{id: id, m: m, url: "http://" + ln.Addr().String(), srv: srv}
	t.Cleanup(n.close)
	return n
}

func startCluster(t *testing.T, n int) (*sql.DB, []*testNode) {
	t.Helper()
	_, db := clustertest.DB(t)
	var nodes []*testNode
	for i := range n {
		nodes = append(nodes, startNode(t, db, fmt.Sprintf("n%d", i+1)))
	}
	return db, nodes
}

// owners returns partition id → owner of every partition.
func owners(t *testing.T, db *sql.DB) map[uint64]partition.Assignment {
	t.Helper()
	as, err := partition.New(db).List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[uint64]partition.Assignment)
	for _, a := range as {
		out[a.ID] = a
	}
	return out
}

// eventually polls cond until it holds; the deadline only ends a hung test.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func partitionOf(t *testing.T, taskID string) uint64 {
	t.Helper()
	var id uint64
	if _, err := fmt.Sscanf(taskID[26:], "-p%d", &id); err != nil {
		t.Fatalf("task id %q carries no partition: %v", taskID, err)
	}
	return id
}

func TestRoutingAcrossNodes(t *testing.T) {
	db, nodes := startCluster(t, 3)
	a, b, c := nodes[0].m, nodes[1].m, nodes[2].m
	ctx := t.Context()

	// Submits through one node land in every partition, wherever it is
	// served; a retried request id through another node is deduplicated.
	var ids []string
	for i := range 40 {
		res, err := a.Submit(ctx, coordinator.SubmitRequest{Queue: "q", Payload: []byte(fmt.Sprint(i)), RequestID: fmt.Sprintf("r%d", i)})
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		ids = append(ids, res.Task.ID)
	}
	parts := map[uint64]bool{}
	for _, id := range ids {
		parts[partitionOf(t, id)] = true
	}
	if len(parts) != 4 {
		t.Fatalf("40 submits landed in %d of 4 partitions", len(parts))
	}
	eventually(t, "partitions spread over the three nodes", func() bool {
		per := map[string]int{}
		for _, as := range owners(t, db) {
			per[as.Owner]++
		}
		return len(per) == 3
	})
	for i, id := range ids {
		res, err := b.Submit(ctx, coordinator.SubmitRequest{Queue: "q", Payload: []byte("other"), RequestID: fmt.Sprintf("r%d", i)})
		if err != nil || !res.Duplicate || res.Task.ID != id {
			t.Fatalf("resubmit r%d through another node: %+v, %v; want duplicate of %s", i, res, err, id)
		}
		got, err := c.Get(ctx, id)
		if err != nil || string(got.Payload) != fmt.Sprint(i) {
			t.Fatalf("get %s through a third node: %v, %v", id, got, err)
		}
	}

	// A batch with one bad item creates nothing, on any partition.
	bad := []coordinator.SubmitRequest{{Queue: "q", RequestID: "b1"}, {Queue: "q", ExecutionWindow: -time.Second}}
	if _, err := b.SubmitBatch(ctx, bad); !errors.Is(err, coordinator.ErrInvalidArgument) || !strings.Contains(err.Error(), "requests[1].execution_window") {
		t.Fatalf("bad batch: %v", err)
	}

	if _, err := b.Submit(ctx, coordinator.SubmitRequest{Queue: "q", ExecutionWindow: -time.Second}); !errors.Is(err, coordinator.ErrInvalidArgument) ||
		!strings.HasPrefix(err.Error(), "execution_window") && !strings.Contains(err.Error(), " execution_window") || strings.Contains(err.Error(), "requests[") {
		t.Fatalf("bad submit: %v, want an invalid argument naming execution_window", err)
	}

	// Listing walks every partition, page by page, whoever owns them.
	var listed []string
	var after uint64
	for pages := 0; ; pages++ {
		ts, next, err := c.List(ctx, coordinator.ListFilter{Queue: "q", Limit: 7, After: after})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, task := range ts {
			listed = append(listed, task.ID)
		}
		if next == 0 {
			break
		}
		if pages > 20 {
			t.Fatal("listing does not end")
		}
		after = next
	}
	slices.Sort(listed)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %d tasks, want the %d submitted (no more, no fewer)", len(listed), len(want))
	}

	// One worker on one node leases from every partition; completions go
	// back through another node as one batch.
	var leases []coordinator.Lease
	eventually(t, "all 40 tasks leased through one node", func() bool {
		ls, err := c.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 100, Wait: 100 * time.Millisecond})
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		leases = append(leases, ls...)
		return len(leases) >= 40
	})
	if len(leases) != 40 {
		t.Fatalf("leased %d tasks, want 40", len(leases))
	}
	items := make([]coordinator.CompleteItem, len(leases))
	for i, l := range leases {
		items[i] = coordinator.CompleteItem{TaskID: l.TaskID, LeaseID: l.LeaseID, Result: []byte("ok")}
	}
	items = append(items, coordinator.CompleteItem{TaskID: "nonsense", LeaseID: "x"})
	errs, err := a.CompleteBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs[:40] {
		if e != nil {
			t.Fatalf("complete %s: %v", items[i].TaskID, e)
		}
	}
	if !errors.Is(errs[40], coordinator.ErrNotFound) {
		t.Fatalf("complete of a foreign id: %v, want not found", errs[40])
	}
	for _, id := range ids {
		got, err := b.Get(ctx, id)
		if err != nil || got.State != state.Completed || string(got.Result) != "ok" {
			t.Fatalf("task %s after completion: %+v, %v", id, got, err)
		}
	}
}

func TestForwardedRequestIsNeverForwardedAgain(t *testing.T) {
	db, nodes := startCluster(t, 2)
	ctx := t.Context()
	res, err := nodes[0].m.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Task.ID
	var owner string
	eventually(t, "the task's partition owned", func() bool {
		owner = owners(t, db)[partitionOf(t, id)].Owner
		return owner != ""
	})
	// A request marked forwarded, sent to the node that does not own the
	// partition, is refused as unavailable instead of hopping again.
	other := nodes[0]
	if other.id == owner {
		other = nodes[1]
	}
	fw := remote.New(other.url, http.DefaultClient, "test")
	_, err = fw.Get(ctx, id)
	if other.m.Err() == nil && !errors.Is(err, coordinator.ErrUnavailable) {
		// The partition may have moved to other in between; then it is
		// served, which is also correct.
		if owners(t, db)[partitionOf(t, id)].Owner != other.id {
			t.Fatalf("forwarded get on a node that does not own the partition: %v, want unavailable", err)
		}
	}
	// Without the mark, the same node forwards and answers.
	if got, err := other.m.Get(ctx, id); err != nil || got.ID != id {
		t.Fatalf("get through a non-owner: %v, %v", got, err)
	}
}

func TestLongPollSeesTasksOfOtherNodes(t *testing.T) {
	db, nodes := startCluster(t, 2)
	ctx := t.Context()
	// Create the queue and wait until each node owns two partitions.
	if _, err := nodes[0].m.Submit(ctx, coordinator.SubmitRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two partitions each", func() bool {
		per := map[string]int{}
		for _, a := range owners(t, db) {
			per[a.Owner]++
		}
		return per["n1"] == 2 && per["n2"] == 2
	})
	if ls, err := nodes[1].m.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "q", Wait: 5 * time.Second}); err != nil || len(ls) != 1 {
		t.Fatalf("lease of the first task: %v, %v", ls, err)
	}
	// A worker waits on n2; tasks submitted through n1 into partitions of
	// either node reach it.
	for i := range 8 {
		got := make(chan []coordinator.Lease, 1)
		go func() {
			ls, err := nodes[1].m.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "q", Wait: 20 * time.Second})
			if err != nil {
				t.Errorf("lease: %v", err)
			}
			got <- ls
		}()
		res, err := nodes[0].m.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: fmt.Sprint("late", i)})
		if err != nil {
			t.Fatal(err)
		}
		ls := <-got
		if len(ls) != 1 || ls[0].TaskID != res.Task.ID {
			t.Fatalf("long-poll %d got %v, want task %s", i, ls, res.Task.ID)
		}
	}
}

func TestGracefulLeaveMovesPartitions(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx := t.Context()
	var ids []string
	for i := range 20 {
		res, err := nodes[1].m.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: fmt.Sprint(i), Payload: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Task.ID)
	}
	eventually(t, "every node owns a partition", func() bool {
		per := map[string]int{}
		for _, a := range owners(t, db) {
			per[a.Owner]++
		}
		return len(per) == 3
	})
	before := owners(t, db)
	nodes[0].close()
	eventually(t, "n1's partitions moved", func() bool {
		for _, a := range owners(t, db) {
			if a.Owner == "n1" || a.Owner == "" {
				return false
			}
		}
		return true
	})
	after := owners(t, db)
	for id, a := range after {
		if before[id].Owner == "n1" && a.Epoch <= before[id].Epoch {
			t.Fatalf("partition %s moved without a higher epoch: %d → %d", a.Key, before[id].Epoch, a.Epoch)
		}
		if before[id].Owner != "n1" && a.Owner != before[id].Owner {
			t.Fatalf("partition %s of a staying node moved (%s → %s): not sticky", a.Key, before[id].Owner, a.Owner)
		}
	}
	for i, id := range ids {
		got, err := nodes[2].m.Get(ctx, id)
		if err != nil || got.Payload[0] != byte(i) {
			t.Fatalf("task %s after its owner left: %v, %v", id, got, err)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestReadFromAStaleCopyIsRefused(t *testing.T) {
	_, db := clustertest.DB(t)
	ctx := t.Context()
	// The queue exists before the node, so the coordinator's first round
	// (at its election) assigns it.
	if err := partition.New(db).EnsureQueue(ctx, "default", "q", 1); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The node checks its assignments only when the test says so.
	m, err := member.Start(t.Context(), member.Config{
		DB: db, NodeID: "n1", Advertise: ln.Addr().String(), Partitions: 1,
		AssignInterval: time.Minute, AssignWait: time.Minute,
		Election: election.Config{TTL: 3 * time.Second, CheckInterval: 50 * time.Millisecond},
		Registry: registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	eventually(t, "the partition assigned", func() bool {
		for _, a := range owners(t, db) {
			return a.Owner == "n1"
		}
		return false
	})
	m.Reconcile(ctx)
	res, err := m.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Task.ID
	if _, err := m.Get(ctx, id); err != nil {
		t.Fatalf("get while serving: %v", err)
	}
	// The partition changes hands behind the node's back (its epoch moves
	// on): before the node notices, its copy must not answer reads.
	bump := func() {
		if _, err := db.ExecContext(ctx, "UPDATE partitions SET epoch = epoch + 1"); err != nil {
			t.Fatal(err)
		}
	}
	bump()
	if _, err := m.Get(ctx, id); !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("get from a stale copy: %v, want unavailable", err)
	}
	// The refused read made the node check its assignments: it reopens the
	// partition at the new epoch, from the log.
	eventually(t, "reopened at the new epoch", func() bool {
		_, err := m.Get(ctx, id)
		return err == nil
	})
	if _, _, err := m.List(ctx, coordinator.ListFilter{Queue: "q"}); err != nil {
		t.Fatalf("list after reopening: %v", err)
	}

	// Again, and now a write: the log's epoch check fences it, it fails and
	// acknowledges nothing, and the node reopens the partition.
	bump()
	if _, err := m.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: "b"}); !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("submit through a stale copy: %v, want unavailable", err)
	}
	var res2 coordinator.SubmitResult
	eventually(t, "a submit after reopening", func() bool {
		res2, err = m.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: "b"})
		return err == nil
	})
	if res2.Duplicate {
		t.Fatalf("the refused submit left a task behind: %+v", res2)
	}
	if got, err := m.Get(ctx, id); err != nil || got.RequestID != "a" {
		t.Fatalf("get after reopening: %+v, %v", got, err)
	}
}

func TestSnapshotsCompactAndANewOwnerStartsFromThem(t *testing.T) {
	_, db := clustertest.DB(t)
	ctx := t.Context()
	start := func(id string) (*member.Member, func()) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m, err := member.Start(ctx, member.Config{
			DB: db, NodeID: id, Advertise: ln.Addr().String(), Partitions: 1,
			AssignInterval:       20 * time.Millisecond,
			SnapshotEveryRecords: 50,
			Election:             election.Config{TTL: 3 * time.Second, CheckInterval: 20 * time.Millisecond},
			Registry:             registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
		})
		if err != nil {
			t.Fatal(err)
		}
		return m, func() { m.Close(); ln.Close() }
	}
	m1, stop1 := start("n1")
	var ids []string
	for i := range 300 {
		res, err := m1.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: fmt.Sprint(i), Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Task.ID)
	}
	count := func(q string) int {
		var n int
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, "snapshots taken and the log compacted", func() bool {
		return count("SELECT COUNT(*) FROM partition_snapshots") >= 2 && count("SELECT COUNT(*) FROM partition_log") < 300
	})
	rows := count("SELECT COUNT(*) FROM partition_log")
	stop1()

	// Another node takes the partition over: it loads the newest snapshot,
	// replays the rows after it, and serves every task.
	m2, stop2 := start("n2")
	defer stop2()
	for i, id := range ids {
		got, err := m2.Get(ctx, id)
		if err != nil || string(got.Payload) != fmt.Sprint(i) {
			t.Fatalf("task %d after the handover: %+v, %v", i, got, err)
		}
	}
	res, err := m2.Submit(ctx, coordinator.SubmitRequest{Queue: "q", RequestID: "7"})
	if err != nil || !res.Duplicate || res.Task.ID != ids[7] {
		t.Fatalf("request id deduplication after restoring from a snapshot: %+v, %v", res, err)
	}
	t.Logf("300 tasks: %d log rows left after compaction", rows)
}

func TestSecondProcessWithTheSameNodeIDRefused(t *testing.T) {
	db, nodes := startCluster(t, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = member.Start(t.Context(), member.Config{
		DB: db, NodeID: nodes[0].id, Advertise: ln.Addr().String(),
		Election: election.Config{TTL: 3 * time.Second, CheckInterval: 50 * time.Millisecond},
		Registry: registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
	})
	if !errors.Is(err, member.ErrNodeIDInUse) || !strings.Contains(err.Error(), "another --node-id") {
		t.Fatalf("second process under node id %q: %v, want ErrNodeIDInUse", nodes[0].id, err)
	}
	// Once the first has left, the id is free again.
	nodes[0].close()
	m, err := member.Start(t.Context(), member.Config{
		DB: db, NodeID: nodes[0].id, Advertise: ln.Addr().String(),
		Election: election.Config{TTL: 3 * time.Second, CheckInterval: 50 * time.Millisecond},
		Registry: registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
	})
	if err != nil {
		t.Fatalf("after the first left: %v", err)
	}
	m.Close()
}
