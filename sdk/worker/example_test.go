package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

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

// A worker whose attempts are OpenTelemetry spans. The submit, made inside
// a span, carries its trace context; each attempt's span ("process
// exports") is its child, so one trace shows the request that submitted the
// task and every attempt, with the spans the handler starts from its ctx.
// Without Options.TracerProvider the global provider is used.
func Example_openTelemetry() {
	ctx := context.Background()
	tp := otel.GetTracerProvider() // an SDK provider with an exporter, in a real program
	tracer := tp.Tracer("shop")
	c, err := client.New("http://127.0.0.1:7070", client.Options{})
	if err != nil {
		log.Fatal(err)
	}

	// The request that submits the task: the task joins its trace.
	reqCtx, span := tracer.Start(ctx, "POST /exports")
	_, err = c.Submit(reqCtx, client.SubmitRequest{Queue: "exports", Payload: []byte(`{"report":"weekly"}`)})
	span.End()
	if err != nil {
		log.Fatal(err)
	}

	export := func(ctx context.Context, t *worker.Task) ([]byte, error) {
		_, span := tracer.Start(ctx, "render report") // a child of the attempt's span
		defer span.End()
		return []byte("rendered"), nil
	}
	w, err := worker.New(c, "exports", export, worker.Options{TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A handler that polls a slow upstream: while the export is not ready it
// snoozes the task, which runs again a minute later without using up an
// attempt (the task's attempt and retry budget stay as they were, and
// `tenure task get` lists the snoozed runs). A SnoozeError also gives the
// reason the snoozed execution keeps.
func ExampleSnooze() {
	c, err := client.New("http://127.0.0.1:7070", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	poll := func(ctx context.Context, t *worker.Task) ([]byte, error) {
		_, ready, err := exportStatus(ctx, string(t.Payload))
		if err != nil {
			return nil, err // retried per the task's retry policy
		}
		if !ready {
			return nil, worker.Snooze(time.Minute)
		}
		return []byte("ready"), nil
	}
	w, err := worker.New(c, "exports", poll, worker.Options{Concurrency: 4})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// A handler that reports its progress as it copies the parts of an export:
// `tenure task get`, GetTask and the dashboard show the last report while
// the attempt runs. Reports ride on the lease's heartbeats (at most one a
// second), so reporting often is cheap.
func ExampleReportProgress() {
	c, err := client.New("http://127.0.0.1:7070", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	copyExport := func(ctx context.Context, t *worker.Task) ([]byte, error) {
		parts, _, err := exportStatus(ctx, string(t.Payload))
		if err != nil {
			return nil, err
		}
		for i := range parts {
			p := worker.Progress{Message: fmt.Sprintf("copying part %d of %d", i+1, parts), Done: int64(i), Total: int64(parts)}
			if err := worker.ReportProgress(ctx, p); err != nil {
				return nil, err
			}
			if err := copyPart(ctx, i); err != nil {
				return nil, err
			}
		}
		return []byte("copied"), nil
	}
	w, err := worker.New(c, "exports", copyExport, worker.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func exportStatus(ctx context.Context, id string) (parts int, ready bool, err error) {
	return 3, true, nil
}

func copyPart(ctx context.Context, i int) error { return nil }
