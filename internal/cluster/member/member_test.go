package member_test

import (
	"context"
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

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/cluster/remote"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/host"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// reworded rewrites every error message the test nodes answer: no caller,
// and no node forwarding another's answer, may depend on a message's
// wording — only on codes and details.
func reworded(msg string) string { return "REWORDED " + strings.ToUpper(msg) }

// api is the tenure.v1 API of one node, as a client sees it.
type api struct {
	tasks   tenurev1connect.TaskServiceClient
	workers tenurev1connect.WorkerServiceClient
}

func newAPI(url string) api {
	return api{
		tasks:   tenurev1connect.NewTaskServiceClient(http.DefaultClient, url),
		workers: tenurev1connect.NewWorkerServiceClient(http.DefaultClient, url),
	}
}

// testNode is a member behind the API on a loopback port.
type testNode struct {
	id  string
	m   *member.Member
	url string
	srv *server.HTTP
	api
}

func (n *testNode) close() {
	n.srv.Close()
	n.m.Close()
}

// serveAPI serves the API over m's partitions on ln, as `tenure server`
// does, with every error message reworded.
func serveAPI(m *member.Member, ln net.Listener) *server.HTTP {
	return server.New(m, server.Options{Snapshots: m, Events: m, Reword: reworded}).Serve(ln, server.HTTPConfig{})
}

func startNode(t *testing.T, db *sql.DB, id string) *testNode {
	t.Helper()
	return startNodeWith(t, db, id, 50*time.Millisecond)
}

// startNodeWith starts a node that checks its assignments, and reads the
// partition map, every assign.
func startNodeWith(t *testing.T, db *sql.DB, id string, assign time.Duration) *testNode {
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
		AssignInterval: assign,
		ProbeInterval:  50 * time.Millisecond,
		Election:       election.Config{TTL: 3 * time.Second, CheckInterval: 50 * time.Millisecond},
		Registry:       registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
		Coordinator:    coordinator.Config{ExpiryScanInterval: 50 * time.Millisecond},
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		ln.Close()
		t.Fatalf("start %s: %v", id, err)
	}
	url := "http://" + ln.Addr().String()
	n := &testNode{id: id, m: m, url: url, srv: serveAPI(m, ln), api: newAPI(url)}
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
	// Started: every node verified by the others, so that a queue's
	// partitions spread over all of them from its first submit.
	eventually(t, "every node eligible for partitions", func() bool {
		for _, n := range nodes {
			if !n.m.Eligible() {
				return false
			}
		}
		return true
	})
	return db, nodes
}

// ownerCounts is how many partitions each node owns ("" for the unowned).
func ownerCounts(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	per := map[string]int{}
	for _, a := range owners(t, db) {
		per[a.Owner]++
	}
	return per
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

// eventually polls cond until it holds (clustertest.Eventually).
var eventually = clustertest.Eventually

func partitionOf(t *testing.T, taskID string) uint64 {
	t.Helper()
	var id uint64
	if _, err := fmt.Sscanf(taskID[26:], "-p%d", &id); err != nil {
		t.Fatalf("task id %q carries no partition: %v", taskID, err)
	}
	return id
}

// detail returns the tenure detail of an API error (nil if none).
func detail(err error) *tenurev1.ErrorDetail { return apitest.ErrorDetail(err) }

// reason is the reason of an API error's detail.
func reason(err error) tenurev1.ErrorReason { return detail(err).GetReason() }

// submitMany submits tasks from to from+n-1 to queue q through a, each
// with its number as request id and payload, and returns their ids.
func submitMany(t *testing.T, ctx context.Context, a api, from, n int) []string {
	t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		res, err := submit(ctx, a, &tenurev1.SubmitRequest{Queue: "q", RequestId: fmt.Sprint(i), Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.GetTask().GetTaskId())
	}
	return ids
}

// spread waits until each of the n nodes of the cluster owns a partition.
func spread(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	eventually(t, "every node owns a partition", func() bool {
		return len(ownerCounts(t, db)) == n
	})
}

func submit(ctx context.Context, a api, req *tenurev1.SubmitRequest) (*tenurev1.SubmitResponse, error) {
	resp, err := a.tasks.Submit(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func getTask(ctx context.Context, a api, id string) (*tenurev1.Task, error) {
	resp, err := a.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetTask(), nil
}

func lease(ctx context.Context, a api, queue string, max uint32, wait time.Duration) ([]*tenurev1.LeasedTask, error) {
	resp, err := a.workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{WorkerId: "w", Queue: queue, MaxTasks: max, Wait: durationpb.New(wait)}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetTasks(), nil
}

func TestRoutingAcrossNodes(t *testing.T) {
	db, nodes := startCluster(t, 3)
	a, b, c := nodes[0].api, nodes[1].api, nodes[2].api
	ctx := t.Context()

	// Submits through one node land in every partition, wherever it is
	// served; a retried request id through another node is deduplicated.
	var ids []string
	for i := range 40 {
		res, err := submit(ctx, a, &tenurev1.SubmitRequest{Queue: "q", Payload: []byte(fmt.Sprint(i)), RequestId: fmt.Sprintf("r%d", i)})
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		ids = append(ids, res.GetTask().GetTaskId())
	}
	parts := map[uint64]bool{}
	for _, id := range ids {
		parts[partitionOf(t, id)] = true
	}
	if len(parts) != 4 {
		t.Fatalf("40 submits landed in %d of 4 partitions", len(parts))
	}
	eventually(t, "partitions spread over the three nodes", func() bool {
		return len(ownerCounts(t, db)) == 3
	})
	for i, id := range ids {
		res, err := submit(ctx, b, &tenurev1.SubmitRequest{Queue: "q", Payload: []byte(fmt.Sprint(i)), RequestId: fmt.Sprintf("r%d", i)})
		if err != nil || !res.GetDuplicate() || res.GetTask().GetTaskId() != id {
			t.Fatalf("resubmit r%d through another node: %v, %v; want duplicate of %s", i, res, err, id)
		}
		// The same request id for another payload is refused, naming the
		// first task, wherever it is served.
		if _, err := submit(ctx, b, &tenurev1.SubmitRequest{Queue: "q", Payload: []byte("other"), RequestId: fmt.Sprintf("r%d", i)}); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(id)) {
			t.Fatalf("request id r%d reused for another payload through another node: %v; want invalid_argument naming %s", i, err, id)
		}
		got, err := getTask(ctx, c, id)
		if err != nil || string(got.GetPayload()) != fmt.Sprint(i) {
			t.Fatalf("get %s through a third node: %v, %v", id, got, err)
		}
	}

	// A batch with one bad item creates nothing, on any partition.
	bad := &tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{
		{Queue: "q", RequestId: "b1"},
		{Queue: "q", RequestId: "b2", ExecutionWindow: durationpb.New(time.Millisecond)},
	}}
	if _, err := b.tasks.SubmitBatch(ctx, connect.NewRequest(bad)); reason(err) != tenurev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT || detail(err).GetField() != "requests[1].execution_window" {
		t.Fatalf("bad batch: %v (detail %v)", err, detail(err))
	}
	// The refused batch created nothing: its first request id is free.
	if res, err := submit(ctx, b, &tenurev1.SubmitRequest{Queue: "q", RequestId: "b1"}); err != nil || res.GetDuplicate() {
		t.Fatalf("b1 after the refused batch: %v, %v; want a new task", res, err)
	} else {
		ids = append(ids, res.GetTask().GetTaskId())
	}
	if _, err := submit(ctx, b, &tenurev1.SubmitRequest{Queue: "q", ExecutionWindow: durationpb.New(time.Millisecond)}); reason(err) != tenurev1.ErrorReason_ERROR_REASON_INVALID_ARGUMENT || detail(err).GetField() != "execution_window" {
		t.Fatalf("bad submit: %v (detail %v), want an invalid argument naming execution_window", err, detail(err))
	}
	if _, err := submit(ctx, b, &tenurev1.SubmitRequest{Queue: "bad queue"}); detail(err).GetField() != "queue" {
		t.Fatalf("submit to an invalid queue name: %v (detail %v)", err, detail(err))
	}
	if ps := owners(t, db); len(ps) != 4 {
		t.Fatalf("%d partitions after a refused submit to a new queue, want the 4 of q", len(ps))
	}

	// Listing walks every partition, page by page, whoever owns them.
	var listed []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := c.tasks.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Queue: "q", PageSize: 7, PageToken: token}))
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, task := range resp.Msg.GetTasks() {
			listed = append(listed, task.GetTaskId())
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
		if pages > 20 {
			t.Fatal("listing does not end")
		}
	}
	slices.Sort(listed)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %d tasks, want the %d submitted (no more, no fewer)", len(listed), len(want))
	}

	// One worker on one node leases from every partition; completions go
	// back through another node as one batch.
	var leases []*tenurev1.LeasedTask
	eventually(t, "all 41 tasks leased through one node", func() bool {
		ls, err := lease(ctx, c, "q", 100, 100*time.Millisecond)
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		leases = append(leases, ls...)
		return len(leases) >= 41
	})
	if len(leases) != 41 {
		t.Fatalf("leased %d tasks, want 41", len(leases))
	}
	// First an item with a made-up lease for a leased task, then every
	// real completion, then a task id that is no task of the cluster.
	items := &tenurev1.CompleteBatchRequest{Items: []*tenurev1.CompleteRequest{{TaskId: leases[0].GetTaskId(), LeaseId: "made-up"}}}
	for _, l := range leases {
		items.Items = append(items.Items, &tenurev1.CompleteRequest{TaskId: l.GetTaskId(), LeaseId: l.GetLeaseId(), Result: []byte("ok")})
	}
	items.Items = append(items.Items, &tenurev1.CompleteRequest{TaskId: "nonsense", LeaseId: "x"})
	resp, err := a.workers.CompleteBatch(ctx, connect.NewRequest(items))
	if err != nil {
		t.Fatal(err)
	}
	// Every real completion succeeded: only the first and the last item
	// failed.
	res := resp.Msg.GetFailed()
	if len(res) != 2 || res[0].GetIndex() != 0 || res[1].GetIndex() != 42 {
		t.Fatalf("complete failed the items %v, want item 0 (a made-up lease) and item 42 (a foreign id) alone", res)
	}
	if d := res[0].GetDetail(); res[0].GetCode() != "failed_precondition" || d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_LEASE_LOST || d.GetLeaseId() != "made-up" || d.GetTaskId() != leases[0].GetTaskId() {
		t.Fatalf("complete with a made-up lease: %v, want lease lost naming the lease and the task", res[0])
	}
	if res[1].GetDetail().GetReason() != tenurev1.ErrorReason_ERROR_REASON_NOT_FOUND || res[1].GetCode() != "not_found" {
		t.Fatalf("complete of a foreign id: %v, want not found", res[1])
	}
	for _, id := range ids {
		got, err := getTask(ctx, b, id)
		if err != nil || got.GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED || string(got.GetResult()) != "ok" {
			t.Fatalf("task %s after completion: %v, %v", id, got, err)
		}
	}
}

// TestForwardingIsLossless: every call about a task answers the same
// through a node that forwards it as through the owner — answers and
// errors alike (code, message and details), the history record for
// record — with every message reworded.
func TestForwardingIsLossless(t *testing.T) {
	db, nodes := startCluster(t, 2)
	ctx := t.Context()
	tc := &tenurev1.TraceContext{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	res, err := submit(ctx, nodes[0].api, &tenurev1.SubmitRequest{Queue: "q", RequestId: "x", Payload: []byte("p"),
		RetryPolicy: &tenurev1.RetryPolicy{MaxAttempts: 5, InitialBackoff: durationpb.New(time.Millisecond)}, TraceContext: tc})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetTask().GetTaskId()
	var owner, other *testNode
	eventually(t, "the task's partition served, the other node not its owner", func() bool {
		o := owners(t, db)[partitionOf(t, id)].Owner
		for _, n := range nodes {
			if n.id == o {
				owner = n
			} else {
				other = n
			}
		}
		_, err := getTask(ctx, other.api, id)
		return o != "" && err == nil
	})
	// A life with everything a history holds: a failed attempt, a snoozed
	// one, a refused stale call, a start, a heartbeat with progress, a
	// commit and a completion.
	var ls []*tenurev1.LeasedTask
	eventually(t, "leased", func() bool { ls, _ = lease(ctx, other.api, "q", 1, 0); return len(ls) == 1 })
	first := ls[0]
	if first.GetTraceContext().GetTraceparent() != tc.Traceparent {
		t.Fatalf("a lease through a forwarding node has trace context %v, want %v", first.GetTraceContext(), tc)
	}
	if _, err := other.workers.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{TaskId: id, LeaseId: first.GetLeaseId(), Reason: "boom"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "leased again", func() bool { ls, _ = lease(ctx, other.api, "q", 1, 0); return len(ls) == 1 })
	if _, err := other.workers.Snooze(ctx, connect.NewRequest(&tenurev1.SnoozeRequest{TaskId: id, LeaseId: ls[0].GetLeaseId(), Reason: "later"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, "leased after the snooze", func() bool { ls, _ = lease(ctx, other.api, "q", 1, 0); return len(ls) == 1 })
	second := ls[0]
	if second.GetAttempt() != 2 {
		t.Fatalf("the lease after a snooze of attempt 2 has attempt %d", second.GetAttempt())
	}
	w := other.workers
	if _, err := w.Start(ctx, connect.NewRequest(&tenurev1.StartRequest{TaskId: id, LeaseId: second.GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	pct := uint32(50)
	if _, err := w.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: id, LeaseId: second.GetLeaseId(),
		Progress: &tenurev1.Progress{Message: "half", Percent: &pct}})); err != nil {
		t.Fatal(err)
	}
	if got, err := getTask(ctx, other.api, id); err != nil || got.GetProgress().GetMessage() != "half" || got.GetTraceContext().GetTraceparent() != tc.Traceparent {
		t.Fatalf("task through a forwarding node: %v, %v; want its progress and trace context", got, err)
	}

	// Refusals answer alike through both nodes, with their details.
	refusals := map[string]func(a api) error{
		"heartbeat of a stale lease": func(a api) error {
			_, err := a.workers.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: id, LeaseId: first.GetLeaseId()}))
			return err
		},
		"commit of a stale lease": func(a api) error {
			_, err := a.workers.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: id, LeaseId: first.GetLeaseId()}))
			return err
		},
		"snooze of a stale lease": func(a api) error {
			_, err := a.workers.Snooze(ctx, connect.NewRequest(&tenurev1.SnoozeRequest{TaskId: id, LeaseId: first.GetLeaseId()}))
			return err
		},
		"progress over 100 percent": func(a api) error {
			over := uint32(101)
			_, err := a.workers.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: id, LeaseId: second.GetLeaseId(),
				Progress: &tenurev1.Progress{Percent: &over}}))
			return err
		},
		"reason too large": func(a api) error {
			_, err := a.workers.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{TaskId: id, LeaseId: second.GetLeaseId(), Reason: strings.Repeat("x", 8<<10)}))
			return err
		},
		"unknown task": func(a api) error {
			_, err := getTask(ctx, a, strings.Replace(id, id[:5], "00000", 1))
			return err
		},
		"bad lease id": func(a api) error {
			_, err := a.workers.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: id, LeaseId: "has space"}))
			return err
		},
		"result too large": func(a api) error {
			_, err := a.workers.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: id, LeaseId: second.GetLeaseId(), Result: make([]byte, 2<<20)}))
			return err
		},
	}
	sameRefusal := func(name string, call func(a api) error) {
		t.Helper()
		want, got := call(owner.api), call(other.api)
		var wce, gce *connect.Error
		if !errors.As(want, &wce) || !errors.As(got, &gce) {
			t.Fatalf("%s: owner %v, forwarded %v: want errors", name, want, got)
		}
		if !strings.HasPrefix(wce.Message(), "REWORDED ") || gce.Code() != wce.Code() || gce.Message() != wce.Message() || !proto.Equal(detail(got), detail(want)) || detail(got) == nil {
			t.Errorf("%s: forwarded %v (detail %v), owner %v (detail %v)", name, got, detail(got), want, detail(want))
		}
	}
	for name, call := range refusals {
		sameRefusal(name, call)
	}

	if _, err := w.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: id, LeaseId: second.GetLeaseId(), Result: []byte("r")})); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: id, LeaseId: second.GetLeaseId()})); err != nil {
		t.Fatal(err)
	}
	kill := func(a api) error {
		_, err := a.tasks.KillTask(ctx, connect.NewRequest(&tenurev1.KillTaskRequest{TaskId: id, Reason: "too late"}))
		return err
	}
	if d := detail(kill(other.api)); d.GetReason() != tenurev1.ErrorReason_ERROR_REASON_WRONG_STATE || d.GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED {
		t.Fatalf("kill of a completed task through a forwarding node: detail %v", d)
	}
	sameRefusal("kill of a completed task", kill)

	history := func(a api) []*tenurev1.HistoryEntry {
		resp, err := a.tasks.GetTaskHistory(ctx, connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: id}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetEntries()
	}
	want, got := history(owner.api), history(other.api)
	if len(want) < 8 || len(got) != len(want) {
		t.Fatalf("history: %d entries through the owner, %d forwarded (want at least 8)", len(want), len(got))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("history entry %d: forwarded %v, owner %v", i, got[i], want[i])
		}
	}
	wt, err1 := getTask(ctx, owner.api, id)
	gt, err2 := getTask(ctx, other.api, id)
	if err1 != nil || err2 != nil || !proto.Equal(gt, wt) {
		t.Fatalf("task: forwarded %v (%v), owner %v (%v)", gt, err2, wt, err1)
	}
}

func TestForwardedRequestIsNeverForwardedAgain(t *testing.T) {
	db, nodes := startCluster(t, 2)
	ctx := t.Context()
	res, err := submit(ctx, nodes[0].api, &tenurev1.SubmitRequest{Queue: "q", RequestId: "x"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetTask().GetTaskId()
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
	fw := remote.New(other.url, http.DefaultClient, other.m) // signed as a node of the cluster
	_, err = fw.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
	if other.m.Err() == nil && connect.CodeOf(err) != connect.CodeUnavailable {
		// The partition may have moved to other in between; then it is
		// served, which is also correct.
		if owners(t, db)[partitionOf(t, id)].Owner != other.id {
			t.Fatalf("forwarded get on a node that does not own the partition: %v, want unavailable", err)
		}
	}
	if err != nil && reason(err) != tenurev1.ErrorReason_ERROR_REASON_UNAVAILABLE {
		t.Fatalf("refused forwarded get: %v, detail %v", err, detail(err))
	}
	// Without the mark, the same node forwards and answers.
	if got, err := getTask(ctx, other.api, id); err != nil || got.GetTaskId() != id {
		t.Fatalf("get through a non-owner: %v, %v", got, err)
	}
}

func TestLongPollSeesTasksOfOtherNodes(t *testing.T) {
	db, nodes := startCluster(t, 2)
	ctx := t.Context()
	// Create the queue and wait until each node owns two partitions.
	if _, err := submit(ctx, nodes[0].api, &tenurev1.SubmitRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two partitions each", func() bool {
		per := ownerCounts(t, db)
		return per["n1"] == 2 && per["n2"] == 2
	})
	if ls, err := lease(ctx, nodes[1].api, "q", 1, 5*time.Second); err != nil || len(ls) != 1 {
		t.Fatalf("lease of the first task: %v, %v", ls, err)
	}
	// A worker waits on n2; tasks submitted through n1 into partitions of
	// either node reach it.
	for i := range 8 {
		got := make(chan []*tenurev1.LeasedTask, 1)
		go func() {
			ls, err := lease(ctx, nodes[1].api, "q", 1, 20*time.Second)
			if err != nil {
				t.Errorf("lease: %v", err)
			}
			got <- ls
		}()
		res, err := submit(ctx, nodes[0].api, &tenurev1.SubmitRequest{Queue: "q", RequestId: fmt.Sprint("late", i)})
		if err != nil {
			t.Fatal(err)
		}
		ls := <-got
		if len(ls) != 1 || ls[0].GetTaskId() != res.GetTask().GetTaskId() {
			t.Fatalf("long-poll %d got %v, want task %s", i, ls, res.GetTask().GetTaskId())
		}
	}
}

func TestGracefulLeaveMovesPartitions(t *testing.T) {
	db, nodes := startCluster(t, 3)
	ctx := t.Context()
	ids := submitMany(t, ctx, nodes[1].api, 0, 20)
	spread(t, db, 3)
	before := owners(t, db)
	nodes[0].close()
	waitMoved(t, db, "n1")
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
		got, err := getTask(ctx, nodes[2].api, id)
		if err != nil || string(got.GetPayload()) != fmt.Sprint(i) {
			t.Fatalf("task %s after its owner left: %v, %v", id, got, err)
		}
	}
}

// waitMoved waits until no partition is node id's, nor unowned.
func waitMoved(t *testing.T, db *sql.DB, id string) {
	t.Helper()
	eventually(t, id+"'s partitions moved", func() bool {
		for _, a := range owners(t, db) {
			if a.Owner == id || a.Owner == "" {
				return false
			}
		}
		return true
	})
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
	srv := serveAPI(m, ln)
	defer srv.Close()
	a := newAPI("http://" + ln.Addr().String())
	res, err := submit(ctx, a, &tenurev1.SubmitRequest{Queue: "q", RequestId: "a"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetTask().GetTaskId()
	if _, err := getTask(ctx, a, id); err != nil {
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
	if _, err := getTask(ctx, a, id); reason(err) != tenurev1.ErrorReason_ERROR_REASON_UNAVAILABLE {
		t.Fatalf("get from a stale copy: %v, want unavailable", err)
	}
	// The refused read made the node check its assignments: it reopens the
	// partition at the new epoch, from the log.
	eventually(t, "reopened at the new epoch", func() bool {
		_, err := getTask(ctx, a, id)
		return err == nil
	})
	if _, err := a.tasks.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Queue: "q"})); err != nil {
		t.Fatalf("list after reopening: %v", err)
	}

	// Again, and now a write: the log's epoch check fences it, it fails and
	// acknowledges nothing, and the node reopens the partition.
	bump()
	if _, err := submit(ctx, a, &tenurev1.SubmitRequest{Queue: "q", RequestId: "b"}); reason(err) != tenurev1.ErrorReason_ERROR_REASON_UNAVAILABLE {
		t.Fatalf("submit through a stale copy: %v, want unavailable", err)
	}
	var res2 *tenurev1.SubmitResponse
	eventually(t, "a submit after reopening", func() bool {
		res2, err = submit(ctx, a, &tenurev1.SubmitRequest{Queue: "q", RequestId: "b"})
		return err == nil
	})
	if res2.GetDuplicate() {
		t.Fatalf("the refused submit left a task behind: %v", res2)
	}
	if got, err := getTask(ctx, a, id); err != nil || got.GetRequestId() != "a" {
		t.Fatalf("get after reopening: %v, %v", got, err)
	}
}

func TestSnapshotsCompactAndANewOwnerStartsFromThem(t *testing.T) {
	_, db := clustertest.DB(t)
	ctx := t.Context()
	start := func(id string) (api, func()) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m, err := member.Start(ctx, member.Config{
			DB: db, NodeID: id, Advertise: ln.Addr().String(), Partitions: 1,
			AssignInterval: 20 * time.Millisecond,
			ProbeInterval:  20 * time.Millisecond,
			Snapshots:      host.Schedule{EveryRecords: 50, CheckInterval: 20 * time.Millisecond},
			Election:       election.Config{TTL: 3 * time.Second, CheckInterval: 20 * time.Millisecond},
			Registry:       registry.Config{HeartbeatInterval: 100 * time.Millisecond, Silence: time.Second},
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := serveAPI(m, ln)
		return newAPI("http://" + ln.Addr().String()), func() { srv.Close(); m.Close() }
	}
	a1, stop1 := start("n1")
	var ids []string
	for i := range 300 {
		res, err := submit(ctx, a1, &tenurev1.SubmitRequest{Queue: "q", RequestId: fmt.Sprint(i), Payload: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.GetTask().GetTaskId())
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
	a2, stop2 := start("n2")
	defer stop2()
	for i, id := range ids {
		got, err := getTask(ctx, a2, id)
		if err != nil || string(got.GetPayload()) != fmt.Sprint(i) {
			t.Fatalf("task %d after the handover: %v, %v", i, got, err)
		}
	}
	res, err := submit(ctx, a2, &tenurev1.SubmitRequest{Queue: "q", RequestId: "7", Payload: []byte("7")})
	if err != nil || !res.GetDuplicate() || res.GetTask().GetTaskId() != ids[7] {
		t.Fatalf("request id deduplication after restoring from a snapshot: %v, %v", res, err)
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
