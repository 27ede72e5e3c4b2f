"""opentelemetry.trace.propagation.tracecontext: the W3C traceparent and
tracestate headers."""
import re
from typing import Any, Dict, Optional

from opentelemetry import trace

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


class TraceContextTextMapPropagator:
    def extract(self, carrier: Dict[str, str], context: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        ctx = context if context is not None else {}
        m = _TRACEPARENT.match(carrier.get("traceparent", ""))
        if not m or m.group(2) == "0" * 32 or m.group(3) == "0" * 16:
            return ctx
        sc = trace.SpanContext(int(m.group(2), 16), int(m.group(3), 16), is_remote=True, trace_flags=int(m.group(4), 16),
                               trace_state=carrier.get("tracestate") or None)
        return trace.set_span_in_context(trace.NonRecordingSpan(sc), ctx)

    def inject(self, carrier: Dict[str, str], context: Optional[Dict[str, Any]] = None) -> None:
        sc = trace.get_current_span(context).get_span_context()
        if not sc.is_valid:
            return
        carrier["traceparent"] = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"
        if sc.trace_state:
            carrier["tracestate"] = sc.trace_state
