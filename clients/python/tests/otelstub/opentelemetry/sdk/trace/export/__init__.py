"""opentelemetry.sdk.trace.export: span processors."""
from typing import Any


class SimpleSpanProcessor:
    def __init__(self, exporter: Any):
        self._exporter = exporter

    def on_end(self, span: Any) -> None:
        self._exporter.export([span])
