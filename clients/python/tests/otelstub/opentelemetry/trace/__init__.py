"""opentelemetry.trace: spans, span contexts, tracers and the global
tracer provider."""
import contextlib
import enum
import random
from typing import Any, Dict, Iterator, Optional

from opentelemetry import context as _ctx

_SPAN_KEY = "current-span"


class SpanKind(enum.Enum):
    INTERNAL = 0
    SERVER = 1
    CLIENT = 2
    PRODUCER = 3
    CONSUMER = 4


class StatusCode(enum.Enum):
    UNSET = 0
    OK = 1
    ERROR = 2


class Status:
    def __init__(self, status_code: StatusCode = StatusCode.UNSET, description: Optional[str] = None):
        self.status_code = status_code
        self.description = description


class SpanContext:
    def __init__(self, trace_id: int, span_id: int, is_remote: bool = False, trace_flags: int = 1, trace_state: Any = None):
        self.trace_id, self.span_id, self.is_remote = trace_id, span_id, is_remote
        self.trace_flags, self.trace_state = trace_flags, trace_state

    @property
    def is_valid(self) -> bool:
        return self.trace_id != 0 and self.span_id != 0


INVALID_SPAN_CONTEXT = SpanContext(0, 0)


class NonRecordingSpan:
    def __init__(self, context: SpanContext):
        self._context = context

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Dict[str, Any]) -> None:
        pass

    def set_status(self, status: Status) -> None:
        pass

    def record_exception(self, exception: BaseException) -> None:
        pass

    def end(self) -> None:
        pass


INVALID_SPAN = NonRecordingSpan(INVALID_SPAN_CONTEXT)


def get_current_span(context: Optional[Dict[str, Any]] = None) -> Any:
    span = _ctx.get_value(_SPAN_KEY, context)
    return span if span is not None else INVALID_SPAN


def set_span_in_context(span: Any, context: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return _ctx.set_value(_SPAN_KEY, span, context)


class _NoOpTracer:
    def start_span(self, name: str, context: Any = None, kind: SpanKind = SpanKind.INTERNAL, attributes: Any = None) -> Any:
        return NonRecordingSpan(get_current_span(context).get_span_context())

    @contextlib.contextmanager
    def start_as_current_span(self, name: str, context: Any = None, kind: SpanKind = SpanKind.INTERNAL, attributes: Any = None) -> Iterator[Any]:
        span = self.start_span(name, context, kind, attributes)
        token = _ctx.attach(set_span_in_context(span))
        try:
            yield span
        finally:
            _ctx.detach(token)
            span.end()


class _NoOpTracerProvider:
    def get_tracer(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return _NoOpTracer()


_provider: Any = _NoOpTracerProvider()


def get_tracer_provider() -> Any:
    return _provider


def set_tracer_provider(tp: Any) -> None:
    global _provider
    _provider = tp


def get_tracer(name: str, *args: Any, **kwargs: Any) -> Any:
    return _provider.get_tracer(name)


def _new_id(bits: int) -> int:
    return random.getrandbits(bits) or 1



