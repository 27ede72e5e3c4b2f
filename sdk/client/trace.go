package client

import (
	"context"
	"strings"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// maxTracestateBytes is the server's limit on a submit's tracestate: the
// 512 characters the W3C Trace Context recommendation asks every vendor to
// pass on.
const maxTracestateBytes = 512

// traceContextOf is the W3C trace context of the span current in ctx, which
// a submit sends so that the workers' spans of the task continue its trace
// (nil when ctx has no valid span: nothing is sent). A tracestate over the
// server's limit loses whole entries from its end, as the recommendation
// says a vendor may.
func traceContextOf(ctx context.Context) *tenurev1.TraceContext {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	tc := &tenurev1.TraceContext{Traceparent: carrier["traceparent"], Tracestate: carrier["tracestate"]}
	for len(tc.Tracestate) > maxTracestateBytes {
		i := strings.LastIndexByte(tc.Tracestate, ',')
		if i < 0 {
			i = 0
		}
		tc.Tracestate = tc.Tracestate[:i]
	}
	return tc
}
