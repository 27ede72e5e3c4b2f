package server_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
)

// forwardSpy is a Router that refuses every task as not found, after
// noting what route.Forwarded says about the call's context. Every other
// method is the nil interface's: calling one panics.
type forwardSpy struct {
	route.Router
	seen chan forwardedSeen
}

type forwardedSeen struct {
	from string
	ok   bool
}

func (r forwardSpy) Task(ctx context.Context, taskID string) (route.Partition, error) {
	from, ok := route.Forwarded(ctx)
	r.seen <- forwardedSeen{from, ok}
	return nil, coordinator.ErrNotFound
}

// TestForwardedHeader: the Tenure-Forwarded header of a request reaches the
// router's context, and a request without it is not marked forwarded.
func TestForwardedHeader(t *testing.T) {
	t.Parallel()
	spy := forwardSpy{seen: make(chan forwardedSeen, 1)}
	ts := httptest.NewServer(server.New(spy, server.Options{}).Handler())
	t.Cleanup(ts.Close)
	tasks := tenurev1connect.NewTaskServiceClient(ts.Client(), ts.URL)

	for _, tc := range []struct {
		name   string
		header []string
		want   forwardedSeen
	}{
		{"not forwarded", nil, forwardedSeen{}},
		{"forwarded", []string{"node-7"}, forwardedSeen{"node-7", true}},
		{"forwarded without a node id", []string{""}, forwardedSeen{"", true}},
	} {
		req := connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: "t1"})
		for _, v := range tc.header {
			req.Header().Add(route.ForwardedHeader, v)
		}
		_, err := tasks.GetTask(apiCtx(t), req)
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("%s: GetTask: %v, want not_found from the router", tc.name, err)
		}
		if got := <-spy.seen; got != tc.want {
			t.Errorf("%s: router saw Forwarded = (%q, %v), want (%q, %v)", tc.name, got.from, got.ok, tc.want.from, tc.want.ok)
		}
	}
	if _, ok := route.Forwarded(context.Background()); ok {
		t.Error("Forwarded(context.Background()) = true")
	}
}
