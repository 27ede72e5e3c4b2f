package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/client"
)

// TestCompleteBatch: per-item answers classified by the error predicates,
// over every protocol; SubmitBatchIDs answers with ids only.
func TestCompleteBatch(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c := newClient(t, startServer(t, nil), client.Options{Protocol: proto})
			const q = "cb"
			reqs := []client.SubmitRequest{{Queue: q, RequestID: "a"}, {Queue: q, RequestID: "b"}, {Queue: q, RequestID: "c"}}
			ids, err := c.SubmitBatchIDs(ctx, reqs)
			if err != nil || len(ids) != 3 {
				t.Fatalf("SubmitBatchIDs: %v, %v", ids, err)
			}
			again, err := c.SubmitBatchIDs(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range ids {
				if ids[i].TaskID == "" || ids[i].Duplicate || again[i] != (client.SubmittedID{TaskID: ids[i].TaskID, Duplicate: true}) {
					t.Fatalf("SubmitBatchIDs: %+v, then %+v", ids, again)
				}
			}
			ls, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: q, MaxTasks: 3, Wait: time.Second})
			if err != nil || len(ls) != 3 {
				t.Fatalf("Lease: %d tasks, %v", len(ls), err)
			}
			// Task 1 committed first: another lease's completion of it is refused.
			if _, err := c.Commit(ctx, ls[1].GetTaskId(), ls[1].GetLeaseId(), []byte("won")); err != nil {
				t.Fatal(err)
			}
			errs, err := c.CompleteBatch(ctx, []client.CompleteItem{
				{TaskID: ls[0].GetTaskId(), LeaseID: ls[0].GetLeaseId(), Result: []byte("r0")},
				{TaskID: ls[2].GetTaskId(), LeaseID: ls[0].GetLeaseId()},
				{TaskID: ls[1].GetTaskId(), LeaseID: "other-lease"},
				{TaskID: "no-such-task", LeaseID: "x"},
				{TaskID: ls[1].GetTaskId(), LeaseID: ls[1].GetLeaseId()},
				{TaskID: ls[0].GetTaskId(), LeaseID: ls[0].GetLeaseId(), Result: []byte("r0")},
			})
			if err != nil || len(errs) != 6 {
				t.Fatalf("CompleteBatch: %v, %v", errs, err)
			}
			if errs[0] != nil || !client.IsLeaseLost(errs[1]) || !client.IsAlreadyCommitted(errs[2]) ||
				!client.IsNotFound(errs[3]) || errs[4] != nil || errs[5] != nil {
				t.Fatalf("answers %v; want nil, lease lost, already committed, not found, nil, nil", errs)
			}
			for i, want := range []string{"r0", "won", ""} {
				task, err := c.GetTask(ctx, ls[i].GetTaskId())
				if err != nil {
					t.Fatal(err)
				}
				wantState := tenurev1.TaskState_TASK_STATE_COMPLETED
				if i == 2 {
					wantState = tenurev1.TaskState_TASK_STATE_LEASED
				}
				if task.GetState() != wantState || string(task.GetResult()) != want {
					t.Errorf("task %d: %s %q, want %s %q", i, task.GetState(), task.GetResult(), wantState, want)
				}
			}
			if _, err := c.CompleteBatch(ctx, nil); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("empty batch: %v, want invalid_argument", err)
			}
		})
	}
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
	if _, err := c.SubmitBatchIDs(ctx, []client.SubmitRequest{{Queue: "q"}, {Queue: "q"}}); err != nil {
		t.Fatal(err)
	}
	ls, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: 2, Wait: time.Second})
	if err != nil || len(ls) != 2 {
		t.Fatalf("Lease: %d, %v", len(ls), err)
	}
	items := []client.CompleteItem{{TaskID: ls[0].GetTaskId(), LeaseID: ls[0].GetLeaseId()}, {TaskID: ls[1].GetTaskId(), LeaseID: ls[1].GetLeaseId()}}
	before := l.calls.Load()
	l.armed.Store(true)
	errs, err := c.CompleteBatch(ctx, items)
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("CompleteBatch after a lost answer: %v, %v; want success for both", errs, err)
	}
	if got := l.calls.Load() - before; got != 2 {
		t.Errorf("%d calls, want 2 (the lost one and its retry)", got)
	}
	tasks, _, err := c.ListTasks(ctx, client.ListOptions{Queue: "q", State: tenurev1.TaskState_TASK_STATE_COMPLETED})
	if err != nil || len(tasks) != 2 {
		t.Fatalf("%d completed tasks, %v; want 2", len(tasks), err)
	}
}
