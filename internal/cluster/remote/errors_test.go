package remote_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/cluster/remote"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
)

// sentinels are the coordinator errors a remote error may match.
var sentinels = []error{
	coordinator.ErrNotFound, coordinator.ErrLeaseLost, coordinator.ErrAlreadyCommitted, coordinator.ErrWrongState,
	coordinator.ErrInvalidArgument, coordinator.ErrTooLarge, coordinator.ErrUnavailable, context.Canceled, context.DeadlineExceeded,
}

// checkErr checks that err (through the remote Backend) matches kind and
// no other sentinel, has the node's message (direct) if direct is not nil,
// and has the Connect code server would answer for kind.
func checkErr(t *testing.T, what string, err, direct, kind error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, kind)
		return
	}
	for _, s := range sentinels {
		if errors.Is(err, s) != (s == kind) {
			t.Errorf("%s: %q: errors.Is(err, %q) = %v", what, err, s, errors.Is(err, s))
		}
	}
	if direct != nil && err.Error() != direct.Error() {
		t.Errorf("%s: message %q, the node's is %q", what, err, direct)
	}
	var re *remote.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Errorf("%s: %v (%T), want a *remote.Error with code %v", what, err, err, code)
	}
}

// TestErrors: each error the far node answers comes back as the
// coordinator error its code stands for, with the node's message.
func TestErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b, n := e.b, e.n
	ctx := testCtx(t)

	t.Run("unknown task", func(t *testing.T) {
		_, err := b.Get(ctx, "no-such-task")
		_, direct := n.Get(ctx, "no-such-task")
		checkErr(t, "Get", err, direct, coordinator.ErrNotFound, connect.CodeNotFound)
		if !strings.Contains(err.Error(), "no-such-task") {
			t.Errorf("Get: %q does not name the task", err)
		}
		_, err = b.History(ctx, "no-such-task")
		checkErr(t, "History", err, direct, coordinator.ErrNotFound, connect.CodeNotFound)
		err = b.Kill(ctx, "no-such-task", "")
		_ = n.Kill(ctx, "no-such-task", "")
		checkErr(t, "Kill", err, direct, coordinator.ErrNotFound, connect.CodeNotFound)
	})

	t.Run("invalid argument", func(t *testing.T) {
		_, err := b.Submit(ctx, coordinator.SubmitRequest{Payload: []byte("x")})
		_, direct := n.Submit(ctx, coordinator.SubmitRequest{Payload: []byte("x")})
		checkErr(t, "Submit", err, direct, coordinator.ErrInvalidArgument, connect.CodeInvalidArgument)
		var fe *coordinator.FieldError
		if !errors.As(err, &fe) || fe.Field != "queue" || !strings.Contains(err.Error(), "queue") {
			t.Errorf("Submit: %q does not name the field queue (FieldError %+v)", err, fe)
		}
		reqs := []coordinator.SubmitRequest{{Queue: "q"}, {Queue: "q", ExecutionWindow: time.Nanosecond}}
		_, err = b.SubmitBatch(ctx, reqs)
		_, direct = n.SubmitBatch(ctx, reqs)
		checkErr(t, "SubmitBatch", err, direct, coordinator.ErrInvalidArgument, connect.CodeInvalidArgument)
		if !errors.As(err, &fe) || fe.Field != "requests[1].execution_window" {
			t.Errorf("SubmitBatch: %q does not name requests[1].execution_window (FieldError %+v)", err, fe)
		}
		_, _, err = b.List(ctx, coordinator.ListFilter{Limit: 5000})
		_, _, direct = n.List(ctx, coordinator.ListFilter{Limit: 5000})
		checkErr(t, "List", err, direct, coordinator.ErrInvalidArgument, connect.CodeInvalidArgument)
		if !errors.As(err, &fe) || fe.Field != "page_size" {
			t.Errorf("List: %q does not name page_size", err)
		}
		_, err = b.Lease(ctx, coordinator.LeaseRequest{Queue: "q"})
		_, direct = n.Lease(ctx, coordinator.LeaseRequest{Queue: "q"})
		checkErr(t, "Lease", err, direct, coordinator.ErrInvalidArgument, connect.CodeInvalidArgument)
		// Refused before the call: the API has no negative count.
		if _, err := b.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "q", MaxTasks: -1}); !errors.As(err, &fe) || fe.Field != "max_tasks" {
			t.Errorf("Lease MaxTasks -1: %v, want a FieldError naming max_tasks", err)
		}
	})

	t.Run("too large", func(t *testing.T) {
		big := coordinator.SubmitRequest{Queue: "q", Payload: make([]byte, coordinator.DefaultLimits.MaxPayloadBytes+1)}
		_, err := b.Submit(ctx, big)
		_, direct := n.Submit(ctx, big)
		checkErr(t, "Submit", err, direct, coordinator.ErrTooLarge, connect.CodeResourceExhausted)
		var le *coordinator.LimitError
		if !errors.As(err, &le) || le.Field != "payload" || le.Size != len(big.Payload) || le.Limit != coordinator.DefaultLimits.MaxPayloadBytes {
			t.Errorf("Submit: %q, LimitError %+v", err, le)
		}
	})

	t.Run("lease lost and wrong state", func(t *testing.T) {
		id := must[coordinator.SubmitResult](t, "Submit")(b.Submit(ctx, coordinator.SubmitRequest{Queue: "stale", ExecutionWindow: time.Hour})).Task.ID
		ls := must[[]coordinator.Lease](t, "Lease")(b.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "stale"}))
		_, err := b.Heartbeat(ctx, id, "made-up-lease")
		_, direct := n.Heartbeat(ctx, id, "made-up-lease")
		checkErr(t, "Heartbeat", err, direct, coordinator.ErrLeaseLost, connect.CodeFailedPrecondition)
		err = b.Complete(ctx, id, "made-up-lease", nil)
		direct = n.Complete(ctx, id, "made-up-lease", nil)
		checkErr(t, "Complete", err, direct, coordinator.ErrLeaseLost, connect.CodeFailedPrecondition)
		_, err = b.Fail(ctx, id, "made-up-lease", "x", false)
		_, direct = n.Fail(ctx, id, "made-up-lease", "x", false)
		checkErr(t, "Fail", err, direct, coordinator.ErrLeaseLost, connect.CodeFailedPrecondition)

		if err := b.Complete(ctx, id, ls[0].LeaseID, []byte("done")); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		err = b.Kill(ctx, id, "too late")
		direct = n.Kill(ctx, id, "too late")
		checkErr(t, "Kill a completed task", err, direct, coordinator.ErrWrongState, connect.CodeFailedPrecondition)
	})

	t.Run("already committed", func(t *testing.T) {
		quick := state.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Multiplier: 1}
		id := must[coordinator.SubmitResult](t, "Submit")(b.Submit(ctx, coordinator.SubmitRequest{Queue: "race", ExecutionWindow: time.Second, Retry: quick})).Task.ID
		first := must[[]coordinator.Lease](t, "Lease")(b.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w1", Queue: "race"}))
		var second []coordinator.Lease
		for len(second) == 0 { // until the first lease expired and the retry is due
			second = must[[]coordinator.Lease](t, "Lease again")(b.Lease(ctx, coordinator.LeaseRequest{WorkerID: "w2", Queue: "race", Wait: 5 * time.Second}))
		}
		must[coordinator.FencingToken](t, "Commit the second")(b.Commit(ctx, id, second[0].LeaseID, []byte("second")))
		_, err := b.Commit(ctx, id, first[0].LeaseID, []byte("first"))
		_, direct := n.Commit(ctx, id, first[0].LeaseID, []byte("first"))
		checkErr(t, "Commit by the first lease", err, direct, coordinator.ErrAlreadyCommitted, connect.CodeAlreadyExists)
	})

	t.Run("canceled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := b.Get(cctx, "t")
		checkErr(t, "Get", err, nil, context.Canceled, connect.CodeCanceled)

		dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		_, err = b.Get(dctx, "t")
		checkErr(t, "Get", err, nil, context.DeadlineExceeded, connect.CodeDeadlineExceeded)

		// A long-poll ended by its caller.
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := b.Lease(lctx, coordinator.LeaseRequest{WorkerID: "w", Queue: "empty", Wait: 25 * time.Second})
			done <- err
		}()
		cancel()
		checkErr(t, "Lease", <-done, nil, context.Canceled, connect.CodeCanceled)
	})
}

// TestUnreachable: a node that cannot be reached, or a server that is not
// a tenure node, is unavailable, with the node's address in the message;
// a server over the Backend answers unavailable.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	overloaded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	t.Cleanup(overloaded.Close)

	for _, url := range []string{closed.URL, overloaded.URL} {
		b := remote.New(url, nil, from)
		if b.Err() != nil {
			t.Errorf("Err() = %v", b.Err())
		}
		_, err := b.Get(ctx, "t")
		checkErr(t, "Get from "+url, err, nil, coordinator.ErrUnavailable, connect.CodeUnavailable)
		if err != nil && (!strings.Contains(err.Error(), url) || strings.Count(err.Error(), "unavailable") != 1) {
			t.Errorf("Get from %s: %q does not name the node (once unavailable)", url, err)
		}
		err = b.Complete(ctx, "t", "l", nil)
		checkErr(t, "Complete on "+url, err, nil, coordinator.ErrUnavailable, connect.CodeUnavailable)

		proxy := httptest.NewServer(server.New(b, server.Options{}).Handler())
		_, err = tenurev1connect.NewTaskServiceClient(proxy.Client(), proxy.URL).GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: "t"}))
		proxy.Close()
		if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), url) {
			t.Errorf("GetTask through a server over the Backend: %v, want unavailable naming %s", err, url)
		}
	}
}
