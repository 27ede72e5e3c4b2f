//go:build go1.25

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

func TestRunTwice(t *testing.T) {
	c := inMemory(t, http.NotFoundHandler())
	w, err := worker.New(c, "q", func(context.Context, *worker.Task) ([]byte, error) { return nil, nil }, worker.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
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
	h := func(context.Context, *worker.Task) ([]byte, error) { return nil, nil }
	for _, tc := range []struct {
		c     *client.Client
		queue string
		h     worker.Handler
		opts  worker.Options
		want  string
	}{
		{nil, "q", h, worker.Options{}, "client"},
		{c, "", h, worker.Options{}, "queue"},
		{c, strings.Repeat("q", 257), h, worker.Options{}, "queue"},
		{c, "q", nil, worker.Options{}, "handler"},
		{c, "q", h, worker.Options{Concurrency: -1}, "Options.Concurrency"},
		{c, "q", h, worker.Options{Concurrency: 10001}, "Options.Concurrency"},
		{c, "q", h, worker.Options{HeartbeatEvery: 1}, "Options.HeartbeatEvery"},
		{c, "q", h, worker.Options{HeartbeatEvery: -0.5}, "Options.HeartbeatEvery"},
		{c, "q", h, worker.Options{HeartbeatEvery: math.NaN()}, "Options.HeartbeatEvery"},
		{c, "q", h, worker.Options{PollWait: time.Minute}, "Options.PollWait"},
		{c, "q", h, worker.Options{PollWait: -1}, "Options.PollWait"},
		{c, "q", h, worker.Options{ShutdownGrace: -1}, "Options.ShutdownGrace"},
		{c, "q", h, worker.Options{MaxCompleteBatch: -1}, "Options.MaxCompleteBatch"},
		{c, "q", h, worker.Options{MaxCompleteBatch: 1001}, "Options.MaxCompleteBatch"},
		{c, "q", h, worker.Options{WorkerID: strings.Repeat("w", 257)}, "Options.WorkerID"},
		{c, "q", h, worker.Options{Namespace: strings.Repeat("n", 257)}, "Options.Namespace"},
	} {
		if _, err := worker.New(tc.c, tc.queue, tc.h, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v, %.10q, %+v) = %v; want an error naming %s", tc.c != nil, tc.queue, tc.opts, err, tc.want)
		}
	}
	if _, err := worker.New(c, "q", h, worker.Options{Concurrency: 10000, HeartbeatEvery: 0.5, PollWait: 30 * time.Second, MaxCompleteBatch: 1000}); err != nil {
		t.Errorf("New with limits at their maximum: %v", err)
	}
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
