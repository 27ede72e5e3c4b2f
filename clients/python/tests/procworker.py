"""A worker process for the tests of test_processes.py:

    python3 procworker.py MODE URL QUEUE DIR

effects  a Worker whose handler computes and whose effects append a line
         "<task id> <pid> <attempt>" to DIR/effects, once per task (keyed by
         the fencing token's task id: a line already there is not written
         again, and DIR/skipped says so). Each computation appends to
         DIR/computed. With HANG_AFTER_EFFECTS set, the effects hang once
         applied (the process is then killed), before the task completes;
         with SLOW_COMPUTE set, the handler writes DIR/computing and takes
         that many seconds first.
raw      leases one task with the client alone, writes DIR/leased, waits
         for DIR/go, then commits: it applies the effect only if the commit
         wins, and prints what the server said.
sigterm  a Worker (or with ASYNC set an AsyncWorker) whose handler takes 1.5s;
         it writes DIR/running when the handler starts and DIR/finished
         when it ends; SIGTERM stops it gracefully.
"""
from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tenure  # noqa: E402


def append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def apply_once(d: str, task_id: str, attempt: int) -> None:
    """The external effect, idempotent by the task's id."""
    path = os.path.join(d, "effects")
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        if any(line.split()[0] == task_id for line in f.read().splitlines() if line):
            append(os.path.join(d, "skipped"), f"{task_id} {os.getpid()}")
            return
        f.write(f"{task_id} {os.getpid()} {attempt}\n")
        f.flush()
        os.fsync(f.fileno())


def effects(url: str, queue: str, d: str) -> None:
    w = tenure.Worker(tenure.Client(url), [queue], concurrency=2, poll_wait=1, shutdown_grace=2)

    @w.task("charge")
    def compute(t: tenure.Task) -> dict:
        slow = float(os.environ.get("SLOW_COMPUTE", "0"))
        if slow:
            append(os.path.join(d, "computing"), f"{t.id} {os.getpid()}")
            time.sleep(slow)  # stalls, deaf to t.cancelled
        append(os.path.join(d, "computed"), f"{t.id} {os.getpid()}")
        return {"cents": t.args["cents"]}

    @w.effects("charge")
    def apply(t: tenure.Task, result: dict, token: tenure.FencingToken) -> None:
        apply_once(d, token.task_id, token.attempt)
        if os.environ.get("HANG_AFTER_EFFECTS"):
            append(os.path.join(d, "applied"), t.id)
            time.sleep(3600)

    w.run()


def raw(url: str, queue: str, d: str) -> None:
    c = tenure.Client(url)
    lt = c.lease(worker_id=f"raw-{os.getpid()}", queue=queue, wait=10).tasks[0]
    append(os.path.join(d, "leased"), lt.task_id)
    while not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.02)
    try:
        tok = c.commit(task_id=lt.task_id, lease_id=lt.lease_id, result=b'{"cents":1}').fencing_token
    except (tenure.LeaseLost, tenure.AlreadyCommitted) as e:
        print(f"refused: {type(e).__name__}: committed_by={e.committed_by}", flush=True)
        return
    apply_once(d, tok.task_id, tok.attempt)
    print("committed", flush=True)


def sigterm(url: str, queue: str, d: str) -> None:
    def handler_body(t: tenure.Task) -> None:
        append(os.path.join(d, "running"), t.id)

    if os.environ.get("ASYNC"):
        async def main() -> None:
            w = tenure.AsyncWorker(tenure.AsyncClient(url), [queue], poll_wait=1, shutdown_grace=10)

            @w.task("slow")
            async def slow(t: tenure.Task) -> str:
                handler_body(t)
                await asyncio.sleep(1.5)
                append(os.path.join(d, "finished"), t.id)
                return "done"

            await w.run()

        asyncio.run(main())
        return
    w = tenure.Worker(tenure.Client(url), [queue], poll_wait=1, shutdown_grace=10)

    @w.task("slow")
    def slow(t: tenure.Task) -> str:
        handler_body(t)
        time.sleep(1.5)
        append(os.path.join(d, "finished"), t.id)
        return "done"

    w.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    mode, url, queue, d = sys.argv[1:5]
    {"effects": effects, "raw": raw, "sigterm": sigterm}[mode](url, queue, d)
