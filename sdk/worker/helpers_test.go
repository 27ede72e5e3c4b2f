//go:build go1.25

package worker_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/internal/inproc"
	"github.com/tenurehq/tenure/sdk/worker"
)

// The worker's tests that need no tenure server: the timing of heartbeats
// and of the attempt, on the clock of a testing/synctest bubble, against
// fake servers served in memory (package inproc); options; errors. Its
// tests against a real server are in the server's module
// (internal/sdktests/worker), which can run one.

// inMemory returns a client of h, served in memory, that does not retry.
func inMemory(t *testing.T, h http.Handler) *client.Client {
	t.Helper()
	c, err := client.New("http://tenure.test", client.Options{HTTPClient: inproc.Client(h), MaxRetries: -1})
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return c
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startWorker runs a Worker of queue, h handling every kind, until the
// test ends.
func startWorker(t *testing.T, c *client.Client, queue string, h worker.Handler, opts worker.Options) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	opts.Queues = []string{queue}
	w, err := worker.New(c, opts)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	worker.HandleOther(w, h, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	wait := sync.OnceValue(func() error { return <-errc })
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// recv receives from ch, failing the test after an hour on the bubble's
// clock (which passes at once when nothing else can happen).
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Hour):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}
