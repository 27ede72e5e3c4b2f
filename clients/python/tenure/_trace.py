"""OpenTelemetry, when the opentelemetry-api package is installed (it is
imported only if it is there; tenure needs nothing of it otherwise).

As the Go SDK does: a submit made while a span is current carries its W3C
trace context (traceparent and tracestate); the task keeps it, and a
worker starts the span of each attempt, "process <queue>", a consumer
span, as its child, so one trace runs from the submit through every
attempt. The span is current while the middleware and the handler run
(their own spans are its children), records the task, namespace, attempt
and lease, and ends with the attempt's outcome (tenure.outcome, and the
error of one that did not complete or snooze).
"""
from __future__ import annotations

from datetime import timezone
from typing import Any, Optional

from .messages import TraceContext

TRACER_NAME = "tenure.worker"
# The server's limit on a submit's tracestate: the 512 characters the W3C
# Trace Context recommendation asks every vendor to pass on.
MAX_TRACESTATE = 512

_otel: Any = None  # False: not installed; else (trace, context, propagator)


def _load() -> Any:
    global _otel
    if _otel is None:
        try:
            from opentelemetry import context, trace
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError:
            _otel = False
        else:
            _otel = (trace, context, TraceContextTextMapPropagator())
    return _otel


def available() -> bool:
    """Whether opentelemetry-api is installed."""
    return bool(_load())


def current_trace_context() -> Optional[TraceContext]:
    """The trace context of the current span, or None without one (or
    without OpenTelemetry). A tracestate over the server's limit loses whole
    entries from its end, as the recommendation says a vendor may."""
    o = _load()
    if not o:
        return None
    trace, _, prop = o
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict = {}
    prop.inject(carrier)
    tp = carrier.get("traceparent", "")
    if not tp:
        return None
    ts = carrier.get("tracestate", "")
    while len(ts) > MAX_TRACESTATE:
        i = ts.rfind(",")
        ts = ts[:max(i, 0)]
    return TraceContext(traceparent=tp, tracestate=ts)


class AttemptSpan:
    """The span of one attempt: start makes it current, end ends it with
    the attempt's Finish. Without OpenTelemetry both do nothing."""

    __slots__ = ("span", "token")

    def __init__(self) -> None:
        self.span: Any = None
        self.token: Any = None

    def start(self, tracer_provider: Any, task: Any, worker_id: str) -> None:
        o = _load()
        if not o:
            return
        trace, context, prop = o
        parent = None
        tc = task.trace_context
        if tc is not None and tc.traceparent:
            carrier = {"traceparent": tc.traceparent}
            if tc.tracestate:
                carrier["tracestate"] = tc.tracestate
            parent = prop.extract(carrier)
        tp = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        tracer = tp.get_tracer(TRACER_NAME)
        self.span = tracer.start_span("process " + task.queue, context=parent, kind=trace.SpanKind.CONSUMER)
        if self.span.is_recording():
            self.span.set_attributes({
                "messaging.system": "tenure",
                "messaging.operation.name": "process",
                "messaging.operation.type": "process",
                "messaging.destination.name": task.queue,
                "messaging.message.id": task.id,
                "tenure.namespace": task.namespace,
                "tenure.attempt": task.attempt,
                "tenure.lease_id": task.lease_id,
                "tenure.worker_id": worker_id,
                "tenure.finalise": task.committed,
            })
        self.token = context.attach(trace.set_span_in_context(self.span))

    def end(self, finish: Any) -> None:
        span, token = self.span, self.token
        if span is None:
            return
        self.span = self.token = None
        trace, context, _ = _load()
        try:
            if span.is_recording():
                span.set_attribute("tenure.outcome", finish.outcome.value)
                if finish.retry_at is not None:
                    span.set_attribute("tenure.next_attempt_at", finish.retry_at.astimezone(timezone.utc).isoformat())
                if finish.outcome.value in ("completed", "snoozed"):
                    span.set_status(trace.Status(trace.StatusCode.OK))
                else:
                    if isinstance(finish.error, BaseException):
                        span.record_exception(finish.error)
                    why = str(finish.error) if finish.error is not None else finish.outcome.value
                    span.set_status(trace.Status(trace.StatusCode.ERROR, why))
            span.end()
        finally:
            context.detach(token)

