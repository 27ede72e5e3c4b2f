"""The OpenTelemetry scenario of test_otel.py, run in a process of its own
(opentelemetry is imported once per process): with an SDK tracer provider
and an in-memory exporter, a span is current while tasks are submitted;
a Worker and an AsyncWorker process them, one handler fails for good.
It prints the finished spans as JSON.

    python3 otel_scenario.py URL QUEUE
"""
from __future__ import annotations

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

import tenure  # noqa: E402

url, queue = sys.argv[1:3]
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("scenario")
client = tenure.Client(url)

with tracer.start_as_current_span("submitter"):
    client.submit(queue=queue, kind="ok", args={})
    client.submit(queue=queue, kind="bad", args={})
    client.submit(queue=queue + "-async", kind="ok", args={})
client.submit(queue=queue, kind="ok", args={"untraced": True})

w = tenure.Worker(client, [queue], stop_when_empty=True, poll_wait=1)


@w.task("ok")
def ok(t: tenure.Task) -> None:
    with tracer.start_as_current_span("handler"):
        pass


@w.task("bad")
def bad(t: tenure.Task) -> None:
    raise tenure.Permanent("declined")


w.run(handle_signals=False)


async def main() -> None:
    aw = tenure.AsyncWorker(tenure.AsyncClient(url), [queue + "-async"], stop_when_empty=True, poll_wait=1)

    @aw.task("ok")
    async def aok(t: tenure.Task) -> None:
        with tracer.start_as_current_span("async handler"):
            await asyncio.sleep(0)

    await aw.run(handle_signals=False)

asyncio.run(main())


def hexid(n: int, width: int) -> str:
    return format(n, f"0{width}x")


out = []
for s in exporter.get_finished_spans():
    out.append({
        "name": s.name,
        "kind": s.kind.name,
        "trace_id": hexid(s.context.trace_id, 32),
        "span_id": hexid(s.context.span_id, 16),
        "parent_id": hexid(s.parent.span_id, 16) if s.parent is not None else None,
        "attributes": dict(s.attributes or {}),
        "status": s.status.status_code.name,
        "events": [e.name for e in s.events],
    })
print(json.dumps(out))
