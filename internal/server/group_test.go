package server_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// nodePeer is another node as the forwarding node sees it: it records the
// items of each SubmitBatch and CompleteBatch it gets, and answers each
// submit with an id of its own ("<addr>:<request id>"), each completion
// with a failure that names it ("by <addr>"), or refuses every call with
// err. Every other call panics (the nil Peer).
type nodePeer struct {
	route.Peer
	addr string
	err  error

	mu        sync.Mutex
	submits   [][]string // the request ids of each call
	completes [][]string // the task ids of each call
}

func (p *nodePeer) Addr() string { return p.addr }

func (p *nodePeer) SubmitBatch(_ context.Context, req *connect.Request[tenurev1.SubmitBatchRequest]) (*connect.Response[tenurev1.SubmitBatchResponse], error) {
	var ids []string
	out := &tenurev1.SubmitBatchResponse{}
	for _, r := range req.Msg.GetRequests() {
		ids = append(ids, r.GetRequestId())
		out.TaskIds, out.Duplicates = append(out.TaskIds, p.addr+":"+r.GetRequestId()), append(out.Duplicates, false)
	}
	p.mu.Lock()
	p.submits = append(p.submits, ids)
	p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	return connect.NewResponse(out), nil
}

func (p *nodePeer) CompleteBatch(_ context.Context, req *connect.Request[tenurev1.CompleteBatchRequest]) (*connect.Response[tenurev1.CompleteBatchResponse], error) {
	var ids []string
	out := &tenurev1.CompleteBatchResponse{}
	for i, it := range req.Msg.GetItems() {
		ids = append(ids, it.GetTaskId())
		out.Failed = append(out.Failed, &tenurev1.CompleteResult{TaskId: it.GetTaskId(), Index: uint32(i), Code: "aborted", Message: "by " + p.addr})
	}
	p.mu.Lock()
	p.completes = append(p.completes, ids)
	p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	return connect.NewResponse(out), nil
}

// calls returns the items of each call, each call's sorted, the calls in
// order of their items.
func calls(mu *sync.Mutex, got *[][]string) [][]string {
	mu.Lock()
	defer mu.Unlock()
	out := make([][]string, len(*got))
	for i, c := range *got {
		out[i] = slices.Sorted(slices.Values(c))
	}
	slices.SortFunc(out, slices.Compare)
	return out
}

// mapPart is a partition of splitRouter: the map says peer serves it
// (nil: this node), and Do forwards to owner (the owner a fresh reading
// of the map finds; nil: this node's coordinator).
type mapPart struct {
	id          uint64
	peer, owner route.Peer
	here        route.Partition
}

func (p *mapPart) ID() uint64 { return p.id }

func (p *mapPart) Peer(context.Context) route.Peer { return p.peer }

func (p *mapPart) Do(ctx context.Context, read bool, local func(*coordinator.Coordinator) error, forward func(route.Peer) error) error {
	if p.owner != nil {
		return forward(p.owner)
	}
	return p.here.Do(ctx, read, local, forward)
}

// splitRouter places a task by the first letter of its request id (of its
// queue without one), and
// finds a task by the first letter of its id, in the partitions named by
// letter; "h" (and anything else) is this node's one partition.
type splitRouter struct {
	route.Router // this node's
	parts        map[byte]*mapPart
}

func (r splitRouter) by(id string) route.Partition {
	if p := r.parts[id[0]]; p != nil {
		return p
	}
	p, _ := r.Router.Task(context.Background(), id)
	return p
}

func (r splitRouter) Place(_ context.Context, _, queue, requestID string) (route.Partition, error) {
	if requestID == "" {
		return r.by(queue), nil
	}
	return r.by(requestID), nil
}

func (r splitRouter) Task(_ context.Context, taskID string) (route.Partition, error) {
	return r.by(taskID), nil
}

// groupEnv is a node whose batches span five partitions: "h" served here,
// "a" and "b" by node A, "c" by node C, and "d" by node A in the map, by
// node D in fact.
type groupEnv struct {
	a, c, d *nodePeer
	tasks   tenurev1connect.TaskServiceClient
	workers tenurev1connect.WorkerServiceClient
}

func newGroupEnv(t *testing.T, aErr error) *groupEnv {
	t.Helper()
	n := openUnsnapshotted(t)
	e := &groupEnv{a: &nodePeer{addr: "A", err: aErr}, c: &nodePeer{addr: "C"}, d: &nodePeer{addr: "D"}}
	r := splitRouter{Router: n.Router(), parts: map[byte]*mapPart{
		'a': {id: 1, peer: e.a, owner: e.a},
		'b': {id: 2, peer: e.a, owner: e.a},
		'c': {id: 3, peer: e.c, owner: e.c},
		'd': {id: 4, peer: e.a, owner: e.d},
	}}
	ts := httptest.NewServer(server.New(r, server.Options{}).Handler())
	t.Cleanup(ts.Close)
	e.tasks = tenurev1connect.NewTaskServiceClient(ts.Client(), ts.URL)
	e.workers = tenurev1connect.NewWorkerServiceClient(ts.Client(), ts.URL)
	return e
}

func (e *groupEnv) submit(t *testing.T, requestIDs ...string) (*tenurev1.SubmitBatchResponse, error) {
	t.Helper()
	req := &tenurev1.SubmitBatchRequest{}
	for _, id := range requestIDs {
		req.Requests = append(req.Requests, &tenurev1.SubmitRequest{Queue: "q", RequestId: id})
	}
	resp, err := e.tasks.SubmitBatch(context.Background(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// TestSubmitBatchOneCallPerNode: the tasks of a batch that another node's
// partitions take go to that node in one call, whatever the number of its
// partitions; each answer lands at its task's place in the batch.
func TestSubmitBatchOneCallPerNode(t *testing.T) {
	t.Parallel()
	e := newGroupEnv(t, nil)
	ids := []string{"a1", "h1", "b1", "c1", "a2", "h2", "b2", "d1"}
	got, err := e.submit(t, ids...)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		tid := got.GetTaskIds()[i]
		want := map[byte]string{'a': "A:", 'b': "A:", 'c': "C:", 'd': "A:"}[id[0]] + id
		if id[0] == 'h' {
			if tid == "" || strings.Contains(tid, ":") {
				t.Errorf("task %d (%s): id %q, want one this node's partition made", i, id, tid)
			}
			continue
		}
		if tid != want {
			t.Errorf("task %d (%s): id %q, want %q", i, id, tid, want)
		}
	}
	if c := calls(&e.a.mu, &e.a.submits); !slices.EqualFunc(c, [][]string{{"a1", "a2", "b1", "b2", "d1"}}, slices.Equal) {
		t.Errorf("node A got the calls %v, want one with the tasks of its partitions a, b and d", c)
	}
	if c := calls(&e.c.mu, &e.c.submits); !slices.EqualFunc(c, [][]string{{"c1"}}, slices.Equal) {
		t.Errorf("node C got the calls %v, want one", c)
	}
	if c := calls(&e.d.mu, &e.d.submits); len(c) != 0 {
		t.Errorf("node D got the calls %v, want none (A answered for d)", c)
	}

	// A batch that goes to one node whole, its partitions interleaved:
	// each answer still lands at its own task.
	ids = []string{"a3", "b3", "a4", "d2", "b4"}
	if got, err = e.submit(t, ids...); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if tid := got.GetTaskIds()[i]; tid != "A:"+id {
			t.Errorf("task %d (%s) of a batch all for node A: id %q, want %q", i, id, tid, "A:"+id)
		}
	}
}

// TestSubmitBatchGroupRefused: when the node a group went to answers
// unavailable, a batch whose tasks all have request ids sends each of the
// group's partitions again on its own, which follows a partition that
// moved (d, to node D); the others are refused again, and the call fails.
// Without request ids the group is not sent again: that could create its
// tasks twice.
func TestSubmitBatchGroupRefused(t *testing.T) {
	t.Parallel()
	refused := connect.NewError(connect.CodeUnavailable, nil)
	e := newGroupEnv(t, refused)
	if _, err := e.submit(t, "a1", "b1", "d1", "c1"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("submit with node A refusing: %v, want unavailable", err)
	}
	wantA := [][]string{{"a1"}, {"a1", "b1", "d1"}, {"b1"}}
	if c := calls(&e.a.mu, &e.a.submits); !slices.EqualFunc(c, wantA, slices.Equal) {
		t.Errorf("node A got the calls %v, want %v: the group, then a and b alone", c, wantA)
	}
	if c := calls(&e.d.mu, &e.d.submits); !slices.EqualFunc(c, [][]string{{"d1"}}, slices.Equal) {
		t.Errorf("node D got the calls %v, want d's task alone", c)
	}

	// Only d's task goes to A: a part alone is no group.
	e = newGroupEnv(t, refused)
	got, err := e.submit(t, "d1", "c1")
	if err != nil || got.GetTaskIds()[0] != "D:d1" {
		t.Fatalf("submit of a moved partition's task: %v, %v; want D's answer", got, err)
	}

	// No request ids (the queue names the partition): the group is not
	// sent again.
	e = newGroupEnv(t, refused)
	req := &tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{{Queue: "aq"}, {Queue: "bq"}}}
	if _, err := e.tasks.SubmitBatch(context.Background(), connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("submit without request ids, node A refusing: %v, want unavailable", err)
	}
	if c := calls(&e.a.mu, &e.a.submits); len(c) != 1 {
		t.Errorf("node A got the calls %v, want the group's alone", c)
	}
}

func (e *groupEnv) complete(t *testing.T, taskIDs ...string) []*tenurev1.CompleteResult {
	t.Helper()
	req := &tenurev1.CompleteBatchRequest{}
	for _, id := range taskIDs {
		req.Items = append(req.Items, &tenurev1.CompleteRequest{TaskId: id, LeaseId: "l"})
	}
	resp, err := e.workers.CompleteBatch(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	// Every item fails here: the nodes answer each as a failure that names
	// them.
	got := resp.Msg.GetFailed()
	if len(got) != len(taskIDs) {
		t.Fatalf("%d failures for %d items", len(got), len(taskIDs))
	}
	for i, r := range got {
		if int(r.GetIndex()) != i {
			t.Fatalf("failure %d is of item %d", i, r.GetIndex())
		}
	}
	return got
}

// TestCompleteBatchOneCallPerNode: the items of a CompleteBatch that
// another node's partitions hold go to it in one call; if it answers
// unavailable, each of its partitions' items go again on their own (d's to
// node D, where d moved); any other refusal is each of its items' answer.
func TestCompleteBatchOneCallPerNode(t *testing.T) {
	t.Parallel()
	ids := []string{"a1", "h1", "b1", "c1", "a2", "d1"}
	for _, tc := range []struct {
		name  string
		aErr  error
		wantA [][]string
		by    map[byte]string // the answer of each partition's items: who served them, or the code
	}{
		{"served", nil, [][]string{{"a1", "a2", "b1", "d1"}}, map[byte]string{'a': "by A", 'b': "by A", 'c': "by C", 'd': "by A"}},
		{"unavailable", connect.NewError(connect.CodeUnavailable, nil), [][]string{{"a1", "a2"}, {"a1", "a2", "b1", "d1"}, {"b1"}},
			map[byte]string{'a': "unavailable", 'b': "unavailable", 'c': "by C", 'd': "by D"}},
		{"refused", connect.NewError(connect.CodePermissionDenied, nil), [][]string{{"a1", "a2", "b1", "d1"}},
			map[byte]string{'a': "permission_denied", 'b': "permission_denied", 'c': "by C", 'd': "permission_denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newGroupEnv(t, tc.aErr)
			got := e.complete(t, ids...)
			for i, id := range ids {
				r := got[i]
				want := tc.by[id[0]]
				if id[0] == 'h' {
					want = "not_found" // this node's partition has no such task
				}
				if r.GetTaskId() != id || (r.GetMessage() != want && r.GetCode() != want) {
					t.Errorf("result %d: %v, want task %s answered %q", i, r, id, want)
				}
			}
			if c := calls(&e.a.mu, &e.a.completes); !slices.EqualFunc(c, tc.wantA, slices.Equal) {
				t.Errorf("node A got the calls %v, want %v", c, tc.wantA)
			}
			if c := calls(&e.c.mu, &e.c.completes); !slices.EqualFunc(c, [][]string{{"c1"}}, slices.Equal) {
				t.Errorf("node C got the calls %v, want one", c)
			}
		})
	}
}
