package e2e

// The load of the cluster tests: submitters and workers on every node,
// each moving to another node when its own answers unavailable, and the
// check of everything the nodes acknowledged once a fault is over.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/eventually"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
)

// ackRec is one acknowledgement a node answered.
type ackRec struct {
	node      int   // index of the node that answered
	sent, got int32 // clTest.phase when the call was sent, and answered
	kind      string
	task      string
	lease     string
}

// syncList is a list that goroutines add to.
type syncList[T any] struct {
	mu    sync.Mutex
	items []T
}

func (l *syncList[T]) add(v T) {
	l.mu.Lock()
	l.items = append(l.items, v)
	l.mu.Unlock()
}

// all returns a copy of what was added, in order.
func (l *syncList[T]) all() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

// clAPI is one node's API over one protocol.
type clAPI struct {
	tasks  tenurev1connect.TaskServiceClient
	worker tenurev1connect.WorkerServiceClient
}

// clFailover sends each call to its current node and, as the SDK does,
// retries it with backoff while it is answered unavailable; after three
// unavailable answers in a row it moves to the next node (as a client
// behind a load balancer would). Submits get a request id when they have
// none, so that a retry meets its first try.
type clFailover struct {
	c    *clTest
	apis []clAPI
	cur  atomic.Int32
}

// clients returns API clients over proto that start at node home and move
// on as clFailover does.
func (c *clTest) clients(proto string, home int) *apiClients {
	var hc *http.Client
	var opt connect.ClientOption
	tlsCfg := c.nodes[home].clientTLS.Clone() // the cluster's nodes share their CA
	switch proto {
	case "json":
		hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, TLSClientConfig: tlsCfg}}
		opt = connect.WithProtoJSON()
	case "grpc":
		var protos http.Protocols
		if tlsCfg != nil {
			protos.SetHTTP2(true)
		} else {
			protos.SetUnencryptedHTTP2(true)
		}
		hc = &http.Client{Transport: &http.Transport{Protocols: &protos, TLSClientConfig: tlsCfg}}
		opt = connect.WithGRPC()
	default:
		c.t.Fatalf("unknown protocol %q", proto)
	}
	f := &clFailover{c: c}
	for _, n := range c.nodes {
		f.apis = append(f.apis, clAPI{
			tasks:  tenurev1connect.NewTaskServiceClient(hc, n.url(), opt),
			worker: tenurev1connect.NewWorkerServiceClient(hc, n.url(), opt),
		})
	}
	f.cur.Store(int32(home))
	return &apiClients{proto: proto, hc: hc, tasks: clTasks{f.apis[home].tasks, f}, worker: clWorker{f.apis[home].worker, f}}
}

// clCall runs one call through f; acked, if set, is told of its success.
func clCall[Req, Resp any](ctx context.Context, f *clFailover, msg *Req,
	method func(clAPI) func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error),
	acked func(node int, sent, got int32, resp *Resp)) (*connect.Response[Resp], error) {
	backoff := 10 * time.Millisecond
	for failures := 1; ; failures++ {
		node := int(f.cur.Load())
		sent := f.c.phase.Load()
		resp, err := method(f.apis[node])(ctx, connect.NewRequest(msg))
		if err == nil {
			if acked != nil {
				acked(node, sent, f.c.phase.Load(), resp.Msg)
			}
			return resp, nil
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			return nil, err
		}
		f.c.retries.Add(1)
		f.c.noteUnavailable(sent, err)
		if failures%3 == 0 && f.cur.CompareAndSwap(int32(node), int32((node+1)%len(f.apis))) {
			f.c.moves.Add(1)
		}
		timer := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, err
		case <-timer.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// noteUnavailable keeps the message of an unavailable answer to a call
// sent in phase (the first 100 of each phase).
func (c *clTest) noteUnavailable(phase int32, err error) {
	c.unavailable.mu.Lock()
	defer c.unavailable.mu.Unlock()
	if c.unavailable.msgs == nil {
		c.unavailable.msgs = make(map[int32][]string)
	}
	if len(c.unavailable.msgs[phase]) < 100 {
		c.unavailable.msgs[phase] = append(c.unavailable.msgs[phase], err.Error())
	}
}

// unavailableIn returns the unavailable answers kept of calls sent in
// phase.
func (c *clTest) unavailableIn(phase int32) []string {
	c.unavailable.mu.Lock()
	defer c.unavailable.mu.Unlock()
	return slices.Clone(c.unavailable.msgs[phase])
}

func clRequestID() string { return fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()) }

// clTasks is the task service through a clFailover. The embedded client
// (of the home node) serves the methods the tests do not use.
type clTasks struct {
	tenurev1connect.TaskServiceClient
	f *clFailover
}

func (s clTasks) Submit(ctx context.Context, req *connect.Request[tenurev1.SubmitRequest]) (*connect.Response[tenurev1.SubmitResponse], error) {
	if req.Msg.RequestId == "" {
		req.Msg.RequestId = clRequestID()
	}
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.SubmitRequest]) (*connect.Response[tenurev1.SubmitResponse], error) {
		return a.tasks.Submit
	}, func(node int, sent, got int32, resp *tenurev1.SubmitResponse) {
		s.f.c.tap.add(ackRec{node: node, sent: sent, got: got, kind: "submit", task: resp.GetTask().GetTaskId()})
	})
}

func (s clTasks) SubmitBatch(ctx context.Context, req *connect.Request[tenurev1.SubmitBatchRequest]) (*connect.Response[tenurev1.SubmitBatchResponse], error) {
	for _, r := range req.Msg.GetRequests() {
		if r.RequestId == "" {
			r.RequestId = clRequestID()
		}
	}
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.SubmitBatchRequest]) (*connect.Response[tenurev1.SubmitBatchResponse], error) {
		return a.tasks.SubmitBatch
	}, func(node int, sent, got int32, resp *tenurev1.SubmitBatchResponse) {
		for _, id := range resp.GetTaskIds() {
			s.f.c.tap.add(ackRec{node: node, sent: sent, got: got, kind: "submit", task: id})
		}
	})
}

func (s clTasks) GetTask(ctx context.Context, req *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
		return a.tasks.GetTask
	}, nil)
}

func (s clTasks) ListTasks(ctx context.Context, req *connect.Request[tenurev1.ListTasksRequest]) (*connect.Response[tenurev1.ListTasksResponse], error) {
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.ListTasksRequest]) (*connect.Response[tenurev1.ListTasksResponse], error) {
		return a.tasks.ListTasks
	}, nil)
}

// clWorker is the worker service through a clFailover.
type clWorker struct {
	tenurev1connect.WorkerServiceClient
	f *clFailover
}

func (s clWorker) Lease(ctx context.Context, req *connect.Request[tenurev1.LeaseRequest]) (*connect.Response[tenurev1.LeaseResponse], error) {
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.LeaseRequest]) (*connect.Response[tenurev1.LeaseResponse], error) {
		return a.worker.Lease
	}, nil)
}

func (s clWorker) Heartbeat(ctx context.Context, req *connect.Request[tenurev1.HeartbeatRequest]) (*connect.Response[tenurev1.HeartbeatResponse], error) {
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.HeartbeatRequest]) (*connect.Response[tenurev1.HeartbeatResponse], error) {
		return a.worker.Heartbeat
	}, nil)
}

func (s clWorker) Commit(ctx context.Context, req *connect.Request[tenurev1.CommitRequest]) (*connect.Response[tenurev1.CommitResponse], error) {
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.CommitRequest]) (*connect.Response[tenurev1.CommitResponse], error) {
		return a.worker.Commit
	}, func(node int, sent, got int32, _ *tenurev1.CommitResponse) {
		s.f.c.tap.add(ackRec{node: node, sent: sent, got: got, kind: "commit", task: req.Msg.GetTaskId(), lease: req.Msg.GetLeaseId()})
	})
}

func (s clWorker) Complete(ctx context.Context, req *connect.Request[tenurev1.CompleteRequest]) (*connect.Response[tenurev1.CompleteResponse], error) {
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.CompleteRequest]) (*connect.Response[tenurev1.CompleteResponse], error) {
		return a.worker.Complete
	}, func(node int, sent, got int32, _ *tenurev1.CompleteResponse) {
		s.f.c.tap.add(ackRec{node: node, sent: sent, got: got, kind: "complete", task: req.Msg.GetTaskId(), lease: req.Msg.GetLeaseId()})
	})
}

func (s clWorker) Fail(ctx context.Context, req *connect.Request[tenurev1.FailRequest]) (*connect.Response[tenurev1.FailResponse], error) {
	return clCall(ctx, s.f, req.Msg, func(a clAPI) func(context.Context, *connect.Request[tenurev1.FailRequest]) (*connect.Response[tenurev1.FailResponse], error) {
		return a.worker.Fail
	}, nil)
}

// ---- Load -----------------------------------------------------------------

// clLoad is one loadRound driven by six submitters and six workers, two
// per node (one over JSON, one over gRPC each), each moving on to another
// node when its own answers unavailable.
type clLoad struct {
	c       *clTest
	l       *loadRound
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*apiClients
	once    sync.Once
}

// startBalancedLoad starts the load, of a seed from e2eSeed, and waits
// until the queue's partitions are spread over the test's nodes.
func (c *clTest) startBalancedLoad() (*ackLedger, *clLoad) {
	c.t.Helper()
	led := newAckLedger()
	ld := c.startLoad(led, e2eSeed(c.t))
	c.waitBalanced("the queue's partitions spread over the nodes", c.ids())
	return led, ld
}

func (c *clTest) startLoad(led *ackLedger, seed uint64) *clLoad {
	ld := &clLoad{c: c, l: &loadRound{
		t: c.t, led: led, namespace: clNamespace, queue: clQueue,
		target:  math.MaxInt64,
		reached: make(chan struct{}),
		errors:  map[string]int{},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	ld.cancel = cancel
	for i := range 12 {
		proto := []string{"json", "grpc"}[i%2]
		home := i % len(c.nodes)
		cl := c.clients(proto, home)
		ld.clients = append(ld.clients, cl)
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		if i < 6 {
			ld.wg.Go(func() { ld.l.submitter(ctx, cl, r) })
		} else {
			name := fmt.Sprintf("w%d-%s-%s", i, proto, c.nodes[home].id)
			ld.wg.Go(func() { ld.l.worker(ctx, cl, name, r) })
		}
	}
	c.t.Cleanup(ld.stop)
	return ld
}

// waitAcks waits for n more acknowledgements, or limit (a slow machine;
// not an assertion), and returns how many came.
func (ld *clLoad) waitAcks(n int64, limit time.Duration) int64 {
	from := ld.l.acks.Load()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	_ = eventually.Until(ctx, func() error { // a bound, not an assertion
		if ld.l.acks.Load()-from < n {
			return eventually.ErrNotYet
		}
		return nil
	})
	return ld.l.acks.Load() - from
}

// progress fails the test unless the load gathers n more acknowledgements
// (eventually): the cluster serves again.
func (ld *clLoad) progress(what string, n int64) {
	ld.c.t.Helper()
	from := ld.l.acks.Load()
	ld.c.poll(fmt.Sprintf("%d acknowledgements %s (the cluster serves)", n, what), func() (bool, error) {
		return ld.l.acks.Load()-from >= n, nil
	})
}

func (ld *clLoad) stop() {
	ld.once.Do(func() {
		ld.cancel()
		ld.wg.Wait()
		for _, cl := range ld.clients {
			cl.close()
		}
	})
}

// report logs the load's figures.
func (ld *clLoad) report() {
	c := ld.c
	byNode := make([]int, len(c.nodes))
	for _, r := range c.tap.all() {
		byNode[r.node]++
	}
	var nodes []string
	for i, n := range c.nodes {
		nodes = append(nodes, fmt.Sprintf("%s %d", n.id, byNode[i]))
	}
	led := ld.l.led
	led.mu.Lock()
	defer led.mu.Unlock()
	ld.l.mu.Lock()
	defer ld.l.mu.Unlock()
	c.t.Logf("load: %d acknowledgements (%d finalisations), answered by %s; ledger: %d submitted, %d committed, %d completed; %d unavailable answers retried, %d moves to another node; errors: %v",
		ld.l.acks.Load(), ld.l.finalised.Load(), strings.Join(nodes, ", "), len(led.submitted), len(led.committed), len(led.completed),
		c.retries.Load(), c.moves.Load(), ld.l.errors)
}

// ---- Verification ---------------------------------------------------------

// verify waits until every partition has an active owner among live, lists
// every task over gRPC through one node (retrying until a whole listing
// succeeds), then checks the ledger over JSON through node via
// (verifyAcks) and returns the listing.
func (c *clTest) verify(led *ackLedger, via int, live []string) map[string]*tenurev1.Task {
	t := c.t
	t.Helper()
	c.waitBalanced("every partition owned by a live node before the verification", live)
	other := via
	for i := range c.nodes {
		if i != via && slices.Contains(live, c.nodes[i].id) {
			other = i
			break
		}
	}
	cl := c.clients("grpc", other)
	defer cl.close()
	var tasks map[string]*tenurev1.Task
	c.poll("a whole listing of the tasks", func() (bool, error) {
		var err error
		tasks, err = listTasks(cl)
		return err == nil, err
	})
	verifyAcks(t, c.nodes[via].proc, led, clNamespace)
	return tasks
}

// listTasks lists the namespace once; an error ends it.
func listTasks(cl *apiClients) (map[string]*tenurev1.Task, error) {
	out := make(map[string]*tenurev1.Task)
	token := ""
	for page := 0; page < 10_000; page++ {
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := cl.tasks.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Namespace: clNamespace, PageSize: 1000, PageToken: token}))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("ListTasks (page %d): %w", page, err)
		}
		for _, task := range resp.Msg.GetTasks() {
			out[task.GetTaskId()] = task
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
	return nil, errors.New("ListTasks did not end")
}

// checkAck checks one acknowledgement against the tasks as listed, and
// reports whether it holds.
func checkAck(t *testing.T, tasks map[string]*tenurev1.Task, led *ackLedger, r ackRec, from string) bool {
	t.Helper()
	task := tasks[r.task]
	if task == nil {
		t.Errorf("%s of task %s (lease %q) acknowledged by %s is lost: no such task", r.kind, r.task, r.lease, from)
		return false
	}
	st := task.GetState()
	switch r.kind {
	case "submit":
		led.mu.Lock()
		payload, ok := led.submitted[r.task]
		led.mu.Unlock()
		if ok && !bytes.Equal(task.GetPayload(), payload) {
			t.Errorf("task %s submitted through %s: payload %x, want %x", r.task, from, task.GetPayload(), payload)
			return false
		}
	case "commit":
		e := executionOf(task, r.lease)
		if (st != tenurev1.TaskState_TASK_STATE_COMMITTED && st != tenurev1.TaskState_TASK_STATE_COMPLETED) || e == nil || e.GetCommittedAt() == nil {
			t.Errorf("commit of task %s by lease %s acknowledged by %s is lost: the task is %v, the execution %v", r.task, r.lease, from, st, e)
			return false
		}
	case "complete":
		e := executionOf(task, r.lease)
		if st != tenurev1.TaskState_TASK_STATE_COMPLETED || e == nil || e.GetStatus() != tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE {
			t.Errorf("completion of task %s by lease %s acknowledged by %s is lost: the task is %v, the execution %v", r.task, r.lease, from, st, e)
			return false
		}
	}
	return true
}

// partitionOfTask is the partition id a cluster task id ends with
// ("…-p<id>").
func partitionOfTask(id string) uint64 {
	i := strings.LastIndex(id, "-p")
	if i < 0 {
		return 0
	}
	p, _ := strconv.ParseUint(id[i+2:], 10, 64)
	return p
}
