// Package apitest runs a real tenure node behind the API for tests of the
// packages above it (client, worker, cmd/tenure), so each of them tests
// against the same server the binary runs, set up in one place: the API
// served by server.Server.Serve, the HTTP server `tenure server` runs.
package apitest

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/events"
	"github.com/tenurehq/tenure/internal/node"
	"github.com/tenurehq/tenure/internal/server"
	"github.com/tenurehq/tenure/internal/tlsfiles"
	"github.com/tenurehq/tenure/internal/wal"
	"github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
)

// Start runs a node (file WAL in a temporary directory, fsync off) behind
// the API handler, wrapped by wrap if it is not nil (to inject faults),
// served on a loopback port as `tenure server` serves it (Serve). It
// returns the base URL; everything stops when the test ends.
func Start(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	url, _ := StartNode(t, wrap)
	return url
}

// StartNode is Start that also returns the node behind the API, so that a
// test can compare what the API answers with what the node answers directly
// (or serve the node through a handler of its own).
func StartNode(t testing.TB, wrap func(http.Handler) http.Handler) (url string, n *node.Node) {
	t.Helper()
	return start(t, wrap, nil)
}

// StartClock is Start with the node on clk, for tests whose answers
// depend on time (ages, statistics per minute): with a clock.Fake they are
// exact. Leases then expire, and long-polls end, only as clk advances.
func StartClock(t testing.TB, clk clock.Clock) string {
	t.Helper()
	url, _ := start(t, nil, clk)
	return url
}

// StartBudget is Start with the node under a memory budget of
// limitBytes, whose refusals say to retry after retryAfter
// (coordinator.MemoryBudget).
func StartBudget(t testing.TB, limitBytes int64, retryAfter time.Duration) string {
	t.Helper()
	n := OpenNodeConfig(t, coordinator.Config{Memory: coordinator.NewMemoryBudget(limitBytes, retryAfter)})
	return Serve(t, server.New(n.Router(), server.Options{Snapshots: n, Events: n}))
}

// start runs the node of Start on clk (nil: the real clock).
func start(t testing.TB, wrap func(http.Handler) http.Handler, clk clock.Clock) (url string, n *node.Node) {
	t.Helper()
	n = openNode(t, clk)
	return serve(t, server.New(n.Router(), server.Options{Snapshots: n, Events: n}), server.HTTPConfig{Wrap: wrap}), n
}

// OpenNode opens a node (file WAL in a temporary directory, fsync off)
// that closes when the test ends.
func OpenNode(t testing.TB) *node.Node {
	t.Helper()
	return openNode(t, nil)
}

// openNode is OpenNode on clk (nil: the real clock).
func openNode(t testing.TB, clk clock.Clock) *node.Node {
	t.Helper()
	return OpenNodeConfig(t, coordinator.Config{Clock: clk})
}

// OpenNodeConfig is OpenNode with cfg as its coordinators' config (its
// expiry scan set to 10ms).
func OpenNodeConfig(t testing.TB, cfg coordinator.Config) *node.Node {
	t.Helper()
	// Expire leases promptly, so that a waiting long-poll sees an expired
	// task within milliseconds rather than at the next 1s scan.
	cfg.ExpiryScanInterval = 10 * time.Millisecond
	n, err := node.Open(t.Context(), node.Config{
		DataDir:     t.TempDir(),
		Sync:        wal.SyncNone,
		Coordinator: cfg,
	})
	if err != nil {
		t.Fatalf("open node: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close node: %v", err)
		}
	})
	return n
}

// Serve serves api on a loopback port as `tenure server` serves it
// (server.Server.Serve: its limits, HTTP/1.1 and unencrypted HTTP/2 for
// gRPC) until the test ends, and returns its base URL.
func Serve(t testing.TB, api *server.Server) string {
	t.Helper()
	return serve(t, api, server.HTTPConfig{})
}

// serve is Serve with cfg.
func serve(t testing.TB, api *server.Server, cfg server.HTTPConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := api.Serve(ln, cfg)
	t.Cleanup(h.Close)
	return h.URL()
}

// StartTLS is Start served over TLS as `tenure server --tls-cert` serves:
// with the files of r (client certificates required if r has a client CA,
// the probes open), HTTP/2 and HTTP/1.1 as ALPN chooses. It returns the
// https:// base URL.
func StartTLS(t testing.TB, r *tlsfiles.Reloader) string {
	t.Helper()
	n := openNode(t, nil)
	return serve(t, server.New(n.Router(), server.Options{Snapshots: n, Events: n}), server.HTTPConfig{TLS: r})
}

// LastLSN returns the LSN of the last record of the log of the embedded
// server c calls: where an event stream from now starts.
func LastLSN(t testing.TB, c *client.Client) uint64 {
	t.Helper()
	for ans, err := range c.WatchAnswers(t.Context(), client.EventFilter{}, client.CursorNow) {
		if err != nil {
			t.Fatal(err)
		}
		cur, err := events.ParseCursor(ans.GetCursor())
		if err != nil {
			t.Fatal(err)
		}
		return cur.Of(0)
	}
	t.Fatal("apitest: the event stream ended before its first answer")
	return 0
}

// ErrorDetail returns the ErrorDetail an API error carries (nil for an
// error that carries none, or that is no API error).
func ErrorDetail(err error) *tenurev1.ErrorDetail {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ed, ok := v.(*tenurev1.ErrorDetail); ok {
				return ed
			}
		}
	}
	return nil
}
