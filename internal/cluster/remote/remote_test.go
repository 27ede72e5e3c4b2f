package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/cluster/remote"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
	"google.golang.org/protobuf/proto"
)

const from = "node-a"

// env is one node behind the API, and a remote.Backend that calls it.
type env struct {
	url string
	n   *node.Node // the same node, called directly
	b   *remote.Backend
	hc  *http.Client

	mu        sync.Mutex
	forwarded map[string]bool // procedures seen with Tenure-Forwarded: from
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{forwarded: map[string]bool{}}
	e.url, e.n = apitest.StartNode(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v := r.Header.Values(server.ForwardedHeader); len(v) == 1 && v[0] == from {
				e.mu.Lock()
				e.forwarded[r.URL.Path] = true
				e.mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	e.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(e.hc.CloseIdleConnections)
	e.b = remote.New(e.url, e.hc, from)
	return e
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// normTask is t without what the API does not carry (log positions, the
// refusals recorded per lease), and with empty byte slices as nil (protobuf
// does not tell them apart).
func normTask(t *state.Task) *state.Task {
	if t == nil {
		return nil
	}
	c := t.Clone()
	c.CreatedLSN, c.LSNs = 0, nil
	for i := range c.Executions {
		c.Executions[i].Refused = 0
	}
	c.Payload, c.Result = nilIfEmpty(c.Payload), nilIfEmpty(c.Result)
	return c
}

func normTasks(ts []*state.Task) []*state.Task {
	var out []*state.Task
	for _, t := range ts {
		out = append(out, normTask(t))
	}
	return out
}

// normHistory copies h with empty byte slices as nil and, when uncarried
// is set, without the one thing of a history the API does not carry: the
// result passed to a completion that finalised an earlier commit.
func normHistory(h []coordinator.HistoryEntry, uncarried bool) []coordinator.HistoryEntry {
	out := make([]coordinator.HistoryEntry, len(h))
	committed := false
	for i, e := range h {
		var r state.Record
		switch x := e.Record.(type) {
		case *state.TaskCreated:
			c := *x
			c.Payload = nilIfEmpty(c.Payload)
			r = &c
		case *state.TaskCommitted:
			c := *x
			c.Result = nilIfEmpty(c.Result)
			committed = true
			r = &c
		case *state.TaskCompleted:
			c := *x
			c.Result = nilIfEmpty(c.Result)
			if committed && uncarried {
				c.Result = nil
			}
			r = &c
		default:
			r = e.Record
		}
		out[i] = coordinator.HistoryEntry{LSN: e.LSN, Record: r}
	}
	return out
}

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

func normLeases(ls []coordinator.Lease) []coordinator.Lease {
	var out []coordinator.Lease
	for _, l := range ls {
		l.LeaseExpiry = normTime(l.LeaseExpiry)
		l.Payload, l.CommittedResult = nilIfEmpty(l.Payload), nilIfEmpty(l.CommittedResult)
		out = append(out, l)
	}
	return out
}

// leaseOf is the Lease the coordinator answered when it granted t's current
// lease (before any heartbeat).
func leaseOf(t *state.Task) coordinator.Lease {
	cur := t.CurrentLease()
	l := coordinator.Lease{
		TaskID: t.ID, Namespace: t.Namespace, Queue: t.Queue, Payload: t.Payload,
		LeaseID: cur.LeaseID, WorkerID: cur.WorkerID, Attempt: cur.Attempt,
		LeaseExpiry: cur.LeaseExpiry.Std(), Window: t.Window,
	}
	if cur.Finalize {
		l.Committed, l.CommittedResult = true, t.Result
	}
	return l
}

// scenario is a set of tasks, made through the remote Backend, in every
// state and with every kind of record.
type scenario struct {
	ids []string // every task, in creation order
}

// build runs the scenario through e.b, checking each answer against what
// the node says directly.
func (e *env) build(t *testing.T) *scenario {
	t.Helper()
	ctx := testCtx(t)
	b, n := e.b, e.n
	sc := &scenario{}
	get := func(id string) *state.Task { return must[*state.Task](t, "node Get")(n.Get(ctx, id)) }
	sameTask := func(what string, got *state.Task) {
		t.Helper()
		if want := normTask(get(got.ID)); !reflect.DeepEqual(normTask(got), want) {
			t.Errorf("%s: through remote\n%#v\nthe node says\n%#v", what, normTask(got), want)
		}
	}
	// lease leases one task of queue q through the remote Backend, and
	// checks the lease against the node's task.
	lease := func(worker, q string) coordinator.Lease {
		t.Helper()
		ls := must[[]coordinator.Lease](t, "Lease "+q)(b.Lease(ctx, coordinator.LeaseRequest{WorkerID: worker, Queue: q, MaxTasks: 5}))
		if len(ls) != 1 {
			t.Fatalf("Lease %s: %d leases, want 1", q, len(ls))
		}
		if want := normLeases([]coordinator.Lease{leaseOf(get(ls[0].TaskID))}); !reflect.DeepEqual(normLeases(ls), want) {
			t.Errorf("Lease %s: through remote %+v, the node says %+v", q, ls, want)
		}
		return ls[0]
	}
	submit := func(req coordinator.SubmitRequest) string {
		t.Helper()
		res := must[coordinator.SubmitResult](t, "Submit "+req.Queue)(b.Submit(ctx, req))
		if res.Duplicate {
			t.Errorf("Submit %s: a new task is marked duplicate", req.Queue)
		}
		sameTask("Submit "+req.Queue, res.Task)
		sc.ids = append(sc.ids, res.Task.ID)
		return res.Task.ID
	}
	retry := state.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Hour, MaxBackoff: 2 * time.Hour, Multiplier: 1.5}

	// A delayed task with every submit option, then its request id again.
	full := coordinator.SubmitRequest{
		Namespace: "ns1", Queue: "delayed", Payload: []byte("payload \x00\xff"), RequestID: "req-1",
		ExecutionWindow: 90 * time.Second, Retry: retry, NotBefore: time.Now().Add(time.Hour).Round(time.Microsecond), Priority: -7,
	}
	fullID := submit(full)
	dup := must[coordinator.SubmitResult](t, "Submit again")(b.Submit(ctx, full))
	if !dup.Duplicate || dup.Task.ID != fullID {
		t.Errorf("Submit with the same request id: %+v, want task %s marked duplicate", dup, fullID)
	}
	sameTask("Submit again", dup.Task)

	// A batch: defaults, an empty payload, a repeated request id.
	batch := must[[]coordinator.SubmitResult](t, "SubmitBatch")(b.SubmitBatch(ctx, []coordinator.SubmitRequest{
		{Queue: "batch", Payload: []byte("b0"), RequestID: "req-b"},
		{Queue: "batch", Payload: []byte{}, Priority: 3},
		{Queue: "batch", Payload: []byte("b2"), RequestID: "req-b"},
		{Namespace: "ns1", Queue: "delayed", RequestID: "req-1"},
	}))
	if len(batch) != 4 || batch[0].Duplicate || batch[1].Duplicate || !batch[2].Duplicate || !batch[3].Duplicate ||
		batch[2].Task.ID != batch[0].Task.ID || batch[3].Task.ID != fullID {
		t.Fatalf("SubmitBatch: %+v", batch)
	}
	for i, r := range batch {
		sameTask(fmt.Sprintf("SubmitBatch result %d", i), r.Task)
	}
	sc.ids = append(sc.ids, batch[0].Task.ID, batch[1].Task.ID)

	win := time.Hour
	// Leased, started, heartbeated, committed.
	committed := submit(coordinator.SubmitRequest{Queue: "commit", Payload: []byte("c"), ExecutionWindow: win, Retry: retry})
	l := lease("w1", "commit")
	if err := b.Start(ctx, committed, l.LeaseID); err != nil {
		t.Fatalf("Start: %v", err)
	}
	exp := must[time.Time](t, "Heartbeat")(b.Heartbeat(ctx, committed, l.LeaseID))
	if want := get(committed).CurrentLease().LeaseExpiry.Std(); !reflect.DeepEqual(normTime(exp), normTime(want)) {
		t.Errorf("Heartbeat: %v, the node says the lease expires at %v", exp, want)
	}
	tok := must[coordinator.FencingToken](t, "Commit")(b.Commit(ctx, committed, l.LeaseID, []byte("committed result")))
	if want := must[coordinator.FencingToken](t, "node Commit again")(n.Commit(ctx, committed, l.LeaseID, []byte("committed result"))); tok != want || tok != (coordinator.FencingToken{TaskID: committed, Attempt: 1}) {
		t.Errorf("Commit: %+v; the node answers the same commit again with %+v", tok, want)
	}
	if again := must[coordinator.FencingToken](t, "Commit again")(b.Commit(ctx, committed, l.LeaseID, []byte("committed result"))); again != tok {
		t.Errorf("Commit again: %+v, want %+v", again, tok)
	}

	// Completed at once, with an empty result.
	completed := submit(coordinator.SubmitRequest{Queue: "complete", Payload: []byte("d"), ExecutionWindow: win})
	l = lease("w1", "complete")
	if err := b.Complete(ctx, completed, l.LeaseID, nil); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := n.Complete(ctx, completed, l.LeaseID, nil); err != nil {
		t.Errorf("the node answers the same completion again with %v", err)
	}

	// Failed with a retry to come, and failed for good.
	retried := submit(coordinator.SubmitRequest{Queue: "retry", ExecutionWindow: win, Retry: retry})
	l = lease("w1", "retry")
	fr := must[coordinator.FailResult](t, "Fail")(b.Fail(ctx, retried, l.LeaseID, "boom (permanent)", false))
	if tk := get(retried); tk.State != state.Waiting || fr.State != state.Waiting || !reflect.DeepEqual(normTime(fr.RetryAt), normTime(tk.NotBefore.Std())) {
		t.Errorf("Fail: %+v; the node says %s, not before %v", fr, tk.State, tk.NotBefore)
	}
	failed := submit(coordinator.SubmitRequest{Queue: "fail", ExecutionWindow: win, Retry: retry})
	l = lease("w1", "fail")
	fr = must[coordinator.FailResult](t, "Fail permanent")(b.Fail(ctx, failed, l.LeaseID, "bad input; retry not before never", true))
	if fr != (coordinator.FailResult{State: state.Failed}) || get(failed).State != state.Failed {
		t.Errorf("Fail permanent: %+v, want FAILED and no retry", fr)
	}

	// Killed while leased; and one in progress.
	killed := submit(coordinator.SubmitRequest{Queue: "kill", ExecutionWindow: win})
	lease("w1", "kill")
	if err := b.Kill(ctx, killed, "not wanted"); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	started := submit(coordinator.SubmitRequest{Queue: "start", ExecutionWindow: win, Priority: 9})
	l = lease("w2", "start")
	if err := b.Start(ctx, started, l.LeaseID); err != nil {
		t.Fatalf("Start: %v", err)
	}

	// CompleteBatch: completed, a lease that is not current, an unknown
	// task, no task id, and the first completion again.
	cb0 := submit(coordinator.SubmitRequest{Queue: "cb", Payload: []byte("e0"), ExecutionWindow: win})
	cb1 := submit(coordinator.SubmitRequest{Queue: "cb", Payload: []byte("e1"), ExecutionWindow: win})
	held := must[[]coordinator.Lease](t, "Lease cb")(b.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w3", Queue: "cb", MaxTasks: 2}))
	var want []coordinator.Lease
	for _, l := range held {
		want = append(want, leaseOf(get(l.TaskID)))
	}
	if len(held) != 2 || !reflect.DeepEqual(normLeases(held), normLeases(want)) {
		t.Fatalf("Lease cb: through remote %+v, the node says %+v", held, want)
	}
	if held[0].TaskID != cb0 {
		held[0], held[1] = held[1], held[0]
	}
	items := []coordinator.CompleteItem{
		{TaskID: cb0, LeaseID: held[0].LeaseID, Result: []byte("r0")},
		{TaskID: cb1, LeaseID: "made-up-lease"},
		{TaskID: "no-such-task", LeaseID: "x"},
		{LeaseID: "x"},
		{TaskID: cb0, LeaseID: held[0].LeaseID, Result: []byte("r0")},
	}
	errs := must[[]error](t, "CompleteBatch")(b.CompleteBatch(ctx, items))
	direct := must[[]error](t, "node CompleteBatch")(n.Coordinator().CompleteBatch(ctx, items))
	kinds := []error{nil, coordinator.ErrLeaseLost, coordinator.ErrNotFound, coordinator.ErrInvalidArgument, nil}
	for i := range items {
		if !sameError(errs[i], direct[i]) || (kinds[i] == nil) != (errs[i] == nil) || (kinds[i] != nil && !errors.Is(errs[i], kinds[i])) {
			t.Errorf("CompleteBatch item %d: through remote %v, the node answers %v; want %v", i, errs[i], direct[i], kinds[i])
		}
	}

	// Commit, then lease expiry: the task is offered again only to be
	// finalised. And an uncommitted attempt that expires, is retried, and
	// whose first lease then loses to the second's commit.
	quick := state.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Multiplier: 1}
	finalised := submit(coordinator.SubmitRequest{Queue: "fin", Payload: []byte("f"), ExecutionWindow: time.Second, Retry: quick})
	lost := submit(coordinator.SubmitRequest{Queue: "fin", Payload: []byte("g"), ExecutionWindow: time.Second, Retry: quick})
	first := map[string]coordinator.Lease{}
	for _, l := range must[[]coordinator.Lease](t, "Lease fin")(b.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w4", Queue: "fin", MaxTasks: 2})) {
		first[l.TaskID] = l
	}
	if len(first) != 2 {
		t.Fatalf("Lease fin: %+v, want both tasks", first)
	}
	must[coordinator.FencingToken](t, "Commit fin")(b.Commit(ctx, finalised, first[finalised].LeaseID, []byte("fin")))
	second := map[string]coordinator.Lease{}
	for len(second) < 2 { // until both leases expired and both tasks were leased again
		ls := must[[]coordinator.Lease](t, "Lease fin again")(b.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w5", Queue: "fin", MaxTasks: 2, Wait: 5 * time.Second}))
		for _, l := range ls {
			if got, want := normLeases([]coordinator.Lease{l}), normLeases([]coordinator.Lease{leaseOf(get(l.TaskID))}); !reflect.DeepEqual(got, want) {
				t.Errorf("Lease fin again: through remote %+v, the node says %+v", got, want)
			}
			second[l.TaskID] = l
		}
	}
	if l := second[finalised]; !l.Committed || !bytes.Equal(l.CommittedResult, []byte("fin")) || l.Attempt != 2 {
		t.Errorf("finalisation lease: %+v", l)
	}
	if err := b.Complete(ctx, finalised, second[finalised].LeaseID, []byte("finalised")); err != nil {
		t.Fatalf("Complete the finalisation: %v", err)
	}
	must[coordinator.FencingToken](t, "Commit the retry")(b.Commit(ctx, lost, second[lost].LeaseID, []byte("second")))
	// The first lease commits too late: refused, and recorded (a former
	// lease of the task) as TaskCancelled.
	if _, err := b.Commit(ctx, lost, first[lost].LeaseID, []byte("first")); !errors.Is(err, coordinator.ErrAlreadyCommitted) {
		t.Fatalf("Commit by the first lease after the second's: %v, want already committed", err)
	}
	return sc
}

// sameError: both nil, or the same message.
func sameError(got, want error) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	return got.Error() == want.Error()
}

// TestBackendMatchesNode: every answer through the remote Backend is the
// node's own: each method's result during the scenario (build), then Get,
// List and History of every task.
func TestBackendMatchesNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.build(t)
	ctx := testCtx(t)

	t.Run("Get", func(t *testing.T) {
		for _, id := range sc.ids {
			got := must[*state.Task](t, "remote Get")(e.b.Get(ctx, id))
			want := must[*state.Task](t, "node Get")(e.n.Get(ctx, id))
			if !reflect.DeepEqual(normTask(got), normTask(want)) {
				t.Errorf("Get %s: through remote\n%#v\nthe node says\n%#v", id, normTask(got), normTask(want))
			}
			if (got.CurrentLease() == nil) != (want.CurrentLease() == nil) {
				t.Errorf("Get %s: current lease %v, the node's %v", id, got.CurrentLease(), want.CurrentLease())
			}
		}
	})

	t.Run("List", func(t *testing.T) {
		for _, f := range []coordinator.ListFilter{
			{},
			{Limit: 3},
			{Limit: 1},
			{Namespace: "ns1"},
			{Namespace: "default", Queue: "fin", Limit: 1},
			{State: state.Leased, Limit: 2},
			{State: state.Completed},
			{Queue: "no-such-queue"},
		} {
			pages := 0
			for {
				got, gotNext, err := e.b.List(ctx, f)
				if err != nil {
					t.Fatalf("remote List %+v: %v", f, err)
				}
				want, wantNext, err := e.n.List(ctx, f)
				if err != nil {
					t.Fatalf("node List %+v: %v", f, err)
				}
				if gotNext != wantNext || !reflect.DeepEqual(normTasks(got), normTasks(want)) {
					t.Fatalf("List %+v: through remote %d tasks, next %d; the node says %d tasks, next %d", f, len(got), gotNext, len(want), wantNext)
				}
				if pages++; gotNext == 0 || pages > 100 {
					break
				}
				f.After = gotNext
			}
		}
	})

	t.Run("History", func(t *testing.T) {
		for _, id := range sc.ids {
			got := must[[]coordinator.HistoryEntry](t, "remote History")(e.b.History(ctx, id))
			want := must[[]coordinator.HistoryEntry](t, "node History")(e.n.History(ctx, id))
			if g, w := normHistory(got, false), normHistory(want, true); !reflect.DeepEqual(g, w) {
				t.Errorf("History %s: through remote\n%s\nthe node says\n%s", id, dump(g), dump(w))
			}
		}
	})

	t.Run("every method is forwarded", func(t *testing.T) {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, p := range []string{
			tenurev1connect.TaskServiceSubmitProcedure, tenurev1connect.TaskServiceSubmitBatchProcedure,
			tenurev1connect.TaskServiceGetTaskProcedure, tenurev1connect.TaskServiceListTasksProcedure,
			tenurev1connect.TaskServiceKillTaskProcedure, tenurev1connect.TaskServiceGetTaskHistoryProcedure,
			tenurev1connect.WorkerServiceLeaseProcedure, tenurev1connect.WorkerServiceStartProcedure,
			tenurev1connect.WorkerServiceHeartbeatProcedure, tenurev1connect.WorkerServiceCommitProcedure,
			tenurev1connect.WorkerServiceCompleteProcedure, tenurev1connect.WorkerServiceCompleteBatchProcedure,
			tenurev1connect.WorkerServiceFailProcedure,
		} {
			if !e.forwarded[p] {
				t.Errorf("%s: no request carried %s: %s", p, server.ForwardedHeader, from)
			}
		}
	})

	// The scenario made every kind of task record and every task state.
	t.Run("coverage", func(t *testing.T) {
		types, states := map[record.Type]bool{}, map[state.TaskState]bool{}
		finalize := false
		for _, id := range sc.ids {
			tk := must[*state.Task](t, "remote Get")(e.b.Get(ctx, id))
			states[tk.State] = true
			for _, x := range tk.Executions {
				finalize = finalize || x.Finalize
			}
			for _, h := range must[[]coordinator.HistoryEntry](t, "remote History")(e.b.History(ctx, id)) {
				types[record.TypeOf(h.Record)] = true
			}
		}
		if len(states) != 6 || !finalize {
			t.Errorf("states %v, a finalisation %v: want all six and one", states, finalize)
		}
		for ty := record.TypeTaskCreated; ty <= record.TypeTaskDead; ty++ {
			if !types[ty] {
				t.Errorf("no %s record in the scenario", ty)
			}
		}
	})
}

func dump(h []coordinator.HistoryEntry) string {
	var sb strings.Builder
	for _, e := range h {
		fmt.Fprintf(&sb, "  %d %T %+v\n", e.LSN, e.Record, e.Record)
	}
	return sb.String()
}

// TestServerOverBackend: a server over the remote Backend answers every
// client what the node's own server answers, byte for byte: tasks, pages,
// histories and errors (code and message).
func TestServerOverBackend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sc := e.build(t)
	ctx := testCtx(t)

	proxy := server.New(e.b, server.Options{})
	ts := httptest.NewServer(proxy.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(proxy.Drain)
	type clients struct {
		tasks   tenurev1connect.TaskServiceClient
		workers tenurev1connect.WorkerServiceClient
	}
	direct := clients{tenurev1connect.NewTaskServiceClient(e.hc, e.url), tenurev1connect.NewWorkerServiceClient(e.hc, e.url)}
	proxied := clients{tenurev1connect.NewTaskServiceClient(ts.Client(), ts.URL), tenurev1connect.NewWorkerServiceClient(ts.Client(), ts.URL)}

	// same calls call on both and compares the answers.
	same := func(what string, call func(c clients) (proto.Message, error)) {
		t.Helper()
		want, wantErr := call(direct)
		got, gotErr := call(proxied)
		if connect.CodeOf(gotErr) != connect.CodeOf(wantErr) || errMessage(gotErr) != errMessage(wantErr) {
			t.Errorf("%s: through the remote Backend %v, the node answers %v", what, gotErr, wantErr)
			return
		}
		if wantErr == nil && !proto.Equal(got, want) {
			t.Errorf("%s: through the remote Backend\n%v\nthe node answers\n%v", what, got, want)
		}
	}

	for _, id := range append(sc.ids, "no-such-task", "", "bad id") {
		same("GetTask "+id, func(c clients) (proto.Message, error) {
			return answer(c.tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: id})))
		})
		same("GetTaskHistory "+id, func(c clients) (proto.Message, error) {
			return answer(c.tasks.GetTaskHistory(ctx, connect.NewRequest(&tenurev1.GetTaskHistoryRequest{TaskId: id})))
		})
	}
	for _, req := range []*tenurev1.ListTasksRequest{
		{}, {PageSize: 2}, {PageSize: 2, PageToken: "5"}, {Namespace: "ns1"}, {State: tenurev1.TaskState_TASK_STATE_COMMITTED},
		{PageSize: 5000}, {PageToken: "not-a-token"}, {State: 99},
	} {
		same("ListTasks "+req.String(), func(c clients) (proto.Message, error) {
			return answer(c.tasks.ListTasks(ctx, connect.NewRequest(req)))
		})
	}

	// Rejections, which change no task (each may add a TaskCancelled
	// record, so histories are compared above, before them).
	get := func(id string) *state.Task { return must[*state.Task](t, "node Get")(e.n.Get(ctx, id)) }
	var committed, leased, completed *state.Task
	for _, id := range sc.ids {
		tk := get(id)
		switch {
		case tk.State == state.Committed && len(tk.Executions) == 2 && committed == nil:
			committed = tk
		case tk.State == state.Leased && tk.CurrentLease().Status == state.ExecLeased && leased == nil:
			leased = tk
		case tk.State == state.Completed && completed == nil:
			completed = tk
		}
	}
	if committed == nil || leased == nil || completed == nil || len(committed.Executions) < 2 {
		t.Fatalf("the scenario lacks a task: committed %v, leased %v, completed %v", committed, leased, completed)
	}
	for _, tc := range []struct {
		name string
		call func(c clients) (proto.Message, error)
	}{
		{"Submit without a queue", func(c clients) (proto.Message, error) {
			return answer(c.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Payload: []byte("x")})))
		}},
		{"Submit a payload over the limit", func(c clients) (proto.Message, error) {
			return answer(c.tasks.Submit(ctx, connect.NewRequest(&tenurev1.SubmitRequest{Queue: "q", Payload: make([]byte, 1<<20+1)})))
		}},
		{"SubmitBatch with a bad item", func(c clients) (proto.Message, error) {
			return answer(c.tasks.SubmitBatch(ctx, connect.NewRequest(&tenurev1.SubmitBatchRequest{Requests: []*tenurev1.SubmitRequest{{Queue: "q"}, {Queue: "bad queue"}}})))
		}},
		{"KillTask a finished task", func(c clients) (proto.Message, error) {
			return answer(c.tasks.KillTask(ctx, connect.NewRequest(&tenurev1.KillTaskRequest{TaskId: completed.ID})))
		}},
		{"Heartbeat with a made-up lease", func(c clients) (proto.Message, error) {
			return answer(c.workers.Heartbeat(ctx, connect.NewRequest(&tenurev1.HeartbeatRequest{TaskId: leased.ID, LeaseId: "made-up"})))
		}},
		{"Commit by a lease that lost to another commit", func(c clients) (proto.Message, error) {
			return answer(c.workers.Commit(ctx, connect.NewRequest(&tenurev1.CommitRequest{TaskId: committed.ID, LeaseId: committed.Executions[0].LeaseID})))
		}},
		{"Start a finished execution", func(c clients) (proto.Message, error) {
			return answer(c.workers.Start(ctx, connect.NewRequest(&tenurev1.StartRequest{TaskId: committed.ID, LeaseId: committed.CurrentLease().LeaseID})))
		}},
		{"Fail with a made-up lease", func(c clients) (proto.Message, error) {
			return answer(c.workers.Fail(ctx, connect.NewRequest(&tenurev1.FailRequest{TaskId: leased.ID, LeaseId: "made-up"})))
		}},
		{"Lease without a worker id", func(c clients) (proto.Message, error) {
			return answer(c.workers.Lease(ctx, connect.NewRequest(&tenurev1.LeaseRequest{Queue: "q"})))
		}},
		{"CompleteBatch of rejected items", func(c clients) (proto.Message, error) {
			return answer(c.workers.CompleteBatch(ctx, connect.NewRequest(&tenurev1.CompleteBatchRequest{Items: []*tenurev1.CompleteRequest{
				{TaskId: leased.ID, LeaseId: "made-up"}, {TaskId: "no-such-task", LeaseId: "x"}, {LeaseId: "x"},
				{TaskId: committed.ID, LeaseId: committed.Executions[0].LeaseID},
			}})))
		}},
		{"CompleteBatch of nothing", func(c clients) (proto.Message, error) {
			return answer(c.workers.CompleteBatch(ctx, connect.NewRequest(&tenurev1.CompleteBatchRequest{})))
		}},
	} {
		same(tc.name, tc.call)
	}
}

func errMessage(err error) string {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce.Message()
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// answer is the message of a call's answer, or its error.
func answer[T any](r *connect.Response[T], err error) (proto.Message, error) {
	if err != nil {
		return nil, err
	}
	return any(r.Msg).(proto.Message), nil
}
