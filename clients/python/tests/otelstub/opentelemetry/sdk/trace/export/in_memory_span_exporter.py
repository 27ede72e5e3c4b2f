"""opentelemetry.sdk.trace.export.in_memory_span_exporter."""
import threading
from typing import Any, List


class InMemorySpanExporter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: List[Any] = []

    def export(self, spans: List[Any]) -> None:
        with self._lock:
            self._spans.extend(spans)

    def get_finished_spans(self) -> List[Any]:
        with self._lock:
            return list(self._spans)
