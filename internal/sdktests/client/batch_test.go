package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/sdk/client"
)

// TestCompleteBatch: per-item answers are *Error values classified as
// Complete's would be, with the detail the server reported, over every
// protocol; SubmitBatch answers ids only by default.
func TestCompleteBatch(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *client.Client) {
		ctx := t.Context()
		const q = "cb"
		req := client.SubmitBatchRequest{Requests: []client.SubmitRequest{{Queue: q, RequestID: "a"}, {Queue: q, RequestID: "b"}, {Queue: q, RequestID: "c"}}}
		ids, err := c.SubmitBatch(ctx, req)
		if err != nil || len(ids) != 3 {
			t.Fatalf("SubmitBatch: %+v, %v", ids, err)
		}
		again, err := c.SubmitBatch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ids {
			if ids[i].TaskID == "" || ids[i].Duplicate || ids[i].Task != nil || again[i] != (client.SubmitResult{TaskID: ids[i].TaskID, Duplicate: true}) {
				t.Fatalf("SubmitBatch: %+v, then %+v; want ids only, then the same ids as duplicates", ids, again)
			}
		}
		ls, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: q, MaxTasks: 3, Wait: time.Second}))
		if err != nil || len(ls) != 3 {
			t.Fatalf("Lease: %d tasks, %v", len(ls), err)
		}
		// Task 1 committed first: another lease's completion of it is refused.
		if _, err := c.Commit(ctx, client.CommitRequest{TaskID: ls[1].ID, LeaseID: ls[1].LeaseID, Result: []byte("won")}); err != nil {
			t.Fatal(err)
		}
		res, err := c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: []client.CompleteRequest{
			{TaskID: ls[0].ID, LeaseID: ls[0].LeaseID, Result: []byte("r0")},
			{TaskID: ls[2].ID, LeaseID: ls[0].LeaseID},
			{TaskID: ls[1].ID, LeaseID: "other-lease"},
			{TaskID: "no-such-task", LeaseID: "x"},
			{TaskID: ls[1].ID, LeaseID: ls[1].LeaseID},
			{TaskID: ls[0].ID, LeaseID: ls[0].LeaseID, Result: []byte("r0")},
		}})
		errs := res.Errors
		if err != nil || len(errs) != 6 || res.Leased != nil {
			t.Fatalf("CompleteBatch: %v, %v", errs, err)
		}
		if errs[0] != nil || errs[4] != nil || errs[5] != nil {
			t.Errorf("answers %v; want items 0, 4 and 5 to succeed", errs)
		}
		checkError(t, "item 1 (another task's lease)", errs[1], errorCase{client.ErrLeaseLost, client.Error{
			Op: "CompleteBatch", Code: connect.CodeFailedPrecondition, Reason: client.ReasonLeaseLost, TaskID: ls[2].ID, LeaseID: ls[0].LeaseID}})
		checkError(t, "item 2 (a committed task's other lease)", errs[2], errorCase{client.ErrAlreadyCommitted, client.Error{
			Op: "CompleteBatch", Code: connect.CodeAlreadyExists, Reason: client.ReasonAlreadyCommitted,
			TaskID: ls[1].ID, LeaseID: "other-lease", CommittedBy: ls[1].LeaseID}})
		checkError(t, "item 3 (no such task)", errs[3], errorCase{client.ErrNotFound, client.Error{
			Op: "CompleteBatch", Code: connect.CodeNotFound, Reason: client.ReasonNotFound, TaskID: "no-such-task"}})
		for i, want := range []string{"r0", "won", ""} {
			task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: ls[i].ID})
			if err != nil {
				t.Fatal(err)
			}
			wantState := client.TaskStateCompleted
			if i == 2 {
				wantState = client.TaskStateLeased
			}
			if task.State != wantState || string(task.Result) != want {
				t.Errorf("task %d: %s %q, want %s %q", i, task.State, task.Result, wantState, want)
			}
		}
		if _, err := c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: nil}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("empty batch: %v, want invalid argument", err)
		}
	})
}

// TestCompleteAndLease: one call (CompleteBatch with a Lease) completes the
// items and leases the next tasks, over every protocol; a lease request the server refuses fails the
// call with no item applied, and one the client refuses is never sent.
func TestCompleteAndLease(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *client.Client) {
		ctx := t.Context()
		const q = "cl"
		reqs := make([]client.SubmitRequest, 5)
		for i := range reqs {
			reqs[i] = client.SubmitRequest{Queue: q, Payload: []byte{byte(i)}}
		}
		if _, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: reqs}); err != nil {
			t.Fatal(err)
		}
		ls, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: q, MaxTasks: 2}))
		if err != nil || len(ls) != 2 {
			t.Fatalf("Lease: %d tasks, %v", len(ls), err)
		}
		items := func(ls []client.LeasedTask) []client.CompleteRequest {
			out := make([]client.CompleteRequest, len(ls))
			for i, l := range ls {
				out[i] = client.CompleteRequest{TaskID: l.ID, LeaseID: l.LeaseID, Result: l.Payload}
			}
			return out
		}
		// Refused by the server (no queue): nothing is completed.
		if _, err := c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: items(ls), Lease: &client.LeaseRequest{WorkerID: "w", MaxTasks: 2}}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("a lease without a queue: %v, want invalid argument", err)
		}
		// Refused by the client: nothing is sent.
		if _, err := c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: items(ls), Lease: &client.LeaseRequest{WorkerID: "w", Queue: q, MaxTasks: -1}}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("MaxTasks -1: %v, want invalid argument", err)
		}
		for _, l := range ls {
			if task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: l.ID}); err != nil || task.State != client.TaskStateLeased {
				t.Fatalf("task %s after refused calls: %v, %v; want still LEASED", l.ID, task.State, err)
			}
		}
		done := map[string]bool{}
		for len(done) < len(reqs) {
			res, err := c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: items(ls), Lease: &client.LeaseRequest{WorkerID: "w", Queue: q, MaxTasks: 2}})
			errs, next := res.Errors, res.Leased
			if err != nil || len(errs) != len(ls) || errors.Join(errs...) != nil {
				t.Fatalf("CompleteBatch with a lease, of %d: %v, %v", len(ls), errs, err)
			}
			for _, l := range ls {
				done[l.ID] = true
			}
			want := min(2, len(reqs)-len(done))
			if len(next) != want {
				t.Fatalf("CompleteBatch with a lease leased %d tasks with %d left, want %d", len(next), len(reqs)-len(done), want)
			}
			for _, l := range next {
				if done[l.ID] || l.LeaseID == "" || l.Attempt != 1 {
					t.Fatalf("leased %+v: a completed task, or not a first lease", l)
				}
			}
			ls = next
		}
		for id := range done {
			task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: id})
			if err != nil || task.State != client.TaskStateCompleted || len(task.Result) != 1 {
				t.Errorf("task %s: %v %q, %v; want COMPLETED with its payload as result", id, task.State, task.Result, err)
			}
		}
	})
}

// loseOnce serves every request; while armed it serves the next one, then
// answers it unavailable as if the answer was lost, and disarms.
type loseOnce struct {
	next  http.Handler
	armed atomic.Bool
	calls atomic.Int32
}

func (l *loseOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.calls.Add(1)
	if !l.armed.CompareAndSwap(true, false) {
		l.next.ServeHTTP(w, r)
		return
	}
	l.next.ServeHTTP(httptest.NewRecorder(), r)
	connect.NewErrorWriter().Write(w, r, connect.NewError(connect.CodeUnavailable, errors.New("injected by the test")))
}

// TestCompleteBatchRetry: the server completes the batch but the answer is
// lost; the client's retry of the whole call gets success for every item.
func TestCompleteBatchRetry(t *testing.T) {
	l := &loseOnce{}
	url := startServer(t, func(h http.Handler) http.Handler { l.next = h; return l })
	c := newClient(t, url, client.Options{RetryBackoff: time.Millisecond})
	ctx := t.Context()
	if _, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: []client.SubmitRequest{{Queue: "q"}, {Queue: "q"}}}); err != nil {
		t.Fatal(err)
	}
	ls, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 2, Wait: time.Second}))
	if err != nil || len(ls) != 2 {
		t.Fatalf("Lease: %d, %v", len(ls), err)
	}
	items := []client.CompleteRequest{{TaskID: ls[0].ID, LeaseID: ls[0].LeaseID}, {TaskID: ls[1].ID, LeaseID: ls[1].LeaseID}}
	before := l.calls.Load()
	l.armed.Store(true)
	res, err := c.CompleteBatch(ctx, client.CompleteBatchRequest{Items: items})
	errs := res.Errors
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("CompleteBatch after a lost answer: %v, %v; want success for both", errs, err)
	}
	if got := l.calls.Load() - before; got != 2 {
		t.Errorf("%d calls, want 2 (the lost one and its retry)", got)
	}
	tasks, err := client.Collect(c.ListTasks(ctx, client.ListTasksRequest{Queue: "q", State: client.TaskStateCompleted}))
	if err != nil || len(tasks) != 2 {
		t.Fatalf("%d completed tasks, %v; want 2", len(tasks), err)
	}
}
