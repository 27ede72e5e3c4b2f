package e2e

// Linearizability of the real server across kill -9:
// concurrent clients and workers over HTTP/JSON and gRPC call `tenure
// server`, which is killed with SIGKILL in the middle of the history and
// restarted on the same data directory, three times. Every call is
// recorded with its invoke and return times and its answer; calls in
// flight at a kill (or refused while the server was down) are pending. At
// the end a reader lists every task, and porcupine checks the history
// against a model of the task state machine.
//
// The model is internal/lincheck, shared with internal/coordinator's
// tests; the API's answers are converted to it where they are recorded:
// FAILED_PRECONDITION stands for "lease lost" (or, from Fail, for either
// that or "wrong state"; from Kill, "wrong state"), ALREADY_EXISTS for
// "already committed". See that package for why the model has no clock.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/anishathalye/porcupine"
	"github.com/tenurehq/tenure/internal/lincheck"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
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
	rng := rand.New(rand.NewPCG(seed, 0x1e))
	dir := t.TempDir()
	rec := &lincheck.Recorder{}
	for round := 1; round <= rounds; round++ {
		srv := startServerProc(t, dir)
		r := &linRound{t: t, rec: rec, namespace: namespace, queue: queue, round: round,
			target: int64(400 + rng.IntN(1200)), reached: make(chan struct{})}
		kill9Round{
			seed: seed, round: round, maxRound: maxRound, reached: r.reached, client: r.client,
			worker: func(ctx context.Context, c *apiClients, i int, name string, rr *rand.Rand) {
				r.worker(ctx, c, 4+i, name, rr)
			},
		}.run(t, srv)
		t.Logf("round %d: killed -9 after %d answered calls", round, r.answered.Load())
		if t.Failed() {
			return
		}
	}

	// The reader: every task, page by page; each page is one read of its
	// tasks.
	srv := startServerProc(t, dir)
	c := newJSONClients(t, srv)
	var final []*tenurev1.Task
	token := ""
	for {
		call := rec.Call()
		cctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c.tasks.ListTasks(cctx, connect.NewRequest(&tenurev1.ListTasksRequest{Namespace: namespace, PageSize: 1000, PageToken: token}))
		cancel()
		if err != nil {
			t.Fatalf("ListTasks: %v", err)
		}
		ret := rec.Call()
		for _, task := range resp.Msg.GetTasks() {
			rec.Add(porcupine.Operation{ClientId: 8, Call: call, Return: ret,
				Input: lincheck.In{Op: lincheck.OpGet, Task: task.GetTaskId()}, Output: linGetOutput(task)})
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
	for _, op := range rec.Ops() {
		id := op.Input.(lincheck.In).Task
		if id == "" || known[id] {
			continue
		}
		known[id] = true
		call := rec.Call()
		cctx, cancel := context.WithTimeout(context.Background(), e2eCallTimeout)
		resp, err := c.tasks.GetTask(cctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id}))
		cancel()
		out := lincheck.Out{}
		switch {
		case err == nil:
			out = linGetOutput(resp.Msg.GetTask())
		case connect.CodeOf(err) == connect.CodeNotFound:
			out.Err = lincheck.NotFound
		default:
			t.Fatalf("GetTask(%s): %v", id, err)
		}
		rec.Add(porcupine.Operation{ClientId: 8, Call: call, Return: rec.Call(), Input: lincheck.In{Op: lincheck.OpGet, Task: id}, Output: out})
	}

	answered, pending := rec.Ops(), rec.Pending()
	resolved := linResolve(pending, final)
	ops := append(answered, resolved...)
	res, info := porcupine.CheckOperationsVerbose(lincheck.Model, ops, time.Minute)
	t.Logf("%d calls (%d answered, %d without an answer, %d of those left a trace), %d tasks: %s",
		len(ops), len(answered), len(pending), len(resolved), len(final), res)
	if res != porcupine.Ok {
		msg := fmt.Sprintf("porcupine: the history is %s", res)
		if name := lincheck.Visualise(info, "tenure-e2e-linearizability-*.html"); name != "" {
			msg += "; visualisation: " + name
		}
		t.Fatalf("%s\n%s", msg, lincheck.Explain(ops))
	}
}

// linRound drives the clients and workers of one server process.
type linRound struct {
	t         *testing.T
	rec       *lincheck.Recorder
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
		return lincheck.NotFound, false
	case connect.CodeAlreadyExists:
		return lincheck.AlreadyCommitted, false
	case connect.CodeFailedPrecondition:
		switch op {
		case lincheck.OpFail:
			return lincheck.FailedPrecondition, false
		case lincheck.OpKill, lincheck.OpRetry:
			return lincheck.WrongState, false
		}
		return lincheck.LeaseLost, false
	case connect.CodeInvalidArgument, connect.CodeResourceExhausted:
		r.t.Errorf("%s: %v", op, err)
	}
	return "", true
}

// do runs one call and records it, with in as fn left it (a submit learns
// its task id from the answer).
func (r *linRound) do(ctx context.Context, client int, in *lincheck.In, fn func(ctx context.Context) (lincheck.Out, error)) lincheck.Out {
	call := r.rec.Call()
	cctx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
	out, err := fn(cctx)
	cancel()
	if err != nil {
		out = lincheck.Out{}
		out.Err, out.Pending = r.answer(in.Op, err)
	} else {
		r.answer(in.Op, nil)
	}
	r.rec.Done(client, *in, call, out)
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

func linSubmitIn(req *tenurev1.SubmitRequest) lincheck.In {
	return lincheck.In{Op: lincheck.OpSubmit, RequestID: req.GetRequestId(), Payload: string(req.GetPayload()), MaxAttempts: req.GetRetryPolicy().GetMaxAttempts()}
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
			out := r.do(ctx, id, &in, func(ctx context.Context) (lincheck.Out, error) {
				resp, err := c.tasks.Submit(ctx, connect.NewRequest(req))
				if err != nil {
					return lincheck.Out{}, err
				}
				in.Task = resp.Msg.GetTask().GetTaskId()
				return lincheck.Out{Duplicate: resp.Msg.GetDuplicate()}, nil
			})
			if in.Task != "" {
				mine = append(mine, in.Task)
			}
			if out.Pending && req.GetRequestId() != "" {
				retry = req
			}
		case p < 55:
			reqs := []*tenurev1.SubmitRequest{r.submitRequest(id, n, rng), r.submitRequest(id, 10_000+n, rng)}
			call := r.rec.Call()
			cctx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
			resp, err := c.tasks.SubmitBatch(cctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: reqs}))
			cancel()
			kind, pending := r.answer(lincheck.OpSubmit, err)
			ret := r.rec.Call()
			for i, req := range reqs {
				in, out := linSubmitIn(req), lincheck.Out{Err: kind, Pending: pending}
				if err == nil {
					in.Task, out.Duplicate = resp.Msg.GetTaskIds()[i], resp.Msg.GetDuplicates()[i]
					mine = append(mine, in.Task)
				}
				op := porcupine.Operation{ClientId: id, Call: call, Return: ret, Input: in, Output: out}
				if pending {
					op.Return = lincheck.PendingEnd
				}
				r.rec.Add(op)
			}
		case p < 88 && len(mine) > 0:
			task := mine[rng.IntN(len(mine))]
			r.do(ctx, id, &lincheck.In{Op: lincheck.OpGet, Task: task}, func(ctx context.Context) (lincheck.Out, error) {
				resp, err := c.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: task}))
				if err != nil {
					return lincheck.Out{}, err
				}
				return linGetOutput(resp.Msg.GetTask()), nil
			})
		case p < 95 && len(mine) > 0:
			// An operator kills (p < 92) or retries one of the tasks.
			op, verb := lincheck.OpKill, "kill"
			if p >= 92 {
				op, verb = lincheck.OpRetry, "retry"
			}
			in := &lincheck.In{Op: op, Task: mine[rng.IntN(len(mine))], Reason: fmt.Sprintf("%s-r%d-c%d-%d", verb, r.round, id, n)}
			r.do(ctx, id, in, func(ctx context.Context) (lincheck.Out, error) {
				var err error
				if in.Op == lincheck.OpKill {
					_, err = c.tasks.KillTask(ctx, connect.NewRequest(&tenurev1.KillTaskRequest{TaskId: in.Task, Reason: in.Reason}))
				} else {
					_, err = c.tasks.RetryTask(ctx, connect.NewRequest(&tenurev1.RetryTaskRequest{TaskId: in.Task, Reason: in.Reason}))
				}
				return lincheck.Out{}, err
			})
		case p < 97:
			// Pause or resume the queue; the model keeps both in every
			// task's history.
			pause := rng.IntN(2) == 0
			in := &lincheck.In{Op: lincheck.OpResume}
			if pause {
				in.Op = lincheck.OpPause
			}
			r.do(ctx, id, in, func(ctx context.Context) (lincheck.Out, error) {
				var err error
				if pause {
					_, err = c.queues.PauseQueue(ctx, connect.NewRequest(&tenurev1.PauseQueueRequest{Namespace: r.namespace, Queue: r.queue}))
				} else {
					_, err = c.queues.ResumeQueue(ctx, connect.NewRequest(&tenurev1.ResumeQueueRequest{Namespace: r.namespace, Queue: r.queue}))
				}
				return lincheck.Out{}, err
			})
		}
	}
}

// worker leases tasks and finishes each in one of the ways a worker may.
func (r *linRound) worker(ctx context.Context, c *apiClients, id int, name string, rng *rand.Rand) {
	for n := 0; ctx.Err() == nil; n++ {
		worker := fmt.Sprintf("%s.%d", name, n) // one id per call: see linResolve
		call := r.rec.Call()
		cctx, cancel := context.WithTimeout(ctx, e2eCallTimeout)
		resp, err := c.worker.Lease(cctx, connect.NewRequest(&tenurev1.LeaseRequest{
			WorkerId: worker, Namespace: r.namespace, Queue: r.queue, MaxTasks: uint32(1 + rng.IntN(2)), Wait: durationpb.New(100 * time.Millisecond),
		}))
		cancel()
		if _, pending := r.answer(lincheck.OpLease, err); pending {
			r.rec.Done(id, lincheck.In{Op: lincheck.OpLease, Worker: worker}, call, lincheck.Out{Pending: true})
			time.Sleep(5 * time.Millisecond)
			continue
		}
		ret := r.rec.Call()
		for _, lt := range resp.Msg.GetTasks() {
			r.rec.Add(porcupine.Operation{ClientId: id, Call: call, Return: ret,
				Input:  lincheck.In{Op: lincheck.OpLease, Task: lt.GetTaskId(), Worker: worker},
				Output: lincheck.Out{LeaseID: lt.GetLeaseId(), Attempt: lt.GetAttempt(), Committed: lt.GetCommitted(), CommittedResult: string(lt.GetCommittedResult())}})
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
	commit := func() lincheck.Out {
		in := lincheck.In{Op: lincheck.OpCommit, Task: task, Lease: lease, Result: "r:" + lease}
		return r.do(ctx, id, &in, func(ctx context.Context) (lincheck.Out, error) {
			resp, err := c.worker.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: task, LeaseId: lease, Result: []byte(in.Result)}))
			if err != nil {
				return lincheck.Out{}, err
			}
			return lincheck.Out{Attempt: resp.Msg.GetFencingToken().GetAttempt()}, nil
		})
	}
	complete := func(result string) lincheck.Out {
		in := lincheck.In{Op: lincheck.OpComplete, Task: task, Lease: lease, Result: result}
		return r.do(ctx, id, &in, func(ctx context.Context) (lincheck.Out, error) {
			_, err := c.worker.Complete(ctx, connect.NewRequest(&tenurev1.CompleteRequest{TaskId: task, LeaseId: lease, Result: []byte(result)}))
			return lincheck.Out{}, err
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
		r.do(ctx, id, &lincheck.In{Op: lincheck.OpHeartbeat, Task: task, Lease: lease}, func(ctx context.Context) (lincheck.Out, error) {
			_, err := c.worker.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: task, LeaseId: lease}))
			return lincheck.Out{}, err
		})
		complete("r:" + lease)
	case p < 80:
		in := lincheck.In{Op: lincheck.OpFail, Task: task, Lease: lease, Permanent: rng.IntN(3) == 0, Reason: "fail-" + lease}
		r.do(ctx, id, &in, func(ctx context.Context) (lincheck.Out, error) {
			resp, err := c.worker.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{TaskId: task, LeaseId: lease, Reason: in.Reason, Permanent: in.Permanent}))
			if err != nil {
				return lincheck.Out{}, err
			}
			return lincheck.Out{Retry: resp.Msg.GetState() == tenurev1.TaskState_TASK_STATE_WAITING}, nil
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

// linGetOutput is what a read of task shows.
func linGetOutput(task *tenurev1.Task) lincheck.Out {
	out := lincheck.Out{
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

// linResolve resolves the calls that got no answer from the final state
// (lincheck.Resolve), converting the API's tasks. Inputs are unique where
// it matters: payloads, worker ids per Lease call, Fail and Kill reasons.
func linResolve(pending []porcupine.Operation, final []*tenurev1.Task) []porcupine.Operation {
	tasks := make([]lincheck.Task, 0, len(final))
	for _, t := range final {
		lt := lincheck.Task{ID: t.GetTaskId(), RequestID: t.GetRequestId(), Payload: string(t.GetPayload()),
			State: strings.TrimPrefix(t.GetState().String(), "TASK_STATE_")}
		// A lease granted after the commit only finalises it.
		committedAt := uint32(math.MaxUint32)
		for _, e := range t.GetExecutions() {
			if e.GetCommittedAt() != nil {
				committedAt = e.GetAttempt()
			}
		}
		for _, e := range t.GetExecutions() {
			status := ""
			switch e.GetStatus() {
			case tenurev1.ExecutionStatus_EXECUTION_STATUS_DONE:
				status = lincheck.ExecDone
			case tenurev1.ExecutionStatus_EXECUTION_STATUS_ABORTED:
				status = lincheck.ExecAborted
			}
			lt.Executions = append(lt.Executions, lincheck.Execution{LeaseID: e.GetLeaseId(), WorkerID: e.GetWorkerId(), Attempt: e.GetAttempt(),
				Committed: e.GetCommittedAt() != nil, Finalize: e.GetAttempt() > committedAt, Status: status, Reason: e.GetReason()})
		}
		tasks = append(tasks, lt)
	}
	return lincheck.Resolve(pending, tasks)
}
