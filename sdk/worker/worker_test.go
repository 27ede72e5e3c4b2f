//go:build go1.25

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

func TestRunTwice(t *testing.T) {
	c := inMemory(t, http.NotFoundHandler())
	w, err := worker.New(c, worker.Options{Queues: []string{"q"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	worker.HandleOther(w, func(context.Context, *worker.Task[[]byte]) ([]byte, error) { return nil, nil }, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatalf("Run with a done ctx: %v", err)
	}
	if err := w.Run(ctx); err == nil {
		t.Fatalf("second Run: no error")
	}
}

func TestNewValidates(t *testing.T) {
	c := inMemory(t, http.NotFoundHandler())
	q := []string{"q"}
	for _, tc := range []struct {
		c    *client.Client
		opts worker.Options
		want string
	}{
		{nil, worker.Options{Queues: q}, "client"},
		{c, worker.Options{}, "Options.Queues is empty"},
		{c, worker.Options{Queues: []string{""}}, "Options.Queues[0] is empty"},
		{c, worker.Options{Queues: []string{"a", strings.Repeat("q", 257)}}, "Options.Queues[1]"},
		{c, worker.Options{Queues: []string{"a", "b", "a"}}, `Options.Queues names "a" twice`},
		{c, worker.Options{Queues: make([]string, 33)}, "the limit is 32"},
		{c, worker.Options{Queues: q, Concurrency: -1}, "Options.Concurrency"},
		{c, worker.Options{Queues: q, Concurrency: 10001}, "Options.Concurrency"},
		{c, worker.Options{Queues: q, HeartbeatEvery: 1}, "Options.HeartbeatEvery"},
		{c, worker.Options{Queues: q, HeartbeatEvery: -0.5}, "Options.HeartbeatEvery"},
		{c, worker.Options{Queues: q, HeartbeatEvery: math.NaN()}, "Options.HeartbeatEvery"},
		{c, worker.Options{Queues: q, PollWait: time.Minute}, "Options.PollWait"},
		{c, worker.Options{Queues: q, PollWait: -1}, "Options.PollWait"},
		{c, worker.Options{Queues: q, ShutdownGrace: -1}, "Options.ShutdownGrace"},
		{c, worker.Options{Queues: q, MaxCompleteBatch: -1}, "Options.MaxCompleteBatch"},
		{c, worker.Options{Queues: q, MaxCompleteBatch: 1001}, "Options.MaxCompleteBatch"},
		{c, worker.Options{Queues: q, WorkerID: strings.Repeat("w", 257)}, "Options.WorkerID"},
		{c, worker.Options{Queues: q, Namespace: strings.Repeat("n", 257)}, "Options.Namespace"},
		{c, worker.Options{Queues: q, Middleware: []worker.Middleware{nil}}, "Options.Middleware[0] is nil"},
	} {
		if _, err := worker.New(tc.c, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v, %+v) = %v; want an error naming %s", tc.c != nil, tc.opts, err, tc.want)
		}
	}
	if _, err := worker.New(c, worker.Options{Queues: slices.Repeat([]string{"q"}, 1), Concurrency: 10000, HeartbeatEvery: 0.5, PollWait: 30 * time.Second, MaxCompleteBatch: 1000}); err != nil {
		t.Errorf("New with limits at their maximum: %v", err)
	}
}

type sendEmail struct {
	To string `json:"to"`
}

func (sendEmail) Kind() string { return "send_email" }

type badKind struct{}

func (badKind) Kind() string { return "no spaces" }

// TestRegistration: a worker without a handler refuses to run; a kind
// registered twice, an invalid kind, a nil handler, or a handler
// registered after Run panics at once, naming the mistake.
func TestRegistration(t *testing.T) {
	c := inMemory(t, http.NotFoundHandler())
	newWorker := func() *worker.Worker {
		w, err := worker.New(c, worker.Options{Queues: []string{"q"}, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if err := newWorker().Run(t.Context()); err == nil || !strings.Contains(err.Error(), "no handler is registered") {
		t.Errorf("Run without a handler: %v; want it refused", err)
	}
	fn := func(context.Context, *worker.Task[sendEmail]) error { return nil }
	raw := func(context.Context, *worker.Task[[]byte]) ([]byte, error) { return nil, nil }
	panics := func(what, want string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) {
				t.Errorf("%s: panicked with %v; want a panic saying %q", what, r, want)
			}
		}()
		f()
	}
	w := newWorker()
	worker.Handle(w, fn)
	panics("the same kind twice", `kind "send_email" has a handler already`, func() { worker.Handle(w, fn) })
	panics("a raw handler for a typed kind", `kind "send_email" has a handler already`, func() { worker.HandleRaw(w, "send_email", raw, nil) })
	panics("an invalid kind", `"no spaces" holds ' '`, func() { worker.Handle(w, func(context.Context, *worker.Task[badKind]) error { return nil }) })
	panics("an invalid raw kind", "1 to 128 bytes", func() { worker.HandleRaw(w, strings.Repeat("k", 129), raw, nil) })
	panics("a nil handler", "the handler is nil", func() { worker.Handle[sendEmail](w, nil) })
	panics("HandleEffects without apply", "compute and apply must both be set", func() {
		worker.HandleEffects(w, func(context.Context, *worker.Task[sendEmail]) (string, error) { return "", nil }, nil)
	})
	worker.HandleOther(w, raw, nil)
	panics("HandleOther twice", "registered twice", func() { worker.HandleOther(w, raw, nil) })

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	panics("a handler after Run", "after Run", func() { worker.HandleRaw(w, "late", raw, nil) })
}

type codeErr struct{ code int }

func (e *codeErr) Error() string { return fmt.Sprintf("code %d", e.code) }

func TestPermanentWraps(t *testing.T) {
	if worker.Permanent(nil) != nil {
		t.Errorf("Permanent(nil) is not nil")
	}
	base := &codeErr{code: 7}
	err := fmt.Errorf("context: %w", worker.Permanent(base))
	var ce *codeErr
	if !errors.Is(err, base) || !errors.As(err, &ce) || ce.code != 7 {
		t.Errorf("errors.Is/As do not see through Permanent: %v", err)
	}
	if err.Error() != "context: code 7" {
		t.Errorf("message %q, want the wrapped message unchanged", err.Error())
	}
	if !errors.Is(worker.Permanent(fs.ErrNotExist), fs.ErrNotExist) {
		t.Errorf("errors.Is(Permanent(fs.ErrNotExist), fs.ErrNotExist) is false")
	}
}
