package client_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/sdk/client"
)

// startServer runs a real node behind the API (see apitest.Start).
func startServer(t *testing.T, wrap func(http.Handler) http.Handler) string {
	return apitest.Start(t, wrap)
}

func newClient(t *testing.T, url string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(url, opts)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return c
}

var protocols = []string{client.ProtocolConnect, client.ProtocolJSON, client.ProtocolGRPC}

// perProtocol runs test once per protocol, in parallel.
func perProtocol(t *testing.T, test func(t *testing.T, proto string)) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			test(t, proto)
		})
	}
}

// eachProtocol runs test once per protocol, in parallel, each with a
// client of a server of its own.
func eachProtocol(t *testing.T, test func(t *testing.T, c *client.Client)) {
	perProtocol(t, func(t *testing.T, proto string) {
		test(t, newClient(t, startServer(t, nil), client.Options{Protocol: proto}))
	})
}

// eachOps runs test once per protocol, in parallel, each with an
// opsClient of a server of its own.
func eachOps(t *testing.T, test func(t *testing.T, clk *clock.Fake, c *client.Client)) {
	perProtocol(t, func(t *testing.T, proto string) {
		clk, c := opsClient(t, proto)
		test(t, clk, c)
	})
}

// t0 is when the clock of an opsClient's server starts.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// opsClient is an operator's client over proto (who asks: ops@box) of a
// real server whose clock, clk, stands at t0 until the test moves it.
func opsClient(t *testing.T, proto string) (clk *clock.Fake, c *client.Client) {
	t.Helper()
	clk = clock.NewFake(t0)
	return clk, newClient(t, apitest.StartClock(t, clk), client.Options{Protocol: proto, RequestedBy: "ops@box"})
}

// TestRoundTrip calls every method against a real server, once per
// protocol, and checks what comes back.
func TestRoundTrip(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *client.Client) {
		ctx := t.Context()
		const q = "rt"

		// Submit, with and without a request id.
		res, err := c.Submit(ctx, client.SubmitRequest{
			Queue: q, Payload: []byte("one"), RequestID: "req-1",
			ExecutionWindow: 2 * time.Second, Priority: 5,
			Retry: &client.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Second, Multiplier: 3},
		})
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		one := res.Task
		if one == nil || res.Duplicate || res.TaskID == "" || one.ID != res.TaskID || one.State != client.TaskStateWaiting ||
			!bytes.Equal(one.Payload, []byte("one")) || one.Priority != 5 || one.RequestID != "req-1" ||
			one.ExecutionWindow != 2*time.Second || one.Namespace != "default" || one.Queue != q ||
			one.RetryPolicy != (client.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Second, Multiplier: 3}) ||
			one.CreatedAt.IsZero() || !one.NotBefore.IsZero() || !one.LeaseExpiry.IsZero() || one.Executions != nil {
			t.Fatalf("Submit answered %+v (duplicate %v)", one, res.Duplicate)
		}
		dup, err := c.Submit(ctx, client.SubmitRequest{Queue: q, Payload: []byte("one"), RequestID: "req-1"})
		if err != nil || !dup.Duplicate || dup.TaskID != one.ID || string(dup.Task.Payload) != "one" {
			t.Fatalf("resubmit with the same request id: %+v, %v; want the first task as a duplicate", dup, err)
		}
		if _, err := c.Submit(ctx, client.SubmitRequest{Queue: q, Payload: []byte("other"), RequestID: "req-1"}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), one.ID) {
			t.Fatalf("the same request id for another payload: %v; want ErrInvalidArgument naming %s", err, one.ID)
		}
		notBefore := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		anon, err := c.Submit(ctx, client.SubmitRequest{Queue: q, NotBefore: notBefore})
		if err != nil {
			t.Fatalf("Submit without request id: %v", err)
		}
		if anon.Task.RequestID == "" || !anon.Task.NotBefore.Equal(notBefore) {
			t.Fatalf("Submit without request id: got request id %q, not before %v; want a generated id and %v", anon.Task.RequestID, anon.Task.NotBefore, notBefore)
		}

		// Deadlines: absolute, or a timeout from the submit; a past
		// one is refused naming its field.
		deadline := notBefore.Add(time.Hour)
		dl, err := c.Submit(ctx, client.SubmitRequest{Queue: "rt-deadline", NotBefore: notBefore, Deadline: deadline})
		if err != nil || !dl.Task.Deadline.Equal(deadline) {
			t.Fatalf("Submit with a deadline: %+v, %v; want deadline %v", dl.Task, err, deadline)
		}
		to, err := c.Submit(ctx, client.SubmitRequest{Queue: "rt-deadline", NotBefore: notBefore, Timeout: 2 * time.Hour})
		if err != nil || !to.Task.Deadline.Equal(to.Task.CreatedAt.Add(2*time.Hour)) {
			t.Fatalf("Submit with a timeout: %+v, %v; want the deadline 2h after its creation", to.Task, err)
		}
		var ce *client.Error
		if _, err := c.Submit(ctx, client.SubmitRequest{Queue: "rt-deadline", Deadline: time.Unix(1, 0)}); !errors.As(err, &ce) ||
			!errors.Is(err, client.ErrInvalidArgument) || ce.Field != "deadline" {
			t.Fatalf("Submit with a past deadline: %v; want ErrInvalidArgument naming deadline", err)
		}

		// SubmitBatch, answered with ids only unless whole tasks are
		// asked for.
		batch, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: []client.SubmitRequest{
			{Queue: q, Payload: []byte("b0"), Retry: &client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}},
			{Queue: q, Payload: []byte("one"), RequestID: "req-1"},
		}, ReturnTasks: true})
		if err != nil {
			t.Fatalf("SubmitBatch: %v", err)
		}
		if len(batch) != 2 || batch[0].Duplicate || !batch[1].Duplicate || batch[1].TaskID != one.ID || batch[1].Task.ID != one.ID ||
			batch[0].Task.ID != batch[0].TaskID || string(batch[0].Task.Payload) != "b0" || batch[0].Task.RequestID == "" {
			t.Fatalf("SubmitBatch with ReturnTasks answered %+v", batch)
		}
		ids, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: []client.SubmitRequest{{Queue: q, Payload: []byte("one"), RequestID: "req-1"}}})
		if err != nil || len(ids) != 1 || ids[0] != (client.SubmitResult{TaskID: one.ID, Duplicate: true}) {
			t.Fatalf("SubmitBatch of ids: %+v, %v; want only the id of the first task, as a duplicate", ids, err)
		}

		// GetTask and ListTasks (paged).
		got, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: one.ID})
		if err != nil || got.ID != one.ID || !got.CreatedAt.Equal(one.CreatedAt) {
			t.Fatalf("GetTask: %+v, %v", got, err)
		}
		want := []string{one.ID, anon.TaskID, batch[0].TaskID}
		var listed []string
		token := ""
		for {
			page, err := c.ListTasksPage(ctx, client.ListTasksRequest{Queue: q, PageSize: 1, PageToken: token})
			if err != nil {
				t.Fatalf("ListTasksPage: %v", err)
			}
			for _, tk := range page.Tasks {
				listed = append(listed, tk.ID)
			}
			if page.NextPageToken == "" {
				break
			}
			token = page.NextPageToken
		}
		if strings.Join(listed, ",") != strings.Join(want, ",") {
			t.Fatalf("ListTasksPage listed %v, want %v", listed, want)
		}
		// ListTasks pages for the loop (a call per task here), and stops
		// when the loop does.
		listed = nil
		for tk, err := range c.ListTasks(ctx, client.ListTasksRequest{Queue: q, PageSize: 1}) {
			if err != nil {
				t.Fatalf("ListTasks: %v", err)
			}
			listed = append(listed, tk.ID)
		}
		if strings.Join(listed, ",") != strings.Join(want, ",") {
			t.Fatalf("ListTasks listed %v, want %v", listed, want)
		}
		listed = nil
		for tk := range c.ListTasks(ctx, client.ListTasksRequest{Queue: q, PageSize: 1}) {
			if listed = append(listed, tk.ID); len(listed) == 2 {
				break
			}
		}
		if strings.Join(listed, ",") != strings.Join(want[:2], ",") {
			t.Fatalf("ListTasks stopped after two: listed %v, want %v", listed, want[:2])
		}
		// ListTasks from a page's token lists from that page on.
		first, err := c.ListTasksPage(ctx, client.ListTasksRequest{Queue: q, PageSize: 1})
		if err != nil {
			t.Fatalf("ListTasksPage: %v", err)
		}
		fromSecond, err := client.Collect(c.ListTasks(ctx, client.ListTasksRequest{Queue: q, PageSize: 1, PageToken: first.NextPageToken}))
		if err != nil || len(fromSecond) != 2 || fromSecond[0].ID != want[1] || fromSecond[1].ID != want[2] {
			t.Fatalf("ListTasks from the second page: %+v, %v; want %v", fromSecond, err, want[1:])
		}
		waiting, err := client.Collect(c.ListTasks(ctx, client.ListTasksRequest{Namespace: "default", Queue: q, State: client.TaskStateWaiting}))
		if err != nil || len(waiting) != 3 {
			t.Fatalf("ListTasks WAITING: %d tasks, %v; want 3", len(waiting), err)
		}
		if none, err := client.Collect(c.ListTasks(ctx, client.ListTasksRequest{Queue: q, State: client.TaskStateDead})); err != nil || len(none) != 0 {
			t.Fatalf("ListTasks DEAD: %d tasks, %v; want none", len(none), err)
		}

		// Worker protocol: lease the highest priority task, start,
		// heartbeat, commit, complete.
		leased, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w1", Queue: q, MaxTasks: 1, Wait: time.Second}))
		if err != nil || len(leased) != 1 {
			t.Fatalf("Lease: %+v, %v; want task %s", leased, err, one.ID)
		}
		l := leased[0]
		if l.ID != one.ID || l.Attempt != 1 || l.Committed || l.LeaseID == "" || string(l.Payload) != "one" ||
			l.Namespace != "default" || l.Queue != q || l.ExecutionWindow != 2*time.Second || l.LeaseExpiry.IsZero() {
			t.Fatalf("Lease answered %+v; want task %s attempt 1 with its payload, window and expiry", l, one.ID)
		}
		if err := c.Start(ctx, client.StartRequest{TaskID: l.ID, LeaseID: l.LeaseID}); err != nil {
			t.Fatalf("Start: %v", err)
		}
		hb, err := c.Heartbeat(ctx, client.HeartbeatRequest{TaskID: l.ID, LeaseID: l.LeaseID})
		if exp := hb.LeaseExpiry; err != nil || exp.Before(l.LeaseExpiry) {
			t.Fatalf("Heartbeat: %v, %v; want an expiry not before %v", exp, err, l.LeaseExpiry)
		}
		tok, err := c.Commit(ctx, client.CommitRequest{TaskID: l.ID, LeaseID: l.LeaseID, Result: []byte("result")})
		if err != nil || tok != (client.FencingToken{TaskID: one.ID, Attempt: 1}) {
			t.Fatalf("Commit: %+v, %v", tok, err)
		}
		if err := c.Complete(ctx, client.CompleteRequest{TaskID: l.ID, LeaseID: l.LeaseID}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		got, err = c.GetTask(ctx, client.GetTaskRequest{TaskID: one.ID})
		if err != nil || got.State != client.TaskStateCompleted || string(got.Result) != "result" {
			t.Fatalf("after Complete: %+v, %v", got, err)
		}
		if len(got.Executions) != 1 {
			t.Fatalf("after Complete: executions %+v, want one", got.Executions)
		}
		if e := got.Executions[0]; e.Attempt != 1 || e.LeaseID != l.LeaseID || e.WorkerID != "w1" || e.Status != client.ExecutionStatusDone ||
			e.LeasedAt.IsZero() || e.StartedAt.IsZero() || e.CommittedAt.IsZero() || e.FinishedAt.IsZero() || e.Reason != "" {
			t.Fatalf("after Complete: execution %+v; want attempt 1 of w1, DONE, leased, started, committed and finished", e)
		}
		hist, err := c.GetTaskHistory(ctx, client.GetTaskHistoryRequest{TaskID: one.ID})
		if err != nil {
			t.Fatalf("GetTaskHistory: %v", err)
		}
		var types []string
		for _, e := range hist {
			types = append(types, e.Type)
			if e.LSN == 0 || e.At.IsZero() {
				t.Errorf("history entry %+v has no LSN or time", e)
			}
			if e.Type == "LeaseGranted" && (e.LeaseID != l.LeaseID || e.WorkerID != "w1" || e.Attempt != 1 || e.Detail == "") {
				t.Errorf("LeaseGranted entry %+v; want lease %s of w1, attempt 1, with a detail", e, l.LeaseID)
			}
		}
		// A heartbeat in the grant's clock tick writes no LeaseExtended,
		// so only the records that must be there are checked, in order.
		want = []string{"TaskCreated", "LeaseGranted", "ExecutionStarted", "TaskCommitted", "TaskCompleted"}
		rest := types
		for _, w := range want {
			for len(rest) > 0 && rest[0] != w {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				t.Fatalf("GetTaskHistory types %v; want %v in this order", types, want)
			}
		}

		// Fail: retried, then permanent.
		leased, err = tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w1", Queue: q, MaxTasks: 5}))
		if err != nil || len(leased) != 1 || leased[0].ID != batch[0].TaskID {
			t.Fatalf("Lease b0: %+v, %v", leased, err)
		}
		fr, err := c.Fail(ctx, client.FailRequest{TaskID: leased[0].ID, LeaseID: leased[0].LeaseID, Reason: "boom"})
		if err != nil || fr.State != client.TaskStateWaiting || fr.RetryAt.IsZero() {
			t.Fatalf("Fail: %+v, %v; want WAITING with a retry time", fr, err)
		}
		leased, err = tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "w1", Queue: q, Wait: 5 * time.Second}))
		if err != nil || len(leased) != 1 || leased[0].Attempt != 2 {
			t.Fatalf("Lease b0 again: %+v, %v", leased, err)
		}
		fr, err = c.Fail(ctx, client.FailRequest{TaskID: leased[0].ID, LeaseID: leased[0].LeaseID, Reason: "broken", Permanent: true})
		if err != nil || fr != (client.FailResult{State: client.TaskStateFailed}) {
			t.Fatalf("Fail permanent: %+v, %v; want FAILED without a retry time", fr, err)
		}

		// KillTask.
		killed, err := c.KillTask(ctx, client.KillTaskRequest{TaskID: anon.TaskID, Reason: "not needed"})
		if err != nil || killed.ID != anon.TaskID || killed.State != client.TaskStateDead || killed.FailureReason != "not needed" {
			t.Fatalf("KillTask: %+v, %v; want the task, DEAD, with the reason", killed, err)
		}
		got, err = c.GetTask(ctx, client.GetTaskRequest{TaskID: anon.TaskID})
		if err != nil || got.State != client.TaskStateDead || got.FailureReason != "not needed" {
			t.Fatalf("after KillTask: %+v, %v", got, err)
		}
	})
}

// errorCase is what a test expects of a refused call's error.
type errorCase struct {
	sentinel error
	want     client.Error // the fields checked: Op, Code, Reason and those set here
}

// checkError checks that err is an *Error with want's fields, that
// errors.Is matches its sentinel and no other, and that the status code is
// reachable through the wrapped connect error.
func checkError(t *testing.T, what string, err error, c errorCase) {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Errorf("%s: %v (%T) is not a *client.Error", what, err, err)
		return
	}
	w := c.want
	if e.Op != w.Op || e.Code != w.Code || e.Reason != w.Reason || e.Message == "" ||
		(w.TaskID != "" && e.TaskID != w.TaskID) || e.LeaseID != w.LeaseID || e.CommittedBy != w.CommittedBy ||
		e.State != w.State || e.Field != w.Field || e.Size != w.Size || e.Limit != w.Limit {
		t.Errorf("%s: error %+v\nwant %+v (and a message)", what, *e, w)
	}
	for _, s := range []error{client.ErrLeaseLost, client.ErrAlreadyCommitted, client.ErrWrongState, client.ErrNotFound,
		client.ErrInvalidArgument, client.ErrTooLarge, client.ErrUnavailable, client.ErrAlreadyExists, client.ErrFull} {
		if got := errors.Is(err, s); got != (s == c.sentinel) {
			t.Errorf("%s: errors.Is(%v, %v) = %v", what, err, s, got)
		}
	}
	if got := connect.CodeOf(err); got != w.Code {
		t.Errorf("%s: connect.CodeOf = %v, want %v", what, got, w.Code)
	}
	// "client: Op: " and the message, which says the code once: in its
	// own words ("invalid argument: …"), or after it ("failed_precondition:
	// lease lost: …").
	code := w.Code.String()
	words := strings.ReplaceAll(code, "_", " ")
	rest, ok := strings.CutPrefix(err.Error(), "client: "+w.Op+": ")
	switch after, coded := strings.CutPrefix(rest, code+": "); {
	case !ok:
		t.Errorf("%s: message %q does not start with %q", what, err.Error(), "client: "+w.Op+": ")
	case coded && strings.Contains(after, words):
		t.Errorf("%s: message %q says its code twice", what, err.Error())
	case !coded && !strings.Contains(rest, words):
		t.Errorf("%s: message %q does not say its code (%s)", what, err.Error(), code)
	}
}

// TestErrors provokes each refusal on every protocol and checks its
// sentinel and the detail's fields, as the server reported them.
func TestErrors(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *client.Client) {
		ctx := t.Context()
		const q = "errs"

		_, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: "no-such-task"})
		checkError(t, "GetTask unknown", err, errorCase{client.ErrNotFound, client.Error{
			Op: "GetTask", Code: connect.CodeNotFound, Reason: client.ReasonNotFound, TaskID: "no-such-task"}})
		_, err = c.Submit(ctx, client.SubmitRequest{Queue: "a b"})
		checkError(t, "Submit to an invalid queue", err, errorCase{client.ErrInvalidArgument, client.Error{
			Op: "Submit", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "queue"}})
		_, err = c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: []client.SubmitRequest{{Queue: q}, {Queue: q, Payload: make([]byte, 1<<20+1)}}})
		checkError(t, "SubmitBatch with a payload over 1 MiB", err, errorCase{client.ErrTooLarge, client.Error{
			Op: "SubmitBatch", Code: connect.CodeResourceExhausted, Reason: client.ReasonTooLarge,
			Field: "requests[1].payload", Size: 1<<20 + 1, Limit: 1 << 20}})

		// One task, committed by lease A, whose lease then expires: the
		// next lease is a finalisation lease. (The window leaves the
		// commit time on a loaded machine; lease B waits it out.)
		sub, err := c.Submit(ctx, client.SubmitRequest{Queue: q, ExecutionWindow: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		id := sub.TaskID
		a, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "a", Queue: q, Wait: time.Second}))
		if err != nil || len(a) != 1 {
			t.Fatalf("lease A: %+v, %v", a, err)
		}
		if _, err := c.Commit(ctx, client.CommitRequest{TaskID: id, LeaseID: a[0].LeaseID, Result: []byte("r")}); err != nil {
			t.Fatalf("commit A: %v", err)
		}
		b, err := tasksOf(c.Lease(ctx, client.LeaseRequest{WorkerID: "b", Queue: q, Wait: 10 * time.Second}))
		if err != nil || len(b) != 1 || !b[0].Committed || string(b[0].CommittedResult) != "r" {
			t.Fatalf("lease B: %+v, %v; want a finalisation lease with the committed result", b, err)
		}
		_, err = c.Commit(ctx, client.CommitRequest{TaskID: id, LeaseID: b[0].LeaseID, Result: []byte("other")})
		checkError(t, "Commit on a finalisation lease", err, errorCase{client.ErrAlreadyCommitted, client.Error{
			Op: "Commit", Code: connect.CodeAlreadyExists, Reason: client.ReasonAlreadyCommitted,
			TaskID: id, LeaseID: b[0].LeaseID, CommittedBy: a[0].LeaseID}})
		_, err = c.Heartbeat(ctx, client.HeartbeatRequest{TaskID: id, LeaseID: a[0].LeaseID})
		checkError(t, "Heartbeat of the expired lease A", err, errorCase{client.ErrLeaseLost, client.Error{
			Op: "Heartbeat", Code: connect.CodeFailedPrecondition, Reason: client.ReasonLeaseLost, TaskID: id, LeaseID: a[0].LeaseID}})
		_, err = c.Fail(ctx, client.FailRequest{TaskID: id, LeaseID: b[0].LeaseID, Reason: "no"})
		checkError(t, "Fail of a committed task", err, errorCase{client.ErrWrongState, client.Error{
			Op: "Fail", Code: connect.CodeFailedPrecondition, Reason: client.ReasonWrongState, TaskID: id, State: client.TaskStateCommitted}})
		if err := c.Complete(ctx, client.CompleteRequest{TaskID: id, LeaseID: b[0].LeaseID}); err != nil {
			t.Fatalf("Complete B: %v", err)
		}
		_, err = c.KillTask(ctx, client.KillTaskRequest{TaskID: id, Reason: "too late"})
		checkError(t, "KillTask of a completed task", err, errorCase{client.ErrWrongState, client.Error{
			Op: "KillTask", Code: connect.CodeFailedPrecondition, Reason: client.ReasonWrongState, TaskID: id, State: client.TaskStateCompleted}})
	})
}

// TestErrFull: a server at its memory budget (256 KiB here) refuses a
// Submit with ErrFull, on every protocol: what it holds and its budget,
// and when to retry; and still serves a lease.
func TestErrFull(t *testing.T) {
	const limit = 256 << 10
	url := apitest.StartBudget(t, limit, 2*time.Minute)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			c := newClient(t, url, client.Options{Protocol: proto})
			var err error
			for i := 0; err == nil; i++ {
				if i == 1000 {
					t.Fatalf("1000 submits of 1 KiB were all accepted under a budget of %d bytes", limit)
				}
				_, err = c.Submit(t.Context(), client.SubmitRequest{Queue: "full", Payload: make([]byte, 1<<10)})
			}
			var e *client.Error
			if !errors.As(err, &e) || !errors.Is(err, client.ErrFull) || errors.Is(err, client.ErrTooLarge) ||
				e.Code != connect.CodeResourceExhausted || e.Reason != client.ReasonFull || e.Limit != limit || e.Size < limit-4<<10 || e.RetryAfter != 2*time.Minute {
				t.Fatalf("a Submit past the budget: %+v, want ErrFull with what the server holds, its budget of %d and a retry after 2m", err, limit)
			}
			if _, err := c.Lease(t.Context(), client.LeaseRequest{WorkerID: "w", Queue: "full"}); err != nil {
				t.Fatalf("a Lease from a full server: %v", err)
			}
		})
	}
}

// TestErrorsWithoutDetail: an answer without a tenure reason (a proxy's, an
// older server's) is classified by its status code.
func TestErrorsWithoutDetail(t *testing.T) {
	for _, tc := range []struct {
		code connect.Code
		errorCase
	}{
		{connect.CodeNotFound, errorCase{client.ErrNotFound, client.Error{Reason: client.ReasonNotFound}}},
		{connect.CodeFailedPrecondition, errorCase{client.ErrLeaseLost, client.Error{Reason: client.ReasonLeaseLost}}},
		{connect.CodeAlreadyExists, errorCase{client.ErrAlreadyCommitted, client.Error{Reason: client.ReasonAlreadyCommitted}}},
		{connect.CodeInvalidArgument, errorCase{client.ErrInvalidArgument, client.Error{Reason: client.ReasonInvalidArgument}}},
		{connect.CodeResourceExhausted, errorCase{client.ErrTooLarge, client.Error{Reason: client.ReasonTooLarge}}},
		{connect.CodeUnavailable, errorCase{client.ErrUnavailable, client.Error{Reason: client.ReasonUnavailable}}},
		{connect.CodeInternal, errorCase{nil, client.Error{Reason: client.ReasonUnspecified}}},
		{connect.CodePermissionDenied, errorCase{nil, client.Error{Reason: client.ReasonUnspecified}}},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			t.Parallel()
			url := startServer(t, func(http.Handler) http.Handler { return failing(tc.code, nil) })
			c := newClient(t, url, client.Options{MaxRetries: -1})
			err := c.Complete(t.Context(), client.CompleteRequest{TaskID: "t", LeaseID: "l"})
			tc.want.Op, tc.want.Code = "Complete", tc.code
			checkError(t, "Complete", err, tc.errorCase)
		})
	}
}

// failing answers every request with code, in the caller's protocol, and
// counts the requests.
func failing(code connect.Code, count *atomic.Int32) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if count != nil {
			count.Add(1)
		}
		ew.Write(w, r, connect.NewError(code, errors.New("injected by the test")))
	})
}

// flaky answers the first n requests with unavailable and forwards the rest.
// With lose set, the first n requests are served first and then answered
// unavailable: the server acted, the client never heard.
type flaky struct {
	next  http.Handler
	n     int32
	lose  bool
	calls atomic.Int32
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.calls.Add(1) > f.n {
		f.next.ServeHTTP(w, r)
		return
	}
	if f.lose {
		f.next.ServeHTTP(httptest.NewRecorder(), r)
	}
	connect.NewErrorWriter().Write(w, r, connect.NewError(connect.CodeUnavailable, errors.New("injected by the test")))
}

func TestRetryOnUnavailable(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			f := &flaky{n: 3}
			url := startServer(t, func(h http.Handler) http.Handler { f.next = h; return f })
			c := newClient(t, url, client.Options{Protocol: proto, RetryBackoff: time.Millisecond})
			res, err := c.Submit(t.Context(), client.SubmitRequest{Queue: "q"})
			if err != nil {
				t.Fatalf("Submit after 3 unavailable answers: %v", err)
			}
			if got := f.calls.Load(); got != 4 {
				t.Errorf("server saw %d requests, want 4 (3 failed + 1)", got)
			}
			if res.Duplicate {
				t.Errorf("the task is a duplicate, but no earlier try reached the server")
			}
		})
	}
}

// TestRetryKeepsRequestID: the server creates the task but the answer is
// lost; the retry carries the same generated request id, so there is still
// one task.
func TestRetryKeepsRequestID(t *testing.T) {
	f := &flaky{n: 1, lose: true}
	url := startServer(t, func(h http.Handler) http.Handler { f.next = h; return f })
	c := newClient(t, url, client.Options{RetryBackoff: time.Millisecond})
	ctx := t.Context()
	res, err := c.Submit(ctx, client.SubmitRequest{Queue: "q"})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if !res.Duplicate {
		t.Errorf("the retry was not answered as a duplicate: the first try's task was not found by request id")
	}
	batch, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: []client.SubmitRequest{{Queue: "q"}, {Queue: "q"}}})
	if err != nil || len(batch) != 2 || batch[0].Duplicate || batch[1].Duplicate {
		t.Fatalf("SubmitBatch: %+v, %v; want two new tasks", batch, err)
	}
	tasks, err := client.Collect(c.ListTasks(ctx, client.ListTasksRequest{Queue: "q"}))
	if err != nil || len(tasks) != 3 {
		t.Fatalf("ListTasks: %d tasks, %v; want 3 (one per submitted request)", len(tasks), err)
	}
}

func TestNoRetryOnOtherCodes(t *testing.T) {
	codes := []connect.Code{
		connect.CodeInternal, connect.CodeUnknown, connect.CodeFailedPrecondition, connect.CodeAlreadyExists,
		connect.CodeNotFound, connect.CodeInvalidArgument, connect.CodeResourceExhausted,
		connect.CodeDeadlineExceeded, connect.CodeAborted, connect.CodeCanceled,
	}
	for _, proto := range protocols {
		for _, code := range codes {
			t.Run(proto+"/"+code.String(), func(t *testing.T) {
				t.Parallel()
				var count atomic.Int32
				url := startServer(t, func(http.Handler) http.Handler { return failing(code, &count) })
				c := newClient(t, url, client.Options{Protocol: proto})
				err := c.Complete(t.Context(), client.CompleteRequest{TaskID: "t", LeaseID: "l"})
				var e *client.Error
				if !errors.As(err, &e) || e.Code != code {
					t.Errorf("Complete answered %v, want an *Error with code %v", err, code)
				}
				if got := count.Load(); got != 1 {
					t.Errorf("server saw %d requests, want 1 (no retry)", got)
				}
			})
		}
	}
}

// TestLocalValidation: requests the client can tell are wrong are refused
// before they are sent, as the server would refuse them.
func TestLocalValidation(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1", client.Options{})
	_, err := tasksOf(c.Lease(t.Context(), client.LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: -1}))
	checkError(t, "Lease with MaxTasks -1", err, errorCase{client.ErrInvalidArgument, client.Error{
		Op: "Lease", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "MaxTasks"}})
	_, err = tasksOf(c.Lease(t.Context(), client.LeaseRequest{WorkerID: "w", Queue: "q", Wait: -time.Second}))
	checkError(t, "Lease with a negative Wait", err, errorCase{client.ErrInvalidArgument, client.Error{
		Op: "Lease", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "Wait"}})
	_, err = c.ListTasksPage(t.Context(), client.ListTasksRequest{PageSize: -1})
	checkError(t, "ListTasksPage with PageSize -1", err, errorCase{client.ErrInvalidArgument, client.Error{
		Op: "ListTasks", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "PageSize"}})
	_, err = client.Collect(c.ListTasks(t.Context(), client.ListTasksRequest{PageSize: -1}))
	checkError(t, "ListTasks with PageSize -1", err, errorCase{client.ErrInvalidArgument, client.Error{
		Op: "ListTasks", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "PageSize"}})
	_, err = c.GetWorkflow(t.Context(), client.GetWorkflowRequest{WorkflowID: "wf", PageSize: -1})
	checkError(t, "GetWorkflow with PageSize -1", err, errorCase{client.ErrInvalidArgument, client.Error{
		Op: "GetWorkflow", Code: connect.CodeInvalidArgument, Reason: client.ReasonInvalidArgument, Field: "PageSize"}})
}

// tasksOf is the tasks of a Lease's answer, with its error.
func tasksOf(r client.LeaseResult, err error) ([]client.LeasedTask, error) { return r.Tasks, err }
