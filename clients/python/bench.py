#!/usr/bin/env python3
"""Measures the Python worker runtime against a running server:

    python3 clients/python/bench.py --url http://127.0.0.1:7070 --tasks 10000 --flavor thread
    python3 clients/python/bench.py --url http://127.0.0.1:7070 --tasks 10000 --flavor asyncio

It submits --tasks tasks (JSON arguments of about --payload-bytes, in
SubmitBatch calls of 100), then works them off with one Worker (threads)
or AsyncWorker (asyncio) of --concurrency slots and a handler that does
nothing but note the task, and checks that every task was handled once and
is COMPLETED after one attempt. It prints one line of JSON: the work
phase's tasks per second and this process's CPU seconds per task (user and
system, every thread; the server's are not counted), beside the submit
phase's. `tenure bench --runtime --addr URL --protocol json --workers 1`
measures the Go worker runtime the same way."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tenure  # noqa: E402


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def run(url: str, tasks: int, flavor: str, concurrency: int, payload_bytes: int) -> Dict[str, Any]:
    queue = "pybench-" + uuid.uuid4().hex[:10]
    c = tenure.Client(url)
    pad = "x" * max(payload_bytes - 20, 0)
    c0, t0 = cpu(), time.monotonic()
    for start in range(0, tasks, 100):
        c.submit_batch(requests=[{"queue": queue, "kind": "bench", "args": {"i": i, "pad": pad}}
                                 for i in range(start, min(start + 100, tasks))])
    submit_cpu, submit_s = cpu() - c0, time.monotonic() - t0
    seen: List[int] = []
    lock = threading.Lock()
    c1, t1 = cpu(), time.monotonic()
    if flavor == "thread":
        w = tenure.Worker(tenure.Client(url), [queue], concurrency=concurrency, stop_when_empty=True, poll_wait=1)

        @w.task("bench")
        def handle(t: tenure.Task) -> None:
            with lock:
                seen.append(t.args["i"])

        w.run(handle_signals=False)
    else:
        async def main() -> None:
            aw = tenure.AsyncWorker(tenure.AsyncClient(url), [queue], concurrency=concurrency, stop_when_empty=True, poll_wait=1)

            @aw.task("bench")
            async def handle(t: tenure.Task) -> None:
                seen.append(t.args["i"])

            await aw.run(handle_signals=False)

        asyncio.run(main())
    work_cpu, work_s = cpu() - c1, time.monotonic() - t1
    # Every task handled once, and COMPLETED after one attempt.
    problems = []
    if sorted(seen) != list(range(tasks)):
        problems.append(f"handled {len(seen)} times, {len(set(seen))} distinct tasks, of {tasks}")
    completed = 0
    for t in c.iter_tasks(queue=queue, page_size=1000):
        if t.state == tenure.TaskState.COMPLETED and t.attempt == 1 and len(t.executions) == 1:
            completed += 1
        elif len(problems) < 5:
            problems.append(f"task {t.task_id}: {t.state.name}, attempt {t.attempt}, {len(t.executions)} executions")
    if completed != tasks:
        problems.append(f"{completed} of {tasks} tasks COMPLETED after one attempt")
    c.close()
    return {
        "flavor": flavor, "tasks": tasks, "concurrency": concurrency, "python": sys.version.split()[0],
        "work_seconds": round(work_s, 3), "tasks_per_sec": round(tasks / work_s),
        "cpu_seconds": round(work_cpu, 3), "cpu_us_per_task": round(work_cpu / tasks * 1e6, 1),
        "submit_seconds": round(submit_s, 3), "submit_cpu_us_per_task": round(submit_cpu / tasks * 1e6, 1),
        "handled": len(seen), "completed_once": completed, "problems": problems,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=os.environ.get("TENURE_ADDR", "http://127.0.0.1:7070"))
    ap.add_argument("--tasks", type=int, default=10000)
    ap.add_argument("--flavor", choices=["thread", "asyncio"], default="thread")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--payload-bytes", type=int, default=64)
    a = ap.parse_args()
    r = run(a.url, a.tasks, a.flavor, a.concurrency, a.payload_bytes)
    print(json.dumps(r))
    return 1 if r["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
