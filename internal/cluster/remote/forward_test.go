package remote_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/cluster/remote"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/state"
)

// forwardSpy is a node's Backend that notes, for each Get, what
// server.Forwarded says about the call's context.
type forwardSpy struct {
	server.Backend
	seen chan [2]any
}

func (s forwardSpy) Get(ctx context.Context, taskID string) (*state.Task, error) {
	from, ok := server.Forwarded(ctx)
	s.seen <- [2]any{from, ok}
	return s.Backend.Get(ctx, taskID)
}

// TestForwardedOnTheFarSide: the far node's Backend sees a call through
// the remote Backend as forwarded by this node, and a client's own call
// as not forwarded.
func TestForwardedOnTheFarSide(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	_, n := apitest.StartNode(t, nil)
	spy := forwardSpy{Backend: n, seen: make(chan [2]any, 1)}
	far := httptest.NewServer(server.New(spy, server.Options{}).Handler())
	t.Cleanup(far.Close)

	b := remote.New(far.URL, far.Client(), from)
	res := must[coordinator.SubmitResult](t, "Submit")(b.Submit(ctx, coordinator.SubmitRequest{Queue: "q"}))
	must[*state.Task](t, "Get")(b.Get(ctx, res.Task.ID))
	if got := <-spy.seen; got != [2]any{from, true} {
		t.Errorf("through the remote Backend, the far side saw Forwarded = %v, want (%q, true)", got, from)
	}

	tasks := tenurev1connect.NewTaskServiceClient(far.Client(), far.URL)
	if _, err := tasks.GetTask(ctx, connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: res.Task.ID})); err != nil {
		t.Fatalf("GetTask: %v", err)
	}
	if got := <-spy.seen; got != [2]any{"", false} {
		t.Errorf("a client's own call: the far side saw Forwarded = %v, want (\"\", false)", got)
	}
}
