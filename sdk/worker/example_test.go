package worker_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// The examples talk to the server at $TENURE_ADDR, as the tenure CLI does
// (`go test` starts one), else to `tenure server` on its default address.
func serverURL() string { return cmp.Or(os.Getenv("TENURE_ADDR"), "http://127.0.0.1:7070") }

// quiet keeps the examples' output to what they print.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// SendEmail and ResizeImage are typed tasks: their types name their kinds
// of work; their fields are their arguments.
type SendEmail struct {
	To string `json:"to"`
}

func (SendEmail) Kind() string { return "send_email" }

type ResizeImage struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (ResizeImage) Kind() string { return "resize_image" }

// A typed worker serving two kinds from two queues with one pool of
// slots. Each handler gets its task's arguments decoded; a task of a kind
// the worker does not know would fail for good, saying so. The worker
// stops once nothing is left (StopWhenEmpty): a script that works queues
// off. A long-running worker leaves it out and stops when ctx ends
// (signal.NotifyContext, for SIGTERM).
func Example() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.SubmitBatch(ctx, client.SubmitBatchRequest{Requests: []client.SubmitRequest{
		{Args: SendEmail{To: "ada@example.com"}, Queue: "mail"},
		{Args: ResizeImage{Image: "cat.png", Width: 320}, Queue: "images"},
		{Args: SendEmail{To: "grace@example.com"}, Queue: "mail"},
	}})
	if err != nil {
		log.Fatal(err)
	}

	w, err := worker.New(c, worker.Options{Queues: []string{"mail", "images"}, StopWhenEmpty: true, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, func(ctx context.Context, t *worker.Task[SendEmail]) error {
		fmt.Println("email to", t.Args.To, "from queue", t.Queue)
		return nil
	})
	worker.HandleResult(w, func(ctx context.Context, t *worker.Task[ResizeImage]) (string, error) {
		fmt.Println("resizing", t.Args.Image, "to", t.Args.Width)
		return fmt.Sprintf("thumbs/%d/%s", t.Args.Width, t.Args.Image), nil // the task's result
	})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Unordered output:
	// email to ada@example.com from queue mail
	// resizing cat.png to 320
	// email to grace@example.com from queue mail
}

// ChargeCard is a typed task with an external effect: money moves.
type ChargeCard struct {
	Card   string `json:"card"`
	Amount int    `json:"amount"` // cents
}

func (ChargeCard) Kind() string { return "charge_card" }

// Receipt is what computing a charge yields, committed before it is
// applied.
type Receipt struct {
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// The commit boundary: compute works out the result without side effects;
// the worker commits it, and only if the commit wins does apply run, with
// the fencing token: an attempt whose lease expired while another ran
// never charges the card. apply may run again after a crash, with the
// committed receipt, so it is idempotent: the payment provider drops a
// second charge with the same idempotency key, the task's id.
func ExampleHandleEffects() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	sub, err := c.Submit(ctx, client.SubmitRequest{Args: ChargeCard{Card: "4242", Amount: 1999}, Queue: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(c, worker.Options{Queues: []string{"billing"}, StopWhenEmpty: true, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	compute := func(ctx context.Context, t *worker.Task[ChargeCard]) (Receipt, error) {
		return Receipt{Amount: t.Args.Amount, Currency: "EUR"}, nil
	}
	apply := func(ctx context.Context, t *worker.Task[ChargeCard], r Receipt, tok worker.FencingToken) error {
		key := "charge-" + tok.TaskID // the same for every attempt of the task
		fmt.Printf("charging card %s %d.%02d %s, key of the task: %v\n", t.Args.Card, r.Amount/100, r.Amount%100, r.Currency, key == "charge-"+sub.TaskID)
		return nil
	}
	worker.HandleEffects(w, compute, apply)
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: sub.TaskID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, string(task.Result))
	// Output:
	// charging card 4242 19.99 EUR, key of the task: true
	// COMPLETED {"amount":1999,"currency":"EUR"}
}

// Import is a typed task that may fail.
type Import struct {
	File string `json:"file"`
}

func (Import) Kind() string { return "import" }

// Retries and Permanent: an error fails the attempt and the server retries
// the task per its retry policy (here 3 attempts, 10ms apart, doubling); an
// error wrapped with Permanent fails it for good at once. Middleware hears
// how each attempt ended, as the server answered.
func ExamplePermanent() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	retry := &client.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond}
	for _, file := range []string{"flaky.csv", "corrupt.csv"} {
		if _, err := c.Submit(ctx, client.SubmitRequest{Args: Import{File: file}, Queue: "imports", Retry: retry}); err != nil {
			log.Fatal(err)
		}
	}
	var mu sync.Mutex
	ended := map[string]string{}
	report := func(ctx context.Context, t *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
		f := next(ctx)
		mu.Lock()
		defer mu.Unlock()
		ended[fmt.Sprintf("%s attempt %d", t.Payload, t.Attempt)] = f.Outcome.String()
		if len(ended) == 4 { // flaky.csv's three attempts and corrupt.csv's one
			stop()
		}
		return f
	}
	w, err := worker.New(c, worker.Options{Queues: []string{"imports"}, Middleware: []worker.Middleware{report}, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, func(ctx context.Context, t *worker.Task[Import]) error {
		switch {
		case t.Args.File == "corrupt.csv":
			return worker.Permanent(errors.New("not a CSV file: retrying cannot help"))
		case t.Attempt < 3:
			return errors.New("the storage timed out")
		}
		return nil
	})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	for _, file := range []string{"flaky.csv", "corrupt.csv"} {
		for n := 1; n <= 3; n++ {
			if o, ok := ended[fmt.Sprintf(`{"file":%q} attempt %d`, file, n)]; ok {
				fmt.Println(file, "attempt", n, o)
			}
		}
	}
	// Output:
	// flaky.csv attempt 1 retrying
	// flaky.csv attempt 2 retrying
	// flaky.csv attempt 3 completed
	// corrupt.csv attempt 1 failed
}

// Middleware runs around each attempt: here it logs each one with its
// kind, outcome and duration, as a metrics or tracing middleware would
// record them.
func ExampleMiddleware() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Submit(ctx, client.SubmitRequest{Args: SendEmail{To: "edsger@example.com"}, Queue: "logged"}); err != nil {
		log.Fatal(err)
	}
	logAttempts := func(ctx context.Context, t *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
		f := next(ctx)
		fmt.Println("attempt", t.Attempt, "of", t.Kind, "in", t.Queue+":", f.Outcome, "after a positive time:", f.Took > 0)
		return f
	}
	w, err := worker.New(c, worker.Options{Queues: []string{"logged"}, StopWhenEmpty: true, Logger: quiet,
		Middleware: []worker.Middleware{logAttempts}})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, func(ctx context.Context, t *worker.Task[SendEmail]) error { return nil })
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 of send_email in logged: completed after a positive time: true
}

// A raw handler gets the payload as bytes: for the tasks other languages'
// clients submit (kind "" is the tasks submitted without a kind).
func ExampleHandleRaw() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Submit(ctx, client.SubmitRequest{Queue: "shout", Payload: []byte("hello from python")}); err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(c, worker.Options{Queues: []string{"shout"}, StopWhenEmpty: true, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	worker.HandleRaw(w, "", func(ctx context.Context, t *worker.Task[[]byte]) ([]byte, error) {
		out := strings.ToUpper(string(t.Args))
		fmt.Println(out)
		return []byte(out), nil
	}, nil)
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// HELLO FROM PYTHON
}

// ExportReport is a typed task that waits for a slow upstream.
type ExportReport struct {
	Report string `json:"report"`
}

func (ExportReport) Kind() string { return "export_report" }

// A handler that polls a slow upstream: while the export is not ready it
// snoozes the task, which runs again after the delay without using up an
// attempt: the task's attempt number and retry budget stay as they were
// (here one attempt in all), and `tenure task get` lists the snoozed runs.
// A SnoozeError also gives the reason the snoozed execution keeps.
func ExampleSnooze() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	sub, err := c.Submit(ctx, client.SubmitRequest{Args: ExportReport{Report: "weekly"}, Queue: "exports",
		Retry: &client.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		log.Fatal(err)
	}
	polls := 0
	done := func(ctx context.Context, t *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
		f := next(ctx)
		fmt.Println("attempt", t.Attempt, f.Outcome)
		if f.Outcome != worker.OutcomeSnoozed {
			stop()
		}
		return f
	}
	w, err := worker.New(c, worker.Options{Queues: []string{"exports"}, Middleware: []worker.Middleware{done}, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, func(ctx context.Context, t *worker.Task[ExportReport]) error {
		if polls++; polls < 3 { // the upstream is ready at the third look
			return &worker.SnoozeError{Delay: 20 * time.Millisecond, Reason: "export " + t.Args.Report + " not ready"}
		}
		return nil
	})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	task, err := c.GetTask(context.Background(), client.GetTaskRequest{TaskID: sub.TaskID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.State, "after", len(task.Executions), "runs, attempt", task.Attempt, "of", task.RetryPolicy.MaxAttempts)
	// Output:
	// attempt 1 snoozed
	// attempt 1 snoozed
	// attempt 1 completed
	// COMPLETED after 3 runs, attempt 1 of 1
}

// CopyExport is a typed task whose handler reports its progress.
type CopyExport struct {
	Parts int `json:"parts"`
}

func (CopyExport) Kind() string { return "copy_export" }

// A handler that reports its progress as it copies the parts of an export:
// GetTask, `tenure task get` and the dashboard show the last report while
// the attempt runs. Reports ride on the lease's heartbeats (one brought
// forward, at most one a second), so reporting often is cheap.
func ExampleReportProgress() {
	ctx := context.Background()
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Submit(ctx, client.SubmitRequest{Args: CopyExport{Parts: 4}, Queue: "copies"}); err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(c, worker.Options{Queues: []string{"copies"}, StopWhenEmpty: true, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, func(ctx context.Context, t *worker.Task[CopyExport]) error {
		for i := range t.Args.Parts {
			p := worker.Progress{Message: fmt.Sprintf("copying part %d of %d", i+1, t.Args.Parts), Done: int64(i), Total: int64(t.Args.Parts)}
			if err := worker.ReportProgress(ctx, p); err != nil {
				return err
			}
			// ... copy part i ...
		}
		// What a reader of the task sees once the report has gone out.
		for {
			task, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: t.ID})
			if err != nil {
				return err
			}
			if task.Progress != nil && task.Progress.Percent == 75 {
				fmt.Println("the task shows:", task.Progress)
				return nil
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// the task shows: 75% copying part 4 of 4
}

// A worker whose attempts are OpenTelemetry spans. A submit made inside a
// span carries its trace context (W3C traceparent), kept with the task;
// each attempt's span ("process <queue>") is its child, so one trace shows
// the request that submitted the task and every attempt, and the spans the
// handler starts from its ctx are the attempt's children. Without
// Options.TracerProvider the global provider is used (a real program sets
// one with an exporter; here it records nothing, but the trace is carried
// all the same).
func Example_openTelemetry() {
	ctx := context.Background()
	tracer := otel.GetTracerProvider().Tracer("shop")
	c, err := client.New(serverURL(), client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	// The request that submits the task, in a trace that came from
	// upstream (its traceparent header): the task joins that trace.
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	upstream := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, Remote: true}))
	reqCtx, span := tracer.Start(upstream, "POST /exports")
	_, err = c.Submit(reqCtx, client.SubmitRequest{Args: ExportReport{Report: "monthly"}, Queue: "traced-exports"})
	span.End()
	if err != nil {
		log.Fatal(err)
	}

	w, err := worker.New(c, worker.Options{Queues: []string{"traced-exports"}, StopWhenEmpty: true, Logger: quiet,
		TracerProvider: otel.GetTracerProvider()})
	if err != nil {
		log.Fatal(err)
	}
	worker.Handle(w, func(ctx context.Context, t *worker.Task[ExportReport]) error {
		ctx, span := tracer.Start(ctx, "render report") // a child of the attempt's span
		defer span.End()
		fmt.Println("rendering", t.Args.Report, "in trace", trace.SpanContextFromContext(ctx).TraceID())
		return nil
	})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// rendering monthly in trace 4bf92f3577b34da6a3ce929d0e0e4736
}
