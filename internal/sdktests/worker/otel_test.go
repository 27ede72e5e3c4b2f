package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
)

// TestOneTraceAcrossAttempts: a task submitted inside a span is one trace
// with its attempts, against a real server. The submit carries the span's
// trace context; the worker starts each attempt's span ("process q") as
// its child, with the task, attempt and lease; the first attempt fails
// (its span records the error, outcome retrying) and the second completes
// (outcome completed); the handler's own spans are children of their
// attempt's.
func TestOneTraceAcrossAttempts(t *testing.T) {
	t.Parallel()
	url := startServer(t, nil)
	c := newClient(t, url)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("test")

	ctx, submitSpan := tracer.Start(t.Context(), "submit order")
	res, err := c.Submit(ctx, client.SubmitRequest{Queue: "traced", Payload: []byte("order-7"),
		Retry: &client.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	submitSpan.End()
	if err != nil {
		t.Fatal(err)
	}

	ends := make(chan worker.Finish, 2)
	startWorker(t, c, "traced", func(ctx context.Context, task *worker.Task[[]byte]) ([]byte, error) {
		_, work := tracer.Start(ctx, "charge card")
		defer work.End()
		if task.Attempt == 1 {
			return nil, errors.New("card network timed out")
		}
		return []byte("charged"), nil
	}, opts{Options: worker.Options{TracerProvider: tp}, OnFinish: func(_ *client.LeasedTask, f worker.Finish) { ends <- f }})
	for _, want := range []worker.Outcome{worker.OutcomeRetrying, worker.OutcomeCompleted} {
		if f := recv(t, ends, "an attempt's end"); f.Outcome != want {
			t.Fatalf("attempt ended %v (%v), want %v", f.Outcome, f.Err, want)
		}
	}
	task, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: res.TaskID})
	if err != nil || task.State != client.TaskStateCompleted || len(task.Executions) != 2 {
		t.Fatalf("task %+v, %v; want completed in two attempts", task, err)
	}

	root := submitSpan.SpanContext()
	var process, work []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.SpanContext.TraceID() != root.TraceID() {
			t.Errorf("span %q is in trace %v, not the submit's %v", s.Name, s.SpanContext.TraceID(), root.TraceID())
		}
		switch s.Name {
		case "process traced":
			process = append(process, s)
		case "charge card":
			work = append(work, s)
		}
	}
	if len(process) != 2 || len(work) != 2 {
		t.Fatalf("%d attempt spans and %d handler spans, want 2 of each: %v", len(process), len(work), spans.GetSpans())
	}
	for i, s := range process {
		attrs := attributes(s)
		ex := task.Executions[i]
		want := map[string]string{"messaging.system": "tenure", "messaging.destination.name": "traced", "messaging.message.id": res.TaskID,
			"tenure.namespace": "default", "tenure.lease_id": ex.LeaseID}
		for k, v := range want {
			if attrs[k].AsString() != v {
				t.Errorf("attempt %d's span: %s = %q, want %q", i+1, k, attrs[k].AsString(), v)
			}
		}
		if s.Parent.SpanID() != root.SpanID() || s.SpanKind != trace.SpanKindConsumer || attrs["tenure.attempt"].AsInt64() != int64(i+1) {
			t.Errorf("attempt %d's span: parent %v (want the submit's %v), kind %v, attempt %v", i+1, s.Parent.SpanID(), root.SpanID(), s.SpanKind, attrs["tenure.attempt"])
		}
		if work[i].Parent.SpanID() != s.SpanContext.SpanID() {
			t.Errorf("the handler's span of attempt %d is not a child of the attempt's span", i+1)
		}
	}
	for _, s := range spans.GetSpans() {
		var attrs []string
		for _, kv := range s.Attributes {
			if strings.HasPrefix(string(kv.Key), "tenure.") {
				attrs = append(attrs, string(kv.Key)+"="+kv.Value.Emit())
			}
		}
		t.Logf("trace %s: span %s %q, parent %s, %s %s", s.SpanContext.TraceID(), s.SpanContext.SpanID(), s.Name, s.Parent.SpanID(), s.Status.Code, strings.Join(attrs, " "))
	}
	first, second := process[0], process[1]
	if attributes(first)["tenure.outcome"].AsString() != "retrying" || first.Status.Code != codes.Error || len(first.Events) == 0 ||
		first.Events[0].Name != "exception" {
		t.Errorf("the failed attempt's span: outcome %v, status %v, events %v; want retrying, Error, the error recorded",
			attributes(first)["tenure.outcome"], first.Status, first.Events)
	}
	if attributes(second)["tenure.outcome"].AsString() != "completed" || second.Status.Code != codes.Ok {
		t.Errorf("the completed attempt's span: outcome %v, status %v", attributes(second)["tenure.outcome"], second.Status)
	}
}

func attributes(s tracetest.SpanStub) map[string]attribute.Value {
	out := map[string]attribute.Value{}
	for _, kv := range s.Attributes {
		out[string(kv.Key)] = kv.Value
	}
	return out
}
