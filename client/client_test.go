package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/apitest"
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

// TestRoundTrip calls every method against a real server, once per
// protocol, and checks what comes back.
func TestRoundTrip(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c := newClient(t, startServer(t, nil), client.Options{Protocol: proto})
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
			if res.Duplicate || one.GetTaskId() == "" || one.GetState() != tenurev1.TaskState_TASK_STATE_WAITING ||
				!bytes.Equal(one.GetPayload(), []byte("one")) || one.GetPriority() != 5 || one.GetRequestId() != "req-1" ||
				one.GetExecutionWindow().AsDuration() != 2*time.Second || one.GetRetryPolicy().GetMaxAttempts() != 2 ||
				one.GetRetryPolicy().GetBackoffMultiplier() != 3 || one.GetNamespace() != "default" {
				t.Fatalf("Submit answered %+v (duplicate %v)", one, res.Duplicate)
			}
			dup, err := c.Submit(ctx, client.SubmitRequest{Queue: q, Payload: []byte("other"), RequestID: "req-1"})
			if err != nil || !dup.Duplicate || dup.Task.GetTaskId() != one.GetTaskId() {
				t.Fatalf("resubmit with the same request id: %+v, %v; want the first task as a duplicate", dup, err)
			}
			anon, err := c.Submit(ctx, client.SubmitRequest{Queue: q, NotBefore: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatalf("Submit without request id: %v", err)
			}
			if anon.Task.GetRequestId() == "" || anon.Task.GetNotBefore() == nil {
				t.Fatalf("Submit without request id: got request id %q, not_before %v; want a generated id and the delay", anon.Task.GetRequestId(), anon.Task.GetNotBefore())
			}

			// SubmitBatch.
			batch, err := c.SubmitBatch(ctx, []client.SubmitRequest{
				{Queue: q, Payload: []byte("b0"), Retry: &client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond}},
				{Queue: q, Payload: []byte("b1"), RequestID: "req-1"},
			})
			if err != nil {
				t.Fatalf("SubmitBatch: %v", err)
			}
			if len(batch) != 2 || batch[0].Duplicate || !batch[1].Duplicate || batch[1].Task.GetTaskId() != one.GetTaskId() ||
				string(batch[0].Task.GetPayload()) != "b0" || batch[0].Task.GetRequestId() == "" {
				t.Fatalf("SubmitBatch answered %+v", batch)
			}

			// GetTask and ListTasks (paged).
			got, err := c.GetTask(ctx, one.GetTaskId())
			if err != nil || got.GetTaskId() != one.GetTaskId() {
				t.Fatalf("GetTask: %v, %v", got, err)
			}
			var listed []string
			token := ""
			for {
				page, next, err := c.ListTasks(ctx, client.ListOptions{Queue: q, PageSize: 1, PageToken: token})
				if err != nil {
					t.Fatalf("ListTasks: %v", err)
				}
				for _, tk := range page {
					listed = append(listed, tk.GetTaskId())
				}
				if next == "" {
					break
				}
				token = next
			}
			if want := []string{one.GetTaskId(), anon.Task.GetTaskId(), batch[0].Task.GetTaskId()}; strings.Join(listed, ",") != strings.Join(want, ",") {
				t.Fatalf("ListTasks listed %v, want %v", listed, want)
			}
			waiting, _, err := c.ListTasks(ctx, client.ListOptions{Namespace: "default", Queue: q, State: tenurev1.TaskState_TASK_STATE_WAITING})
			if err != nil || len(waiting) != 3 {
				t.Fatalf("ListTasks WAITING: %d tasks, %v; want 3", len(waiting), err)
			}

			// Worker protocol: lease the highest priority task, start,
			// heartbeat, commit, complete.
			leased, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w1", Queue: q, MaxTasks: 1, Wait: time.Second})
			if err != nil || len(leased) != 1 || leased[0].GetTaskId() != one.GetTaskId() || leased[0].GetAttempt() != 1 || leased[0].GetCommitted() {
				t.Fatalf("Lease: %v, %v; want task %s attempt 1", leased, err, one.GetTaskId())
			}
			l := leased[0]
			if err := c.Start(ctx, l.GetTaskId(), l.GetLeaseId()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			exp, err := c.Heartbeat(ctx, l.GetTaskId(), l.GetLeaseId())
			if err != nil || exp.Before(l.GetLeaseExpiry().AsTime()) {
				t.Fatalf("Heartbeat: %v, %v; want an expiry not before %v", exp, err, l.GetLeaseExpiry().AsTime())
			}
			tok, err := c.Commit(ctx, l.GetTaskId(), l.GetLeaseId(), []byte("result"))
			if err != nil || tok.GetTaskId() != one.GetTaskId() || tok.GetAttempt() != 1 {
				t.Fatalf("Commit: %v, %v", tok, err)
			}
			if err := c.Complete(ctx, l.GetTaskId(), l.GetLeaseId(), nil); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			got, err = c.GetTask(ctx, one.GetTaskId())
			if err != nil || got.GetState() != tenurev1.TaskState_TASK_STATE_COMPLETED || string(got.GetResult()) != "result" {
				t.Fatalf("after Complete: %v, %v", got, err)
			}
			hist, err := c.TaskHistory(ctx, one.GetTaskId())
			if err != nil {
				t.Fatalf("TaskHistory: %v", err)
			}
			var types []string
			for _, e := range hist {
				types = append(types, e.GetType())
			}
			// A heartbeat in the grant's clock tick writes no LeaseExtended,
			// so only the records that must be there are checked, in order.
			want := []string{"TaskCreated", "LeaseGranted", "ExecutionStarted", "TaskCommitted", "TaskCompleted"}
			rest := types
			for _, w := range want {
				for len(rest) > 0 && rest[0] != w {
					rest = rest[1:]
				}
				if len(rest) == 0 {
					t.Fatalf("TaskHistory types %v; want %v in this order", types, want)
				}
			}

			// Fail: retried, then permanent.
			leased, err = c.Lease(ctx, client.LeaseRequest{WorkerID: "w1", Queue: q, MaxTasks: 5})
			if err != nil || len(leased) != 1 || leased[0].GetTaskId() != batch[0].Task.GetTaskId() {
				t.Fatalf("Lease b0: %v, %v", leased, err)
			}
			fr, err := c.Fail(ctx, leased[0].GetTaskId(), leased[0].GetLeaseId(), "boom", false)
			if err != nil || fr.GetState() != tenurev1.TaskState_TASK_STATE_WAITING || fr.GetRetryAt() == nil {
				t.Fatalf("Fail: %v, %v; want WAITING with a retry time", fr, err)
			}
			leased, err = c.Lease(ctx, client.LeaseRequest{WorkerID: "w1", Queue: q, Wait: 5 * time.Second})
			if err != nil || len(leased) != 1 || leased[0].GetAttempt() != 2 {
				t.Fatalf("Lease b0 again: %v, %v", leased, err)
			}
			fr, err = c.Fail(ctx, leased[0].GetTaskId(), leased[0].GetLeaseId(), "broken", true)
			if err != nil || fr.GetState() != tenurev1.TaskState_TASK_STATE_FAILED {
				t.Fatalf("Fail permanent: %v, %v; want FAILED", fr, err)
			}

			// KillTask.
			if err := c.KillTask(ctx, anon.Task.GetTaskId(), "not needed"); err != nil {
				t.Fatalf("KillTask: %v", err)
			}
			got, err = c.GetTask(ctx, anon.Task.GetTaskId())
			if err != nil || got.GetState() != tenurev1.TaskState_TASK_STATE_DEAD || got.GetFailureReason() != "not needed" {
				t.Fatalf("after KillTask: %v, %v", got, err)
			}
		})
	}
}

// TestErrorPredicates provokes each error kind on every protocol and checks
// that exactly the matching predicate holds.
func TestErrorPredicates(t *testing.T) {
	type preds struct{ leaseLost, committed, notFound, unavailable bool }
	check := func(t *testing.T, what string, err error, want preds) {
		t.Helper()
		got := preds{client.IsLeaseLost(err), client.IsAlreadyCommitted(err), client.IsNotFound(err), client.IsUnavailable(err)}
		if err == nil || got != want {
			t.Errorf("%s: err %v gives predicates %+v, want %+v", what, err, got, want)
		}
	}
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c := newClient(t, startServer(t, nil), client.Options{Protocol: proto})
			const q = "errs"

			_, err := c.GetTask(ctx, "no-such-task")
			check(t, "GetTask unknown", err, preds{notFound: true})

			// One task, committed by lease A, whose lease then expires: the
			// next lease is a finalisation lease.
			if _, err := c.Submit(ctx, client.SubmitRequest{Queue: q, ExecutionWindow: 100 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			a, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "a", Queue: q, Wait: time.Second})
			if err != nil || len(a) != 1 {
				t.Fatalf("lease A: %v, %v", a, err)
			}
			if _, err := c.Commit(ctx, a[0].GetTaskId(), a[0].GetLeaseId(), []byte("r")); err != nil {
				t.Fatalf("commit A: %v", err)
			}
			b, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "b", Queue: q, Wait: 10 * time.Second})
			if err != nil || len(b) != 1 || !b[0].GetCommitted() || string(b[0].GetCommittedResult()) != "r" {
				t.Fatalf("lease B: %v, %v; want a finalisation lease with the committed result", b, err)
			}
			_, err = c.Commit(ctx, b[0].GetTaskId(), b[0].GetLeaseId(), []byte("other"))
			check(t, "Commit on a finalisation lease", err, preds{committed: true})
			_, err = c.Heartbeat(ctx, a[0].GetTaskId(), a[0].GetLeaseId())
			check(t, "Heartbeat of the expired lease A", err, preds{leaseLost: true})
			if err := c.Complete(ctx, b[0].GetTaskId(), b[0].GetLeaseId(), nil); err != nil {
				t.Fatalf("Complete B: %v", err)
			}
			err = c.KillTask(ctx, b[0].GetTaskId(), "too late")
			check(t, "KillTask of a completed task", err, preds{leaseLost: true})
		})
	}
	t.Run("unavailable", func(t *testing.T) {
		t.Parallel()
		url := startServer(t, func(http.Handler) http.Handler { return failing(connect.CodeUnavailable, nil) })
		c := newClient(t, url, client.Options{MaxRetries: -1})
		_, err := c.GetTask(t.Context(), "x")
		check(t, "GetTask on an unavailable server", err, preds{unavailable: true})
	})
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

func TestRetryGivesUp(t *testing.T) {
	var count atomic.Int32
	url := startServer(t, func(http.Handler) http.Handler { return failing(connect.CodeUnavailable, &count) })
	c := newClient(t, url, client.Options{MaxRetries: 2, RetryBackoff: time.Millisecond})
	_, err := c.Lease(t.Context(), client.LeaseRequest{WorkerID: "w", Queue: "q"})
	if !client.IsUnavailable(err) {
		t.Fatalf("Lease: %v; want unavailable", err)
	}
	if got := count.Load(); got != 3 {
		t.Errorf("server saw %d requests, want 3 (1 + 2 retries)", got)
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
	batch, err := c.SubmitBatch(ctx, []client.SubmitRequest{{Queue: "q"}, {Queue: "q"}})
	if err != nil || len(batch) != 2 || batch[0].Duplicate || batch[1].Duplicate {
		t.Fatalf("SubmitBatch: %+v, %v; want two new tasks", batch, err)
	}
	tasks, _, err := c.ListTasks(ctx, client.ListOptions{Queue: "q"})
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
				c := newClient(t, url, client.Options{Protocol: proto, RetryBackoff: time.Millisecond})
				err := c.Complete(t.Context(), "t", "l", nil)
				if got := connect.CodeOf(err); got != code {
					t.Errorf("Complete answered %v (code %v), want code %v", err, got, code)
				}
				if got := count.Load(); got != 1 {
					t.Errorf("server saw %d requests, want 1 (no retry)", got)
				}
			})
		}
	}
}

// TestRetryStopsWithContext: the backoff ends when ctx does.
func TestRetryStopsWithContext(t *testing.T) {
	url := startServer(t, func(http.Handler) http.Handler { return failing(connect.CodeUnavailable, nil) })
	// Cancel once the client has read the first answer, so the call is in
	// (or about to enter) its backoff.
	answered := make(chan struct{})
	hc := &http.Client{Transport: &signalOnClose{next: http.DefaultTransport, closed: answered}}
	// A backoff far longer than any test: only ctx can end the wait.
	c := newClient(t, url, client.Options{HTTPClient: hc, RetryBackoff: 5 * time.Second, MaxRetries: 100})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-answered
		cancel()
	}()
	_, err := c.GetTask(ctx, "x")
	if !errors.Is(err, context.Canceled) || !client.IsUnavailable(err) {
		t.Fatalf("GetTask: %v; want the unavailable error and context.Canceled", err)
	}
}

// signalOnClose closes closed when the first response body is closed.
type signalOnClose struct {
	next   http.RoundTripper
	closed chan struct{}
	once   sync.Once
}

func (s *signalOnClose) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err == nil {
		resp.Body = &closeHook{ReadCloser: resp.Body, fn: func() { s.once.Do(func() { close(s.closed) }) }}
	}
	return resp, err
}

type closeHook struct {
	io.ReadCloser
	fn func()
}

func (c *closeHook) Close() error {
	err := c.ReadCloser.Close()
	c.fn()
	return err
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opts client.Options
		want string
	}{
		{"127.0.0.1:7070", client.Options{}, "http://"},
		{"ftp://host", client.Options{}, "http://"},
		{"http://", client.Options{}, "no host"},
		{"http://h:1/?a=b", client.Options{}, "query"},
		{"http://h\x00", client.Options{}, "not a URL"},
		{"http://h:1", client.Options{Protocol: "grpc-web"}, "Options.Protocol"},
		{"http://h:1", client.Options{MaxRetries: 1000}, "Options.MaxRetries"},
		{"http://h:1", client.Options{RetryBackoff: -1}, "Options.RetryBackoff"},
		{"http://h:1", client.Options{RetryBackoff: time.Minute}, "Options.RetryBackoff"},
	} {
		_, err := client.New(tc.url, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %+v) = %v; want an error mentioning %q", tc.url, tc.opts, err, tc.want)
		}
	}
	for _, url := range []string{"http://127.0.0.1:7070", "https://tenure.example.com/api/"} {
		for _, p := range append(protocols, "") {
			if _, err := client.New(url, client.Options{Protocol: p}); err != nil {
				t.Errorf("New(%q, %q): %v", url, p, err)
			}
		}
	}
}

func TestLocalValidation(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1", client.Options{})
	if _, err := c.Lease(t.Context(), client.LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: -1}); err == nil || !strings.Contains(err.Error(), "MaxTasks") {
		t.Errorf("Lease with MaxTasks -1: %v; want an error naming MaxTasks", err)
	}
	if _, _, err := c.ListTasks(t.Context(), client.ListOptions{PageSize: -1}); err == nil || !strings.Contains(err.Error(), "PageSize") {
		t.Errorf("ListTasks with PageSize -1: %v; want an error naming PageSize", err)
	}
}
