"""opentelemetry.sdk.trace: a tracer provider whose spans record."""
import contextlib
from typing import Any, Dict, Iterator, List, Optional

from opentelemetry import context as _ctx
from opentelemetry import trace


class Event:
    def __init__(self, name: str, attributes: Dict[str, Any]):
        self.name, self.attributes = name, attributes


class Span:
    def __init__(self, name: str, context: trace.SpanContext, parent: Optional[trace.SpanContext], kind: trace.SpanKind,
                 processors: List[Any]):
        self.name, self.context, self.parent, self.kind = name, context, parent, kind
        self.attributes: Dict[str, Any] = {}
        self.status = trace.Status()
        self.events: List[Event] = []
        self._processors = processors
        self._ended = False

    def get_span_context(self) -> trace.SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return not self._ended

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def set_attributes(self, attributes: Dict[str, Any]) -> None:
        self.attributes.update(attributes)

    def set_status(self, status: trace.Status) -> None:
        self.status = status

    def record_exception(self, exception: BaseException) -> None:
        self.events.append(Event("exception", {"exception.message": str(exception)}))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            for p in self._processors:
                p.on_end(self)


class Tracer:
    def __init__(self, processors: List[Any]):
        self._processors = processors

    def start_span(self, name: str, context: Any = None, kind: trace.SpanKind = trace.SpanKind.INTERNAL,
                   attributes: Optional[Dict[str, Any]] = None) -> Span:
        parent = trace.get_current_span(context).get_span_context()
        if parent.is_valid:
            sc = trace.SpanContext(parent.trace_id, trace._new_id(64), trace_state=parent.trace_state)
        else:
            parent = None
            sc = trace.SpanContext(trace._new_id(128), trace._new_id(64))
        span = Span(name, sc, parent, kind, self._processors)
        if attributes:
            span.set_attributes(attributes)
        return span

    @contextlib.contextmanager
    def start_as_current_span(self, name: str, context: Any = None, kind: trace.SpanKind = trace.SpanKind.INTERNAL,
                              attributes: Optional[Dict[str, Any]] = None) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes)
        token = _ctx.attach(trace.set_span_in_context(span))
        try:
            yield span
        finally:
            _ctx.detach(token)
            span.end()


class TracerProvider:
    def __init__(self) -> None:
        self._processors: List[Any] = []

    def add_span_processor(self, p: Any) -> None:
        self._processors.append(p)

    def get_tracer(self, name: str, *args: Any, **kwargs: Any) -> Tracer:
        return Tracer(self._processors)
