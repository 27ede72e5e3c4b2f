package main

// Linearizability of the real server across kill -9 (issue 5, item 6):
// concurrent clients and workers over HTTP/JSON and gRPC call `tenure
// server`, which is killed with SIGKILL in the middle of the history and
// restarted on the same data directory, three times. Every call is
// recorded with its invoke and return times and its answer; calls in
// flight at a kill (or refused while the server was down) are pending. At
// the end a reader lists every task, and porcupine checks the history
// against a model of the task state machine.
//
// The model is the twin of internal/coordinator/model_test.go (test files
// cannot be shared between packages), adapted to the API: FAILED_PRECONDITION
// stands for both "lease lost" and "wrong state", ALREADY_EXISTS for
// "already committed". See that file for why the model has no clock.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/anishathalye/porcupine"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestLinearizabilityKill9(t *testing.T) {
	t.Parallel()
	const (
		rounds    = 3
		namespace = "lin"
		queue     = "q"
		// Bounds a round if the server is slower than the target assumes;
		// not an assertion.
		maxRound = 4 * time.Second
	)
	seed := e2eSeed(t)
	t.Logf("seed %d (rerun with TENURE_E2E_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x1e))
	dir := t.TempDir()
	rec := &linRecorder{}
	for round := 1; round <= rounds; round++ {
		srv := startServerProc(t, dir)
		js, gs := newJSONClients(srv), newGRPCClients(srv)
		r := &linRound{t: t, rec: rec, namespace: namespace, queue: queue, round: round,
			target: int64(400 + rng.IntN(1200)), reached: make(chan struct{})}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i, c := range []*apiClients{js, gs, js, gs} {
			rr := rand.New(rand.NewPCG(seed, uint64(round*100+i)))
			wg.Go(func() { r.client(ctx, c, i, rr) })
		}
		for i, c := range []*apiClients{js, gs, js, gs} {
			rr := rand.New(rand.NewPCG(seed, uint64(round*100+50+i)))
			wg.Go(func() { r.worker(ctx, c, 4+i, fmt.Sprintf("w%d-%s-%d", round, c.proto, i), rr) })
		}
		timer := time.NewTimer(maxRound)
		select {
		case <-r.reached:
		case <-timer.C:
		case <-srv.done:
			t.Fatalf("round %d: the server exited under load: %v", round, srv.waitErr)
		}
		timer.Stop()
		srv.kill9(t) // while the calls run
		cancel()
		wg.Wait()
		js.close()
		gs.close()
		t.Logf("round %d: killed -9 after %d answered calls", round, r.answered.Load())
		if t.Failed() {
			return
		}
	}

	// The reader: every task, page by page; each page is one read of its
	// tasks.
	srv := startServerProc(t, dir)
	c := newJSONClients(srv)
	defer c.close()
	var final []*tenurev1.Task
	token := ""
	for {
		call := rec.call()
		cctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c.tasks.ListTasks(cctx, connect.NewRequest(&tenurev1.ListTasksRequest{Namespace: namespace, PageSize: 1000, PageToken: token}))
		cancel()
		if err != nil {
			t.Fatalf("ListTasks: %v", err)
		}
		ret := rec.call()
		for _, task := range resp.Msg.GetTasks() {
			rec.add(porcupine.Operation{ClientId: 8, Call: call, Return: ret,
				Input: linIn{Op: linGet, Task: task.GetTaskId()}, Output: linGetOutput(task)})
		}
		final = append(final, resp.Msg.GetTasks()...)
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	known := map[string]bool{}
	for _, task := range final {
		known[task.GetTaskId()] = true
	}
	// A task some call named but the list lacks is read on its own (it
	// answers not found, which the model rejects if it was acknowledged).
	for _, op := range rec.ops {
		id := op.Input.(linIn).Task
		if id == "" || known[id] {
			continue
		}
		known[id] = true
		call := rec.call()
		cctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c.tasks.GetTask(cctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		cancel()
		out := linOut{}
		switch {
		case err == nil:
			out = linGetOutput(resp.Msg.GetTask())
		case connect.CodeOf(err) == connect.CodeNotFound:
			out.Err = linErrNotFound
		default:
			t.Fatalf("GetTask(%s): %v", id, err)
		}
		rec.add(porcupine.Operation{ClientId: 8, Call: call, Return: rec.call(), Input: linIn{Op: linGet, Task: id}, Output: out})
	}

	resolved := linResolve(rec.pending, final)
	ops := append(slices.Clone(rec.ops), resolved...)
	res, info := porcupine.CheckOperationsVerbose(linModel, ops, time.Minute)
	t.Logf("%d calls (%d answered, %d without an answer, %d of those left a trace), %d tasks: %s",
		len(ops), len(rec.ops), len(rec.pending), len(resolved), len(final), res)
	if res != porcupine.Ok {
		msg := fmt.Sprintf("porcupine: the history is %s", res)
		if f, err := os.CreateTemp("", "tenure-e2e-linearizability-*.html"); err == nil {
			if err := porcupine.Visualize(linModel, info, f); err == nil {
				msg += "; visualisation: " + f.Name()
			}
			f.Close()
		}
		t.Fatalf("%s\n%s", msg, linExplain(ops))
	}
}

// linRound drives the clients and workers of one server process.
type linRound struct {
	t         *testing.T
	rec       *linRecorder
	namespace string
	queue     string
	round     int
	target    int64
	answered  atomic.Int64
	reached   chan struct{}
	once      sync.Once
}

// answer classifies a call's error; pending means the outcome is unknown
// (the server died, or never got the call).
func (r *linRound) answer(op string, err error) (kind string, pending bool) {
	if err == nil {
		if r.answered.Add(1) >= r.target {
			r.once.Do(func() { close(r.reached) })
		}
		return "", false
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return linErrNotFound, false
	case connect.CodeAlreadyExists:
		return linErrAlreadyCommitted, false
	case connect.CodeFailedPrecondition:
		switch op {
		case linFail:
			return linErrFailedPrecondition, false
		case linKill:
			return linErrWrongState, false
		}
		return linErrLeaseLost, false
	case connect.CodeInvalidArgument, connect.CodeResourceExhausted:
		r.t.Errorf("%s: %v", op, err)
	}
	return "", true
}

// do runs one call and records it, with in as fn left it (a submit learns
// its task id from the answer).
func (r *linRound) do(ctx context.Context, client int, in *linIn, fn func(ctx context.Context) (linOut, error)) linOut {
	call := r.rec.call()
	cctx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
	out, err := fn(cctx)
	cancel()
	if err != nil {
		out = linOut{}
		out.Err, out.Pending = r.answer(in.Op, err)
	} else {
		r.answer(in.Op, nil)
	}
	r.rec.done(client, *in, call, out)
	if out.Pending {
		time.Sleep(5 * time.Millisecond) // do not spin against a dead server
	}
	return out
}

func (r *linRound) submitRequest(client, n int, rng *rand.Rand) *tenurev1.SubmitRequest {
	req := &tenurev1.SubmitRequest{
		Namespace:       r.namespace,
		Queue:           r.queue,
		Payload:         fmt.Appendf(nil, "r%d-c%d-%d", r.round, client, n), // unique: see linResolve
		ExecutionWindow: durationpb.New(time.Duration(300+rng.IntN(1200)) * time.Millisecond),
		RetryPolicy: &tenurev1.RetryPolicy{MaxAttempts: uint32(1 + rng.IntN(4)),
			InitialBackoff: durationpb.New(10 * time.Millisecond), MaxBackoff: durationpb.New(50 * time.Millisecond)},
	}
	if rng.IntN(2) == 0 {
		req.RequestId = fmt.Sprintf("r%d-c%d-rq%d", r.round, client, n)
	}
	return req
}

func linSubmitIn(req *tenurev1.SubmitRequest) linIn {
	return linIn{Op: linSubmit, RequestID: req.GetRequestId(), Payload: string(req.GetPayload()), MaxAttempts: req.GetRetryPolicy().GetMaxAttempts()}
}

// client submits (retrying a submit with a request id whose answer did not
// come), reads and kills tasks.
func (r *linRound) client(ctx context.Context, c *apiClients, id int, rng *rand.Rand) {
	var mine []string
	var retry *tenurev1.SubmitRequest
	for n := 0; ctx.Err() == nil; n++ {
		switch p := rng.IntN(100); {
		case p < 45 || retry != nil:
			req := r.submitRequest(id, n, rng)
			if retry != nil {
				req, retry = retry, nil
			}
			in := linSubmitIn(req)
			out := r.do(ctx, id, &in, func(ctx context.Context) (linOut, error) {
				resp, err := c.tasks.Submit(ctx, connect.NewRequest(req))
				if err != nil {
					return linOut{}, err
				}
				in.Task = resp.Msg.GetTask().GetTaskId()
				return linOut{Duplicate: resp.Msg.GetDuplicate()}, nil
			})
			if in.Task != "" {
				mine = append(mine, in.Task)
			}
			if out.Pending && req.GetRequestId() != "" {
				retry = req
			}
		case p < 55:
			reqs := []*tenurev1.SubmitRequest{r.submitRequest(id, n, rng), r.submitRequest(id, 10_000+n, rng)}
			call := r.rec.call()
			cctx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
			resp, err := c.tasks.SubmitBatch(cctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: reqs}))
			cancel()
			kind, pending := r.answer(linSubmit, err)
			ret := r.rec.call()
			for i, req := range reqs {
				in, out := linSubmitIn(req), linOut{Err: kind, Pending: pending}
				if err == nil {
					in.Task, out.Duplicate = resp.Msg.GetResponses()[i].GetTask().GetTaskId(), resp.Msg.GetResponses()[i].GetDuplicate()
					mine = append(mine, in.Task)
				}
				op := porcupine.Operation{ClientId: id, Call: call, Return: ret, Input: in, Output: out}
				if pending {
					op.Return = linPendingEnd
				}
				r.rec.add(op)
			}
		case p < 88 && len(mine) > 0:
			task := mine[rng.IntN(len(mine))]
			r.do(ctx, id, &linIn{Op: linGet, Task: task}, func(ctx context.Context) (linOut, error) {
				resp, err := c.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: task}))
				if err != nil {
					return linOut{}, err
				}
				return linGetOutput(resp.Msg.GetTask()), nil
			})
		case p < 92 && len(mine) > 0:
			task := mine[rng.IntN(len(mine))]
			reason := fmt.Sprintf("kill-r%d-c%d-%d", r.round, id, n)
			r.do(ctx, id, &linIn{Op: linKill, Task: task, Reason: reason}, func(ctx context.Context) (linOut, error) {
				_, err := c.tasks.KillTask(ctx, connect.NewRequest(&tenurev1.KillTaskRequest{TaskId: task, Reason: reason}))
				return linOut{}, err
			})
		}
	}
}

// worker leases tasks and finishes each in one of the ways a worker may.
func (r *linRound) worker(ctx context.Context, c *apiClients, id int, name string, rng *rand.Rand) {
	for n := 0; ctx.Err() == nil; n++ {
		worker := fmt.Sprintf("%s.%d", name, n) // one id per call: see linResolve
		call := r.rec.call()
		cctx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		resp, err := c.worker.Lease(cctx, connect.NewRequest(&tenurev1.LeaseRequest{
			WorkerId: worker, Namespace: r.namespace, Queue: r.queue, MaxTasks: uint32(1 + rng.IntN(2)), Wait: durationpb.New(100 * time.Millisecond),
		}))
		cancel()
		if _, pending := r.answer(linLease, err); pending {
			r.rec.done(id, linIn{Op: linLease, Worker: worker}, call, linOut{Pending: true})
			time.Sleep(5 * time.Millisecond)
			continue
		}
		ret := r.rec.call()
		for _, lt := range resp.Msg.GetTasks() {
			r.rec.add(porcupine.Operation{ClientId: id, Call: call, Return: ret,
				Input:  linIn{Op: linLease, Task: lt.GetTaskId(), Worker: worker},
				Output: linOut{LeaseID: lt.GetLeaseId(), Attempt: lt.GetAttempt(), Committed: lt.GetCommitted(), CommittedResult: string(lt.GetCommittedResult())}})
		}
		for _, lt := range resp.Msg.GetTasks() {
			if ctx.Err() != nil {
				return
			}
			r.work(ctx, c, id, rng, lt)
		}
	}
}

func (r *linRound) work(ctx context.Context, c *apiClients, id int, rng *rand.Rand, lt *tenurev1.LeasedTask) {
	task, lease := lt.GetTaskId(), lt.GetLeaseId()
	commit := func() linOut {
		in := linIn{Op: linCommit, Task: task, Lease: lease, Result: "r:" + lease}
		return r.do(ctx, id, &in, func(ctx context.Context) (linOut, error) {
			resp, err := c.worker.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: task, LeaseId: lease, Result: []byte(in.Result)}))
			if err != nil {
				return linOut{}, err
			}
			return linOut{Attempt: resp.Msg.GetFencingToken().GetAttempt()}, nil
		})
	}
	complete := func(result string) linOut {
		in := linIn{Op: linComplete, Task: task, Lease: lease, Result: result}
		return r.do(ctx, id, &in, func(ctx context.Context) (linOut, error) {
			_, err := c.worker.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: task, LeaseId: lease, Result: []byte(result)}))
			return linOut{}, err
		})
	}
	if lt.GetCommitted() {
		complete("") // finalise: the committed result stays
		return
	}
	switch p := rng.IntN(100); {
	case p < 30:
		if out := commit(); out.Err == "" && !out.Pending && rng.IntN(5) > 0 {
			complete("x:" + lease)
		}
	case p < 55:
		complete("r:" + lease)
	case p < 65:
		r.do(ctx, id, &linIn{Op: linHeartbeat, Task: task, Lease: lease}, func(ctx context.Context) (linOut, error) {
			_, err := c.worker.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: task, LeaseId: lease}))
			return linOut{}, err
		})
		complete("r:" + lease)
	case p < 80:
		in := linIn{Op: linFail, Task: task, Lease: lease, Permanent: rng.IntN(3) == 0, Reason: "fail-" + lease}
		r.do(ctx, id, &in, func(ctx context.Context) (linOut, error) {
			resp, err := c.worker.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{TaskId: task, LeaseId: lease, Reason: in.Reason, Permanent: in.Permanent}))
			if err != nil {
				return linOut{}, err
			}
			return linOut{Retry: resp.Msg.GetState() == tenurev1.TaskState_TASK_STATE_WAITING}, nil
		})
	case p < 84 && lt.GetExecutionWindow().AsDuration() <= 600*time.Millisecond:
		// Stalls past its lease, then tries: it must be refused unless
		// nobody else took the task (the model accepts either).
		select {
		case <-ctx.Done():
			return
		case <-time.After(lt.GetExecutionWindow().AsDuration() + 50*time.Millisecond):
		}
		commit()
	case p < 94:
		commit() // crashes after the commit; the task comes back to be finalised
	default:
		// Crashes before doing anything; the lease expires.
	}
}

// --- the model (twin of internal/coordinator/model_test.go) ---

const (
	linSubmit    = "submit"
	linLease     = "lease"
	linCommit    = "commit"
	linComplete  = "complete"
	linFail      = "fail"
	linHeartbeat = "heartbeat"
	linGet       = "get"
	linKill      = "kill"

	linErrNotFound         = "not_found"
	linErrLeaseLost        = "lease_lost"
	linErrAlreadyCommitted = "already_committed"
	linErrWrongState       = "wrong_state"
	// linErrFailedPrecondition is Fail's FAILED_PRECONDITION: lease lost or
	// wrong state.
	linErrFailedPrecondition = "failed_precondition"
)

type linIn struct {
	Op          string
	Task        string
	Lease       string
	RequestID   string
	Payload     string
	MaxAttempts uint32
	Result      string
	Permanent   bool
	Reason      string
	Worker      string
}

type linOut struct {
	Pending         bool
	Unchecked       bool
	Err             string
	Duplicate       bool
	LeaseID         string
	Attempt         uint32
	Committed       bool
	CommittedResult string
	Retry           bool
	State           string
	CurLease        string
	CommittedBy     string
	Result          string
}

type linTaskState struct {
	Exists      bool
	RequestID   string
	MaxAttempts uint32
	State       string
	Attempt     uint32
	Lease       string
	CommittedBy string
	Result      string
	DoneBy      string
}

const (
	lsWaiting   = "WAITING"
	lsLeased    = "LEASED"
	lsCommitted = "COMMITTED"
	lsCompleted = "COMPLETED"
	lsFailed    = "FAILED"
	lsDead      = "DEAD"
)

func (s linTaskState) expired() linTaskState {
	if s.Lease == "" {
		return s
	}
	n := s
	n.Lease = ""
	if s.State == lsLeased {
		n.State = lsFailed
		if s.Attempt < s.MaxAttempts {
			n.State = lsWaiting
		}
	}
	return n
}

func (s linTaskState) refused(lease, err string) (bool, linTaskState) {
	other := s.CommittedBy != "" && s.CommittedBy != lease
	if err == linErrFailedPrecondition {
		err = linErrLeaseLost
	}
	switch {
	case err == linErrAlreadyCommitted && other, err == linErrLeaseLost && !other:
	default:
		return false, s
	}
	if s.Lease == lease {
		return true, s.expired()
	}
	return true, s
}

func linTerminal(st string) bool { return st == lsCompleted || st == lsFailed || st == lsDead }

func linStep(st, in0, out0 any) (bool, any) {
	s, in, out := st.(linTaskState), in0.(linIn), out0.(linOut)
	if in.Op == linSubmit {
		created := linTaskState{Exists: true, RequestID: in.RequestID, MaxAttempts: in.MaxAttempts, State: lsWaiting}
		same := s.Exists && in.RequestID != "" && s.RequestID == in.RequestID
		switch {
		case out.Pending:
			if !s.Exists {
				return true, created
			}
			return same, s
		case out.Err != "":
			return false, s
		case out.Duplicate:
			return same, s
		}
		return !s.Exists, created
	}
	if out.Pending {
		return false, s
	}
	if !s.Exists || out.Err == linErrNotFound {
		return !s.Exists && out.Err == linErrNotFound, s
	}
	switch in.Op {
	case linLease:
		for _, x := range []linTaskState{s, s.expired()} {
			if out.Err != "" || x.Lease != "" || (x.State != lsWaiting && x.State != lsCommitted) ||
				out.Attempt != x.Attempt+1 || out.Committed != (x.State == lsCommitted) ||
				out.Committed && !out.Unchecked && out.CommittedResult != x.Result {
				continue
			}
			n := x
			n.Lease, n.Attempt = out.LeaseID, out.Attempt
			if x.State == lsWaiting {
				n.State = lsLeased
			}
			return true, n
		}
		return false, s
	case linCommit:
		if s.CommittedBy == in.Lease {
			return out.Err == "", s
		}
		if out.Err != "" {
			return s.refused(in.Lease, out.Err)
		}
		if s.Lease != in.Lease || s.State != lsLeased || (!out.Unchecked && out.Attempt != s.Attempt) {
			return false, s
		}
		n := s
		n.State, n.CommittedBy, n.Result = lsCommitted, in.Lease, in.Result
		return true, n
	case linComplete:
		if s.State == lsCompleted && s.DoneBy == in.Lease {
			return out.Err == "", s
		}
		if out.Err != "" {
			return s.refused(in.Lease, out.Err)
		}
		if s.Lease != in.Lease || (s.State != lsLeased && s.State != lsCommitted) {
			return false, s
		}
		n := s
		if s.State == lsLeased {
			n.CommittedBy, n.Result = in.Lease, in.Result
		}
		n.State, n.Lease, n.DoneBy = lsCompleted, "", in.Lease
		return true, n
	case linFail:
		switch out.Err {
		case "":
			if s.Lease != in.Lease || s.State != lsLeased {
				return false, s
			}
			retry := !in.Permanent && s.Attempt < s.MaxAttempts
			if !out.Unchecked && out.Retry != retry {
				return false, s
			}
			n := s
			n.Lease, n.State = "", lsFailed
			if retry {
				n.State = lsWaiting
			}
			return true, n
		case linErrFailedPrecondition:
			// A committed task cannot fail (its lease stays), or the lease
			// was lost. Taking the first when it fits defers the expiry,
			// which accepts everything the second would.
			if s.Lease == in.Lease && s.State == lsCommitted {
				return true, s
			}
		}
		return s.refused(in.Lease, out.Err)
	case linHeartbeat:
		if out.Err == "" {
			return s.Lease == in.Lease, s
		}
		return s.refused(in.Lease, out.Err)
	case linKill:
		switch out.Err {
		case "":
			if linTerminal(s.State) {
				return false, s
			}
			n := s
			n.State, n.Lease = lsDead, ""
			return true, n
		case linErrWrongState:
			for _, x := range []linTaskState{s, s.expired()} {
				if linTerminal(x.State) {
					return true, x
				}
			}
		}
		return false, s
	case linGet:
		for _, x := range []linTaskState{s, s.expired()} {
			if x.State == out.State && x.Attempt == out.Attempt && x.Lease == out.CurLease &&
				x.CommittedBy == out.CommittedBy && x.Result == out.Result {
				return true, x
			}
		}
		return false, s
	}
	panic("model: unknown operation " + in.Op)
}

func linShort(id string) string {
	if len(id) > 8 {
		return "…" + id[len(id)-6:]
	}
	if id == "" {
		return "-"
	}
	return id
}

func linDescribe(in0, out0 any) string {
	in, out := in0.(linIn), out0.(linOut)
	var b strings.Builder
	switch in.Op {
	case linSubmit:
		fmt.Fprintf(&b, "submit(rid=%q, attempts=%d)", in.RequestID, in.MaxAttempts)
	case linLease:
		fmt.Fprintf(&b, "lease(worker=%s)", in.Worker)
	case linCommit, linComplete:
		fmt.Fprintf(&b, "%s(%s, %q)", in.Op, linShort(in.Lease), in.Result)
	case linFail:
		fmt.Fprintf(&b, "fail(%s, permanent=%v)", linShort(in.Lease), in.Permanent)
	case linHeartbeat:
		fmt.Fprintf(&b, "heartbeat(%s)", linShort(in.Lease))
	default:
		b.WriteString(in.Op + "()")
	}
	b.WriteString(" -> ")
	switch {
	case out.Pending:
		b.WriteString("no answer")
	case out.Err != "":
		b.WriteString(out.Err)
	case in.Op == linSubmit:
		fmt.Fprintf(&b, "%s duplicate=%v", linShort(in.Task), out.Duplicate)
	case in.Op == linLease:
		fmt.Fprintf(&b, "lease %s attempt %d committed=%v", linShort(out.LeaseID), out.Attempt, out.Committed)
	case in.Op == linFail:
		fmt.Fprintf(&b, "ok retry=%v", out.Retry)
	case in.Op == linGet:
		fmt.Fprintf(&b, "%s attempt %d lease %s committed by %s result %q", out.State, out.Attempt, linShort(out.CurLease), linShort(out.CommittedBy), out.Result)
	default:
		b.WriteString("ok")
	}
	if out.Unchecked {
		b.WriteString(" (recovered from the final state)")
	}
	return b.String()
}

var linModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linIn).Task
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init:              func() any { return linTaskState{} },
	Step:              linStep,
	DescribeOperation: linDescribe,
	DescribeState: func(st any) string {
		s := st.(linTaskState)
		if !s.Exists {
			return "no task"
		}
		return fmt.Sprintf("%s attempt %d/%d lease %s committed by %s result %q", s.State, s.Attempt, s.MaxAttempts, linShort(s.Lease), linShort(s.CommittedBy), s.Result)
	},
}

// linExplain lists the operations of the first task that is not
// linearizable.
func linExplain(ops []porcupine.Operation) string {
	for _, part := range linModel.Partition(ops) {
		if porcupine.CheckOperationsTimeout(linModel, part, 10*time.Second) != porcupine.Illegal {
			continue
		}
		part = slices.Clone(part)
		slices.SortStableFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var b strings.Builder
		fmt.Fprintf(&b, "task %s is not linearizable; its operations in call order:", part[0].Input.(linIn).Task)
		for _, op := range part {
			ret := fmt.Sprint(op.Return)
			if op.Return == linPendingEnd {
				ret = "∞"
			}
			fmt.Fprintf(&b, "\n  [%d, %s] client %d: %s", op.Call, ret, op.ClientId, linDescribe(op.Input, op.Output))
		}
		return b.String()
	}
	return "(no single task is illegal on its own)"
}

const linPendingEnd = math.MaxInt64

// linRecorder collects the history; times are a logical counter.
type linRecorder struct {
	now     atomic.Int64
	mu      sync.Mutex
	ops     []porcupine.Operation
	pending []porcupine.Operation
}

func (r *linRecorder) call() int64 { return r.now.Add(1) }

func (r *linRecorder) add(op porcupine.Operation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op.Output.(linOut).Pending {
		op.Return = linPendingEnd
		r.pending = append(r.pending, op)
		return
	}
	r.ops = append(r.ops, op)
}

func (r *linRecorder) done(client int, in linIn, call int64, out linOut) {
	r.add(porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: r.now.Add(1)})
}

// linGetOutput is what a read of task shows.
func linGetOutput(task *tenurev1.Task) linOut {
	out := linOut{
		State:    strings.TrimPrefix(task.GetState().String(), "TASK_STATE_"),
		Attempt:  task.GetAttempt(),
		CurLease: task.GetLeaseId(),
		Result:   string(task.GetResult()),
	}
	for _, e := range task.GetExecutions() {
		if e.GetCommittedAt() != nil {
			out.CommittedBy = e.GetLeaseId()
		}
	}
	return out
}

// linResolve turns the calls that got no answer into what the final state
// says they did, dropping those that left no trace; see resolvePending in
// internal/coordinator/model_test.go. Inputs are unique where it matters:
// payloads, worker ids per Lease call, Fail and Kill reasons.
func linResolve(pending []porcupine.Operation, final []*tenurev1.Task) []porcupine.Operation {
	byPayload := map[string][]*tenurev1.Task{}
	byID := map[string]*tenurev1.Task{}
	byWorker := map[string][]*tenurev1.Task{}
	for _, t := range final {
		byPayload[string(t.GetPayload())] = append(byPayload[string(t.GetPayload())], t)
		byID[t.GetTaskId()] = t
		for _, e := range t.GetExecutions() {
			byWorker[e.GetWorkerId()] = append(byWorker[e.GetWorkerId()], t)
		}
	}
	exec := func(t *tenurev1.Task, lease string) *tenurev1.Execution {
		for _, e := range t.GetExecutions() {
			if e.GetLeaseId() == lease {
				return e
			}
		}
		return nil
	}
	var out []porcupine.Operation
	for _, op := range pending {
		in := op.Input.(linIn)
		t := byID[in.Task]
		switch in.Op {
		case linSubmit:
			for _, t := range byPayload[in.Payload] {
				if t.GetRequestId() == in.RequestID {
					in.Task = t.GetTaskId()
					op.Input, op.Output = in, linOut{Pending: true}
					out = append(out, op)
				}
			}
			continue
		case linLease:
			for _, t := range byWorker[in.Worker] {
				committedAt := uint32(math.MaxUint32)
				for _, e := range t.GetExecutions() {
					if e.GetCommittedAt() != nil {
						committedAt = e.GetAttempt()
					}
				}
				for _, e := range t.GetExecutions() {
					if e.GetWorkerId() == in.Worker {
						in.Task = t.GetTaskId()
						op.Input = in
						op.Output = linOut{Unchecked: true, LeaseID: e.GetLeaseId(), Attempt: e.GetAttempt(), Committed: e.GetAttempt() > committedAt}
						out = append(out, op)
					}
				}
			}
			continue
		case linCommit:
			if e := exec(t, in.Lease); t == nil || e == nil || e.GetCommittedAt() == nil {
				continue
			}
		case linComplete:
			if e := exec(t, in.Lease); t == nil || e == nil || e.GetStatus() != tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE {
				continue
			}
		case linFail:
			if e := exec(t, in.Lease); t == nil || e == nil || e.GetStatus() != tenurev1.ExecutionStatus_EXECUTION_STATUS_ABORTED || e.GetReason() != in.Reason {
				continue
			}
		case linKill:
			if t == nil || t.GetState() != tenurev1.TaskState_TASK_STATE_DEAD || t.GetFailureReason() != in.Reason {
				continue
			}
		default:
			continue
		}
		op.Output = linOut{Unchecked: true}
		out = append(out, op)
	}
	return out
}
