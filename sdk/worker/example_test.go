package worker_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// A worker with the commit boundary: the handler computes a result without
// side effects; Effects applies it, keyed by task id, only after the
// result's commit won. SIGTERM shuts it down gracefully.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c, err := client.New("http://127.0.0.1:7070", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	render := func(ctx context.Context, t *worker.Task) ([]byte, error) {
		if len(t.Payload) == 0 {
			return nil, worker.Permanent(errors.New("empty payload: nothing to send"))
		}
		return append([]byte("Welcome, "), t.Payload...), nil
	}
	send := func(ctx context.Context, t *worker.Task, body []byte, tok worker.FencingToken) error {
		// Idempotent: the mail provider drops a second message with the
		// same idempotency key, so a finalisation lease may call this again.
		return sendMail(ctx, "welcome-"+tok.TaskID, body)
	}
	w, err := worker.New(c, "emails", render, worker.Options{Concurrency: 16, Effects: send})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func sendMail(ctx context.Context, idempotencyKey string, body []byte) error { return nil }
