package e2e

// The real binary killed with -9 under load: submitters and workers over
// HTTP/JSON and gRPC drive a server, which is killed mid-load, restarted
// on the same data directory, and checked: nothing acknowledged was lost
// (verifyAcks), and every task's state agrees with its executions
// (checkTaskConsistent). The ledger and the load are shared with the
// cluster tests.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ackLedger is what the server acknowledged, across every round.
type ackLedger struct {
	mu        sync.Mutex
	submitted map[string][]byte // task id → payload
	committed map[string]string // task id → lease whose Commit was acknowledged
	completed map[string]string // task id → lease whose Complete was acknowledged
}

func newAckLedger() *ackLedger {
	return &ackLedger{submitted: map[string][]byte{}, committed: map[string]string{}, completed: map[string]string{}}
}

// loadRound drives one round of submitters and workers against one server.
type loadRound struct {
	t         *testing.T
	led       *ackLedger
	namespace string
	queue     string
	acks      atomic.Int64
	finalised atomic.Int64 // completions of finalisation leases
	target    int64
	reached   chan struct{}
	once      sync.Once

	mu     sync.Mutex
	errors map[string]int // "proto/method/code" → count
}

func (l *loadRound) ack() {
	if l.acks.Add(1) >= l.target {
		l.once.Do(func() { close(l.reached) })
	}
}

// failed notes an error of a call made while the server may be dying. An
// answer that cannot come from a dying server (bad input, a task that went
// missing) fails the test.
func (l *loadRound) failed(ctx context.Context, c *apiClients, method string, err error) {
	if ctx.Err() != nil {
		return
	}
	code := connect.CodeOf(err)
	l.mu.Lock()
	l.errors[c.proto+"/"+method+"/"+code.String()]++
	l.mu.Unlock()
	switch code {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeResourceExhausted:
		l.t.Errorf("%s %s: %v", c.proto, method, err)
	}
	time.Sleep(5 * time.Millisecond) // do not spin against a dead server
}

var e2eRetryPolicy = &tenurev1.RetryPolicy{
	MaxAttempts:    50,
	InitialBackoff: durationpb.New(10 * time.Millisecond),
	MaxBackoff:     durationpb.New(100 * time.Millisecond),
}

func (l *loadRound) submitter(ctx context.Context, c *apiClients, rng *rand.Rand) {
	for ctx.Err() == nil {
		n := 1
		if rng.IntN(5) == 0 {
			n = 1 + rng.IntN(5)
		}
		reqs := make([]*tenurev1.SubmitRequest, n)
		for i := range reqs {
			payload := make([]byte, 8+rng.IntN(56))
			for j := range payload {
				payload[j] = byte(rng.Uint32())
			}
			reqs[i] = &tenurev1.SubmitRequest{
				Namespace:       l.namespace,
				Queue:           l.queue,
				Payload:         payload,
				ExecutionWindow: durationpb.New(time.Second),
				RetryPolicy:     e2eRetryPolicy,
			}
		}
		callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		if n == 1 {
			resp, err := c.tasks.Submit(callCtx, connect.NewRequest(reqs[0]))
			if err != nil {
				l.failed(ctx, c, "Submit", err)
			} else {
				l.submitted(resp.Msg.GetTask().GetTaskId(), reqs[0].Payload)
			}
		} else {
			resp, err := c.tasks.SubmitBatch(callCtx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: reqs}))
			switch {
			case err != nil:
				l.failed(ctx, c, "SubmitBatch", err)
			case len(resp.Msg.GetTaskIds()) != n:
				l.t.Errorf("%s SubmitBatch of %d answered %d task ids", c.proto, n, len(resp.Msg.GetTaskIds()))
			default:
				for i, id := range resp.Msg.GetTaskIds() {
					l.submitted(id, reqs[i].Payload)
				}
			}
		}
		cancel()
	}
}

func (l *loadRound) submitted(id string, payload []byte) {
	l.led.mu.Lock()
	l.led.submitted[id] = payload
	l.led.mu.Unlock()
	l.ack()
}

func (l *loadRound) worker(ctx context.Context, c *apiClients, name string, rng *rand.Rand) {
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		resp, err := c.worker.Lease(callCtx, connect.NewRequest(&tenurev1.LeaseRequest{
			WorkerId:  name,
			Namespace: l.namespace,
			Queue:     l.queue,
			MaxTasks:  uint32(1 + rng.IntN(4)),
			Wait:      durationpb.New(200 * time.Millisecond),
		}))
		cancel()
		if err != nil {
			l.failed(ctx, c, "Lease", err)
			continue
		}
		for _, lt := range resp.Msg.GetTasks() {
			if ctx.Err() != nil {
				return
			}
			l.work(ctx, c, rng, lt)
		}
	}
}

// work finishes one leased task in one of the ways a worker may.
func (l *loadRound) work(ctx context.Context, c *apiClients, rng *rand.Rand, lt *tenurev1.LeasedTask) {
	id, lease := lt.GetTaskId(), lt.GetLeaseId()
	if lt.GetCommitted() {
		// Finalisation: an earlier attempt committed; complete without
		// committing again.
		l.led.mu.Lock()
		by, ok := l.led.committed[id]
		l.led.mu.Unlock()
		if ok && !bytes.Equal(lt.GetCommittedResult(), []byte("r:"+by)) {
			l.t.Errorf("finalisation lease of task %s carries committed result %q, want %q", id, lt.GetCommittedResult(), "r:"+by)
		}
		if l.complete(ctx, c, id, lease, nil) {
			l.finalised.Add(1)
		}
		return
	}
	switch r := rng.IntN(100); {
	case r < 10:
		callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		_, err := c.worker.Heartbeat(callCtx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: id, LeaseId: lease}))
		cancel()
		if err != nil {
			l.failed(ctx, c, "Heartbeat", err)
			return
		}
		l.complete(ctx, c, id, lease, []byte("c:"+lease))
	case r < 50:
		l.complete(ctx, c, id, lease, []byte("c:"+lease))
	case r < 95:
		if !l.commit(ctx, c, id, lease) {
			return
		}
		if r < 85 { // else: "crash" after the commit; the task comes back to be finalised
			l.complete(ctx, c, id, lease, []byte("ignored"))
		}
	default:
		callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		_, err := c.worker.Fail(callCtx, connect.NewRequest(&tenurev1.FailRequest{TaskId: id, LeaseId: lease, Reason: "e2e: transient"}))
		cancel()
		if err != nil {
			l.failed(ctx, c, "Fail", err)
		}
	}
}

func (l *loadRound) commit(ctx context.Context, c *apiClients, id, lease string) bool {
	callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
	defer cancel()
	resp, err := c.worker.Commit(callCtx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: id, LeaseId: lease, Result: []byte("r:" + lease)}))
	if err != nil {
		l.failed(ctx, c, "Commit", err)
		return false
	}
	if tok := resp.Msg.GetFencingToken(); tok.GetTaskId() != id || tok.GetAttempt() == 0 {
		l.t.Errorf("Commit of task %s answered fencing token %v", id, tok)
	}
	l.acked(l.led.committed, "commits", id, lease)
	return true
}

func (l *loadRound) complete(ctx context.Context, c *apiClients, id, lease string, result []byte) bool {
	callCtx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
	defer cancel()
	if _, err := c.worker.Complete(callCtx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: id, LeaseId: lease, Result: result})); err != nil {
		l.failed(ctx, c, "Complete", err)
		return false
	}
	l.acked(l.led.completed, "completions", id, lease)
	return true
}

// acked records in byLease (the ledger's committed or completed) that
// lease's call on task id was acknowledged: another lease's acknowledged
// before it is an error.
func (l *loadRound) acked(byLease map[string]string, calls, id, lease string) {
	l.led.mu.Lock()
	if prev, ok := byLease[id]; ok && prev != lease {
		l.t.Errorf("task %s: %s by lease %s and by lease %s were both acknowledged", id, calls, prev, lease)
	}
	byLease[id] = lease
	l.led.mu.Unlock()
	l.ack()
}

// e2eSeed is TENURE_E2E_SEED if set, else fresh; it logs the seed, to
// rerun the test with.
func e2eSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TENURE_E2E_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_E2E_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with TENURE_E2E_SEED=%d)", seed, seed)
	return seed
}

func TestKill9UnderLoad(t *testing.T) {
	t.Parallel()
	const (
		rounds    = 3
		namespace = "e2e"
		queue     = "load"
		// Bounds the load of a round if the server is slower than the
		// target assumes; not an assertion.
		maxRound = 8 * time.Second
	)
	seed := e2eSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	led := newAckLedger()

	for round := 1; round <= rounds; round++ {
		srv := startServerProc(t, dir)
		if round > 1 {
			verifyAcks(t, srv, led, namespace)
		}
		l := &loadRound{
			t: t, led: led, namespace: namespace, queue: queue,
			target:  int64(300 + rng.IntN(2701)),
			reached: make(chan struct{}),
			errors:  map[string]int{},
		}
		var killedAt int64
		kill9Round{
			seed: seed, round: round, maxRound: maxRound, reached: l.reached,
			client: func(ctx context.Context, c *apiClients, _ int, r *rand.Rand) { l.submitter(ctx, c, r) },
			worker: func(ctx context.Context, c *apiClients, _ int, name string, r *rand.Rand) { l.worker(ctx, c, name, r) },
			killing: func(reached bool) {
				killedAt = l.acks.Load()
				if !reached {
					t.Logf("round %d: target of %d acknowledgements not reached in %v; killing at %d", round, l.target, maxRound, killedAt)
				}
			},
		}.run(t, srv)
		led.mu.Lock()
		t.Logf("round %d: killed -9 after %d acknowledgements (target %d; %d by the time the load stopped; %d finalisations); totals: %d submitted, %d committed, %d completed; errors while dying: %v",
			round, killedAt, l.target, l.acks.Load(), l.finalised.Load(), len(led.submitted), len(led.committed), len(led.completed), l.errors)
		led.mu.Unlock()
		if t.Failed() {
			return
		}
	}
	srv := startServerProc(t, dir)
	verifyAcks(t, srv, led, namespace)
}

// kill9Round is the load of one round of a kill -9 test: four clients
// and four workers, over a JSON and a gRPC client alternately, each with
// a random source of its own (from the seed, the round and its place),
// against a server that is killed with -9 once the load reached its
// target, or after maxRound.
type kill9Round struct {
	seed     uint64
	round    int
	maxRound time.Duration
	reached  <-chan struct{} // closed once the load reached its target
	client   func(ctx context.Context, c *apiClients, i int, r *rand.Rand)
	worker   func(ctx context.Context, c *apiClients, i int, name string, r *rand.Rand)
	killing  func(reached bool) // if set, called just before the kill
}

// run starts the load on srv, kills srv with -9 while it runs, then stops
// the load and waits for it.
func (k kill9Round) run(t *testing.T, srv *serverProc) {
	t.Helper()
	js, gs := newJSONClients(t, srv), newGRPCClients(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, c := range []*apiClients{js, gs, js, gs} {
		r := rand.New(rand.NewPCG(k.seed, uint64(k.round*100+i)))
		wg.Go(func() { k.client(ctx, c, i, r) })
	}
	for i, c := range []*apiClients{js, gs, js, gs} {
		r := rand.New(rand.NewPCG(k.seed, uint64(k.round*100+50+i)))
		name := fmt.Sprintf("w%d-%s-%d", k.round, c.proto, i)
		wg.Go(func() { k.worker(ctx, c, i, name, r) })
	}
	timer := time.NewTimer(k.maxRound)
	reached := true
	select {
	case <-k.reached:
	case <-timer.C:
		reached = false
	case <-srv.done:
		cancel()
		wg.Wait()
		t.Fatalf("round %d: the server exited under load: %v", k.round, srv.waitErr)
	}
	timer.Stop()
	if k.killing != nil {
		k.killing(reached)
	}
	srv.kill9(t) // while the load runs
	cancel()
	wg.Wait()
}

// verifyAcks checks every acknowledgement of led against the restarted server,
// and every task's state against its executions.
func verifyAcks(t *testing.T, srv *serverProc, led *ackLedger, namespace string) {
	t.Helper()
	c := newJSONClients(t, srv)
	tasks := listAllTasks(t, c, namespace)
	byID := make(map[string]*tenurev1.Task, len(tasks))
	for _, task := range tasks {
		byID[task.GetTaskId()] = task
		checkTaskConsistent(t, task)
	}

	led.mu.Lock()
	defer led.mu.Unlock()
	lost := 0
	for id, payload := range led.submitted {
		task := byID[id]
		if task == nil {
			if lost++; lost <= 10 {
				t.Errorf("acknowledged submit of task %s is lost", id)
			}
			continue
		}
		if !bytes.Equal(task.GetPayload(), payload) {
			t.Errorf("task %s: payload %x, want %x", id, task.GetPayload(), payload)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged submits are lost", lost, len(led.submitted))
	}
	for id, lease := range led.committed {
		task := byID[id]
		if task == nil {
			t.Errorf("task %s with an acknowledged commit is missing", id)
			continue
		}
		st := task.GetState()
		if st != tenurev1.TaskState_TASK_STATE_COMMITTED && st != tenurev1.TaskState_TASK_STATE_COMPLETED {
			t.Errorf("task %s: commit by lease %s was acknowledged, but the task is %v", id, lease, st)
		}
		e := executionOf(task, lease)
		switch {
		case e == nil:
			t.Errorf("task %s: commit by lease %s was acknowledged, but no execution has that lease", id, lease)
		case e.GetCommittedAt() == nil:
			t.Errorf("task %s: commit by lease %s was acknowledged, but its execution has no committed_at (status %v)", id, lease, e.GetStatus())
		}
		if !bytes.Equal(task.GetResult(), []byte("r:"+lease)) {
			t.Errorf("task %s: result %q, want the committed %q", id, task.GetResult(), "r:"+lease)
		}
	}
	for id, lease := range led.completed {
		task := byID[id]
		if task == nil {
			t.Errorf("task %s with an acknowledged completion is missing", id)
			continue
		}
		if st := task.GetState(); st != tenurev1.TaskState_TASK_STATE_COMPLETED {
			t.Errorf("task %s: completion by lease %s was acknowledged, but the task is %v", id, lease, st)
		}
		if e := executionOf(task, lease); e == nil || e.GetStatus() != tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE {
			t.Errorf("task %s: completion by lease %s was acknowledged, but its execution is %v", id, lease, e)
		}
	}
	counts := map[tenurev1.TaskState]int{}
	for _, task := range tasks {
		counts[task.GetState()]++
	}
	t.Logf("after restart: %d tasks %v; acknowledged: %d submits, %d commits, %d completions",
		len(tasks), counts, len(led.submitted), len(led.committed), len(led.completed))
}

func executionOf(task *tenurev1.Task, lease string) *tenurev1.Execution {
	for _, e := range task.GetExecutions() {
		if e.GetLeaseId() == lease {
			return e
		}
	}
	return nil
}

// checkTaskConsistent checks that a task's state is one of the enum's and agrees with
// its executions.
func checkTaskConsistent(t *testing.T, task *tenurev1.Task) {
	t.Helper()
	id, st := task.GetTaskId(), task.GetState()
	bad := func(format string, args ...any) {
		t.Errorf("task %s (%v): %s", id, st, fmt.Sprintf(format, args...))
	}
	execs := task.GetExecutions()
	if int(task.GetAttempt()) != len(execs) {
		bad("attempt %d but %d executions", task.GetAttempt(), len(execs))
	}
	var committed *tenurev1.Execution
	commits := 0
	for i, e := range execs {
		if e.GetAttempt() != uint32(i+1) {
			bad("execution %d has attempt %d", i, e.GetAttempt())
		}
		if e.GetLeaseId() == "" {
			bad("execution %d has no lease id", i)
		}
		if _, ok := tenurev1.ExecutionStatus_name[int32(e.GetStatus())]; !ok || e.GetStatus() == tenurev1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED {
			bad("execution %d has status %v", i, e.GetStatus())
		}
		running := e.GetStatus() == tenurev1.ExecutionStatus_EXECUTION_STATUS_LEASED || e.GetStatus() == tenurev1.ExecutionStatus_EXECUTION_STATUS_IN_PROGRESS
		if running && (i != len(execs)-1 || task.GetLeaseId() != e.GetLeaseId()) {
			bad("execution %d is %v without holding the task's lease", i, e.GetStatus())
		}
		if e.GetCommittedAt() != nil {
			commits++
			committed = e
			if s := e.GetStatus(); s != tenurev1.ExecutionStatus_EXECUTION_STATUS_COMMITTED && s != tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE {
				bad("execution %d committed but is %v", i, s)
			}
		}
	}
	if commits > 1 {
		bad("%d executions have committed_at; at most one may", commits)
	}
	if committed != nil {
		lease := committed.GetLeaseId()
		if r := string(task.GetResult()); r != "r:"+lease && r != "c:"+lease {
			bad("result %q is not the one lease %s committed", r, lease)
		}
	}
	var last *tenurev1.Execution
	if len(execs) > 0 {
		last = execs[len(execs)-1]
	}
	hasLease := task.GetLeaseId() != ""
	if hasLease && (last == nil || last.GetLeaseId() != task.GetLeaseId()) {
		bad("lease %s is not its latest execution's", task.GetLeaseId())
	}
	if hasLease != (task.GetLeaseExpiry() != nil) {
		bad("lease_id %q but lease_expiry %v", task.GetLeaseId(), task.GetLeaseExpiry())
	}
	switch st {
	case tenurev1.TaskState_TASK_STATE_WAITING, tenurev1.TaskState_TASK_STATE_FAILED:
		if hasLease || commits != 0 {
			bad("lease %q and %d commits; want none", task.GetLeaseId(), commits)
		}
	case tenurev1.TaskState_TASK_STATE_LEASED:
		if !hasLease || commits != 0 {
			bad("lease %q and %d commits; want a lease and no commit", task.GetLeaseId(), commits)
		}
	case tenurev1.TaskState_TASK_STATE_COMMITTED:
		if commits != 1 {
			bad("%d commits, want 1", commits)
		}
	case tenurev1.TaskState_TASK_STATE_COMPLETED:
		if hasLease || commits != 1 {
			bad("lease %q and %d commits; want no lease and 1 commit", task.GetLeaseId(), commits)
		}
		if last == nil || last.GetStatus() != tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE {
			bad("latest execution is %v, want DONE", last)
		}
	case tenurev1.TaskState_TASK_STATE_DEAD:
		if hasLease {
			bad("holds lease %q", task.GetLeaseId())
		}
	default:
		bad("not a task state")
	}
}

// listAllTasks pages through every task of a namespace.
func listAllTasks(t *testing.T, c *apiClients, namespace string) []*tenurev1.Task {
	t.Helper()
	var out []*tenurev1.Task
	seen := map[string]bool{}
	token := ""
	for page := 0; ; page++ {
		if page > 10_000 {
			t.Fatalf("ListTasks did not end after %d pages", page)
		}
		ctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c.tasks.ListTasks(ctx, connect.NewRequest(&tenurev1.ListTasksRequest{Namespace: namespace, PageSize: 1000, PageToken: token}))
		cancel()
		if err != nil {
			t.Fatalf("ListTasks(page %d): %v", page, err)
		}
		for _, task := range resp.Msg.GetTasks() {
			if seen[task.GetTaskId()] {
				t.Errorf("ListTasks returned task %s twice", task.GetTaskId())
			}
			seen[task.GetTaskId()] = true
			out = append(out, task)
		}
		token = resp.Msg.GetNextPageToken()
		if token == "" {
			return out
		}
	}
}
