package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the worker's tracer (the instrumentation scope).
const tracerName = "github.com/tenurehq/tenure/sdk/worker"

// The attributes of an attempt's span. messaging.* follow OpenTelemetry's
// semantic conventions for messaging; tenure.* are tenure's own.
var (
	attrSystem    = attribute.String("messaging.system", "tenure")
	attrOperation = attribute.String("messaging.operation.name", "process")
	attrOpType    = attribute.String("messaging.operation.type", "process")
)

// startSpan starts the span of attempt a, as a child of the span the task
// was submitted from (its trace context, if it has one), and returns ctx
// carrying it: the middleware's and the handler's own spans are its
// children. The span is a
// consumer span named "process <queue>"; it ends with the attempt (endSpan),
// once its outcome is known. Its attributes are set only if it records: a
// worker without a tracer provider pays for a span that does nothing and
// for no more.
func (w *Worker) startSpan(ctx context.Context, a *attempt) context.Context {
	t := &a.task
	if tc := t.TraceContext; tc.Traceparent != "" {
		carrier := propagation.MapCarrier{"traceparent": tc.Traceparent}
		if tc.Tracestate != "" {
			carrier["tracestate"] = tc.Tracestate
		}
		ctx = propagation.TraceContext{}.Extract(ctx, carrier)
	}
	ctx, a.span = w.tracer.Start(ctx, w.spanNames[t.Queue], spanKind)
	if a.span.IsRecording() {
		a.span.SetAttributes(attrSystem, attrOperation, attrOpType,
			attribute.String("messaging.destination.name", t.Queue),
			attribute.String("messaging.message.id", t.ID),
			attribute.String("tenure.namespace", t.Namespace),
			attribute.Int64("tenure.attempt", int64(t.Attempt)),
			attribute.String("tenure.lease_id", t.LeaseID),
			attribute.String("tenure.worker_id", w.opts.WorkerID),
			attribute.Bool("tenure.finalise", t.Committed))
	}
	return ctx
}

// spanKind makes an attempt's span a consumer span.
var spanKind = trace.WithSpanKind(trace.SpanKindConsumer)

// endSpan ends a's span with the attempt's outcome: attribute
// tenure.outcome, the error recorded and the status Error for an attempt
// that failed, was lost or was not reported.
func endSpan(a *attempt, f Finish) {
	span := a.span
	if span == nil {
		return
	}
	a.span = nil
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attribute.String("tenure.outcome", f.Outcome.String()))
	if !f.RetryAt.IsZero() {
		span.SetAttributes(attribute.String("tenure.next_attempt_at", f.RetryAt.UTC().Format(time.RFC3339Nano)))
	}
	switch f.Outcome {
	case OutcomeCompleted, OutcomeSnoozed:
		span.SetStatus(codes.Ok, "")
	default:
		if f.Err != nil {
			span.RecordError(f.Err)
			span.SetStatus(codes.Error, f.Err.Error())
		} else {
			span.SetStatus(codes.Error, f.Outcome.String())
		}
	}
	span.End()
}

// tracerOf is the tracer of Options.TracerProvider, or of OpenTelemetry's
// global provider (otel.SetTracerProvider) when it is nil.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(tracerName)
}
