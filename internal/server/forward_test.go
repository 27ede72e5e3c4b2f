package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/principal"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
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
	who  string // the principal
}

func (r forwardSpy) Task(ctx context.Context, taskID string) (route.Partition, error) {
	from, ok := route.Forwarded(ctx)
	r.seen <- forwardedSeen{from, ok, principal.From(ctx)}
	return nil, coordinator.ErrNotFound
}

// nodes is a NodeVerifier that accepts the requests of node "node-7" only,
// for the principal it names.
type nodes struct{}

func (nodes) VerifyForwarded(h http.Header, procedure string) (string, string, error) {
	if h.Get(route.ForwardedHeader) != "node-7" {
		return "", "", errors.New("not a node of this cluster")
	}
	return "node-7", h.Get("Tenure-Forwarded-Principal"), nil
}

// TestForwardedHeader: a request with the Tenure-Forwarded header reaches
// the router marked forwarded, with the principal its node names, only when
// Options.Nodes verifies it; otherwise, and always on a server that is not
// a cluster node, it is refused as unauthenticated before the router sees
// it. A request without the header is not marked.
func TestForwardedHeader(t *testing.T) {
	t.Parallel()
	spy := forwardSpy{seen: make(chan forwardedSeen, 1)}
	node := httptest.NewServer(server.New(spy, server.Options{Nodes: nodes{}}).Handler())
	t.Cleanup(node.Close)
	alone := httptest.NewServer(server.New(spy, server.Options{}).Handler())
	t.Cleanup(alone.Close)

	for _, tc := range []struct {
		name   string
		url    string
		header []string
		code   connect.Code
		want   forwardedSeen
	}{
		{"not forwarded", node.URL, nil, connect.CodeNotFound, forwardedSeen{}},
		{"forwarded by a node", node.URL, []string{"node-7"}, connect.CodeNotFound, forwardedSeen{"node-7", true, "ops"}},
		{"forwarded by an impostor", node.URL, []string{"node-8"}, connect.CodeUnauthenticated, forwardedSeen{}},
		{"forwarded without a node id", node.URL, []string{""}, connect.CodeUnauthenticated, forwardedSeen{}},
		{"forwarded to a server that is no node", alone.URL, []string{"node-7"}, connect.CodeUnauthenticated, forwardedSeen{}},
	} {
		tasks := tenurev1connect.NewTaskServiceClient(http.DefaultClient, tc.url)
		req := connect.NewRequest(&tenurev1.GetTaskRequest{TaskId: "t1"})
		for _, v := range tc.header {
			req.Header().Add(route.ForwardedHeader, v)
			req.Header().Set("Tenure-Forwarded-Principal", "ops")
		}
		_, err := tasks.GetTask(apiCtx(t), req)
		if connect.CodeOf(err) != tc.code {
			t.Fatalf("%s: GetTask: %v, want %v", tc.name, err, tc.code)
		}
		if tc.code != connect.CodeNotFound {
			continue // refused before the router
		}
		if got := <-spy.seen; got != tc.want {
			t.Errorf("%s: router saw %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if _, ok := route.Forwarded(context.Background()); ok {
		t.Error("Forwarded(context.Background()) = true")
	}
}
