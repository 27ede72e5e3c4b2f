package coordinator

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/record"
	"github.com/tenurehq/tenure/internal/state"
)

// TestDeadlineFailsWaitingTask: a task that waits past its deadline fails
// there, with attempts left, and is never leased.
func TestDeadlineFailsWaitingTask(t *testing.T) {
	e := newEnv(t, 40)
	res, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", Timeout: 10 * time.Second,
		NotBefore: epoch.Add(5 * time.Second), Retry: state.RetryPolicy{MaxAttempts: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if want := state.TimeOf(epoch.Add(10 * time.Second)); res.Deadline != want {
		t.Fatalf("submit answered deadline %v, want %v", res.Deadline, want)
	}
	e.clock.Advance(10*time.Second - time.Nanosecond)
	if n, err := e.c.ExpireDue(ctx); err != nil || n != 0 {
		t.Fatalf("before the deadline: %d records, %v", n, err)
	}
	e.clock.Advance(time.Nanosecond)
	if n, err := e.c.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("at the deadline: %d records, %v", n, err)
	}
	v, err := e.c.View(ctx, res.Task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != state.Failed || v.FailureReason != state.ReasonDeadlineExceeded || v.Attempt != 0 || v.Deadline != 0 {
		t.Fatalf("task %s (%q), attempt %d, deadline %v; want FAILED (deadline_exceeded) without an attempt or a deadline in force",
			v.State, v.FailureReason, v.Attempt, v.Deadline)
	}
	if ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q"}); err != nil || len(ls) != 0 {
		t.Fatalf("lease after the deadline: %+v, %v", ls, err)
	}
	want := []record.Type{record.TypeTaskCreated, record.TypeTaskDeadlineExceeded}
	if got := e.historyTypes(res.Task.ID); !reflect.DeepEqual(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	e.restart()
}

// TestDeadlineCapsLeaseAndWins: the lease of a task with a deadline ends
// at the deadline whatever its window and heartbeats; there the task fails
// (it is not retried, though attempts are left), and its worker is told
// its lease is lost.
func TestDeadlineCapsLeaseAndWins(t *testing.T) {
	e := newEnv(t, 41)
	deadline := epoch.Add(20 * time.Second)
	task := e.submit("q", func(r *SubmitRequest) {
		r.Deadline, r.ExecutionWindow, r.Retry.MaxAttempts = deadline, 30*time.Second, 3
	})
	l := e.lease("w", "q")
	if !l.LeaseExpiry.Equal(deadline) || !l.Deadline.Equal(deadline) {
		t.Fatalf("lease expiry %v, deadline %v; want both at the deadline %v", l.LeaseExpiry, l.Deadline, deadline)
	}
	e.clock.Advance(15 * time.Second)
	exp, err := e.c.Heartbeat(ctx, l.TaskID, l.LeaseID)
	if err != nil || !exp.Equal(deadline) {
		t.Fatalf("heartbeat: expiry %v, %v; want the deadline %v", exp, err, deadline)
	}
	e.clock.Advance(5 * time.Second) // the lease's expiry and the deadline
	if n, err := e.c.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("at the deadline: %d records, %v", n, err)
	}
	got := e.get(task.ID)
	ex := got.Executions[0]
	if got.State != state.Failed || got.FailureReason != state.ReasonDeadlineExceeded ||
		ex.Status != state.ExecAborted || ex.Reason != state.ReasonLeaseDeadline {
		t.Fatalf("task %s (%q), execution %s (%q); want FAILED (deadline_exceeded), ABORTED (deadline exceeded)",
			got.State, got.FailureReason, ex.Status, ex.Reason)
	}
	if _, err := e.c.Heartbeat(ctx, l.TaskID, l.LeaseID); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("heartbeat after the deadline: %v", err)
	}
	if err := e.c.Complete(ctx, l.TaskID, l.LeaseID, nil); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("complete after the deadline: %v", err)
	}
	if _, err := e.c.Fail(ctx, l.TaskID, l.LeaseID, "boom", false); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("fail after the deadline: %v", err)
	}
	want := []record.Type{record.TypeTaskCreated, record.TypeLeaseGranted, record.TypeTaskDeadlineExceeded,
		record.TypeTaskCancelled, record.TypeTaskCancelled, record.TypeTaskCancelled}
	if h := e.historyTypes(task.ID); !reflect.DeepEqual(h, want) {
		t.Fatalf("history %v, want %v: no extension beyond the deadline, no expiry", h, want)
	}
	if ws := e.c.Workers(); len(ws) != 1 || ws[0].ActiveLeases != 0 {
		t.Fatalf("workers %+v, want w holding no lease", ws)
	}
	e.restart()
}

// TestDeadlineMetByALeaseHolder: a worker that meets its lease at the
// deadline, before any scan, fails the task there and is told so.
func TestDeadlineMetByALeaseHolder(t *testing.T) {
	e := newEnv(t, 42)
	task := e.submit("q", func(r *SubmitRequest) { r.Timeout = 5 * time.Second })
	l := e.lease("w", "q")
	e.clock.Advance(6 * time.Second)
	if _, err := e.c.Commit(ctx, l.TaskID, l.LeaseID, []byte("r")); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "ended at the task's deadline") {
		t.Fatalf("commit after the deadline: %v", err)
	}
	if got := e.get(task.ID); got.State != state.Failed || got.FailureReason != state.ReasonDeadlineExceeded {
		t.Fatalf("task %s (%q), want FAILED (deadline_exceeded)", got.State, got.FailureReason)
	}
}

// TestLeaseFailsTasksPastTheirDeadline: a Lease call fails the tasks it
// finds past their deadline, even beyond the bound of one pass, and
// leases the next ready task in their place, without waiting.
func TestLeaseFailsTasksPastTheirDeadline(t *testing.T) {
	// One task at a time: each late one is failed in turn, within the
	// bound; three at once: the second late one is beyond it.
	for _, n := range []int{1, 3} {
		e := newEnv(t, 43)
		e.maxExpiries = 1
		e.restart()
		late := []*state.Task{
			e.submit("q", func(r *SubmitRequest) { r.Timeout, r.Priority = time.Second, 2 }),
			e.submit("q", func(r *SubmitRequest) { r.Timeout, r.Priority = time.Second, 1 }),
		}
		ok := e.submit("q", func(r *SubmitRequest) { r.Timeout = time.Minute })
		e.clock.Advance(time.Second)
		ls, err := e.c.Lease(ctx, LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: n})
		if err != nil || len(ls) != 1 || ls[0].TaskID != ok.ID {
			t.Fatalf("lease of up to %d: %+v, %v; want only task %s", n, ls, err, ok.ID)
		}
		for _, task := range late {
			if got := e.get(task.ID); got.State != state.Failed || got.FailureReason != state.ReasonDeadlineExceeded {
				t.Fatalf("lease of up to %d: task %s is %s (%q), want FAILED (deadline_exceeded)", n, task.ID, got.State, got.FailureReason)
			}
		}
	}
}

// TestCommittedTaskOutlivesDeadline: a task committed before its deadline
// is finalised as usual after it, under a lease the deadline no longer
// caps.
func TestCommittedTaskOutlivesDeadline(t *testing.T) {
	e := newEnv(t, 44)
	task := e.submit("q", func(r *SubmitRequest) { r.Timeout, r.ExecutionWindow = 20*time.Second, 30*time.Second })
	l := e.lease("w", "q")
	e.clock.Advance(5 * time.Second)
	if _, err := e.c.Commit(ctx, l.TaskID, l.LeaseID, []byte("r")); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(15 * time.Second) // the deadline, and the lease's expiry
	if n, err := e.c.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("at the deadline: %d records, %v", n, err)
	}
	if got := e.get(task.ID); got.State != state.Committed {
		t.Fatalf("committed task is %s after its deadline", got.State)
	}
	f := e.lease("w2", "q")
	if !f.Committed || !f.Deadline.IsZero() || !f.LeaseExpiry.Equal(e.clock.Now().Add(30*time.Second)) {
		t.Fatalf("finalisation lease %+v: want committed, no deadline, a whole window", f)
	}
	if err := e.c.Complete(ctx, f.TaskID, f.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	want := []record.Type{record.TypeTaskCreated, record.TypeLeaseGranted, record.TypeTaskCommitted,
		record.TypeLeaseExpired, record.TypeLeaseGranted, record.TypeTaskCompleted}
	if h := e.historyTypes(task.ID); !reflect.DeepEqual(h, want) {
		t.Fatalf("history %v, want %v", h, want)
	}
}

// TestRunWakesAtDeadline: the background pass wakes at the next deadline,
// not at its scan interval.
func TestRunWakesAtDeadline(t *testing.T) {
	e := newEnv(t, 45)
	e.scan = time.Hour
	e.restart()
	task := e.submit("q", func(r *SubmitRequest) { r.Timeout = 10 * time.Second })
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.c.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}()
	e.clock.WaitForTimers(1)
	e.clock.Advance(10*time.Second - time.Millisecond)
	if got := e.get(task.ID); got.State != state.Waiting {
		t.Fatalf("task %s before its deadline", got.State)
	}
	e.clock.Advance(time.Millisecond)
	e.clock.WaitForTimers(1) // Run is back to waiting: the pass is written
	if got := e.get(task.ID); got.State != state.Failed || got.FailureReason != state.ReasonDeadlineExceeded {
		t.Fatalf("task %s (%q) once Run woke at its deadline, want FAILED (deadline_exceeded)", got.State, got.FailureReason)
	}
}

// TestDeadlineShownAndDeduplicated: a task's deadline is in its views while
// in force; a repeated request id returns the first task and its deadline.
func TestDeadlineShownAndDeduplicated(t *testing.T) {
	e := newEnv(t, 46)
	deadline := state.TimeOf(epoch.Add(time.Hour))
	first, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: "r1", Deadline: deadline.Std()})
	if err != nil || first.Deadline != deadline {
		t.Fatalf("submit: deadline %v, %v", first.Deadline, err)
	}
	again, err := e.c.Submit(ctx, SubmitRequest{Queue: "q", RequestID: "r1", Timeout: time.Minute})
	if err != nil || !again.Duplicate || again.Task.ID != first.Task.ID || again.Deadline != deadline {
		t.Fatalf("repeated submit: %+v, %v; want the first task with its deadline", again, err)
	}
	page, _, err := e.c.List(ctx, ListFilter{})
	if err != nil || len(page) != 1 || page[0].Deadline != deadline {
		t.Fatalf("list: %+v, %v", page, err)
	}
}

// TestRetryAfterDeadline: a submit retried with its request id after its
// deadline passed is answered with the first task (failed at its
// deadline), not refused; a new request id with that deadline is refused,
// naming the field, and creates nothing.
func TestRetryAfterDeadline(t *testing.T) {
	e := newEnv(t, 47)
	deadline := epoch.Add(time.Minute)
	req := SubmitRequest{Queue: "q", RequestID: "r1", Deadline: deadline}
	first, err := e.c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	if _, err := e.c.ExpireDue(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := e.c.Submit(ctx, req)
	if err != nil || !again.Duplicate || again.Task.ID != first.Task.ID || again.Task.State != state.Failed {
		t.Fatalf("a retry after the deadline: %+v, %v; want the first task, FAILED", again, err)
	}
	before := e.c.Stats().LastLSN
	req.RequestID = "r2"
	_, err = e.c.Submit(ctx, req)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "deadline" {
		t.Fatalf("a new submit with a past deadline: %v, want an error naming deadline", err)
	}
	if e.c.Stats().LastLSN != before {
		t.Fatal("the refused submit wrote a record")
	}
}
