"""Worker and AsyncWorker against a real server: each test runs with both
(the flavor fixture): results and arguments, retries per the server's
policy, Permanent, unknown kinds, middleware, snooze and progress,
heartbeats, a lost lease told to the handler, effects behind the commit
boundary and finalisation, graceful shutdown."""
from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import pytest

import tenure
from tenure import messages as m
from conftest import Server, wait_for


class Flavor:
    """Makes a worker of one flavor (thread or asyncio) and its handlers from
    plain functions, and runs it on a thread of its own."""

    def __init__(self, name: str, url: str):
        self.name = name
        self.url = url
        self.client = tenure.Client(url)  # for the test's own calls
        self.thread: Optional[threading.Thread] = None
        self.error: List[BaseException] = []
        self.worker: Any = None

    def make(self, queues: List[str], **opts: Any) -> Any:
        opts.setdefault("poll_wait", 1.0)
        if self.name == "thread":
            self.worker = tenure.Worker(tenure.Client(self.url), queues, **opts)
        else:
            self.worker = tenure.AsyncWorker(tenure.AsyncClient(self.url), queues, **opts)
        return self.worker

    def handler(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn as a handler of the flavor: a def, or an async def that calls it
        (fn must not block)."""
        if self.name == "thread":
            return fn

        async def h(*args: Any) -> Any:
            return fn(*args)

        h.__name__ = getattr(fn, "__name__", "h")
        return h

    def middleware(self, fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
        """fn(task, finish) as a middleware of the flavor that sees each end."""
        if self.name == "thread":
            def mw(task: Any, call_next: Any) -> Any:
                f = call_next()
                fn(task, f)
                return f
            return mw

        async def amw(task: Any, call_next: Any) -> Any:
            f = await call_next()
            fn(task, f)
            return f
        return amw

    def start(self) -> None:
        w = self.worker

        def run() -> None:
            try:
                if self.name == "thread":
                    w.run(handle_signals=False)
                else:
                    asyncio.run(w.run(handle_signals=False))
            except BaseException as e:  # noqa: BLE001
                self.error.append(e)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def run_until_empty(self, timeout: float = 60) -> None:
        self.start()
        self.join(timeout)

    def stop(self, timeout: float = 60) -> None:
        self.worker.stop()
        self.join(timeout)

    def join(self, timeout: float = 60) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"

    def close(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.stop()
        self.client.close()


@pytest.fixture(params=["thread", "asyncio"])
def flavor(request: pytest.FixtureRequest, server: Server) -> Any:
    f = Flavor(request.param, server.url)
    yield f
    f.close()


def task_of(c: tenure.Client, task_id: str) -> m.Task:
    return c.get_task(task_id=task_id).task


def test_results_args_and_typed_kinds(flavor: Flavor, queue: str) -> None:
    c = flavor.client

    @tenure.kind("test.resize", queue=queue)
    @dataclasses.dataclass
    class Resize:
        image: str
        width: int

    add = c.submit(queue=queue, kind="add", args={"a": 2, "b": 3}).task.task_id
    raw = c.submit(queue=queue, kind="raw", payload=b"\x00\x01").task.task_id
    none = c.submit(queue=queue, kind="nothing").task.task_id
    typed = c.submit(args=Resize(image="cat.png", width=320)).task.task_id
    w = flavor.make([queue], concurrency=3, stop_when_empty=True)
    got: Dict[str, Any] = {}

    w.task("add")(flavor.handler(lambda t: t.args["a"] + t.args["b"]))
    w.task("raw")(flavor.handler(lambda t: t.payload[::-1]))
    w.task("nothing")(flavor.handler(lambda t: got.setdefault("nothing", t.args)))
    w.task(Resize)(flavor.handler(lambda t: got.setdefault("typed", t.args) and f"thumbs/{t.args.width}/{t.args.image}"))
    flavor.run_until_empty()
    assert not flavor.error
    assert task_of(c, add).result == b"5"
    assert task_of(c, raw).result == b"\x01\x00"
    assert task_of(c, none).state == tenure.TaskState.COMPLETED and task_of(c, none).result == b"" and got["nothing"] is None
    assert got["typed"] == Resize(image="cat.png", width=320)
    assert task_of(c, typed).result == b'"thumbs/320/cat.png"'


def test_retries_permanent_and_unknown_kinds(flavor: Flavor, queue: str) -> None:
    c = flavor.client
    policy = m.RetryPolicy(max_attempts=3, initial_backoff=0.05)
    flaky = c.submit(queue=queue, kind="flaky", payload=b"{}", retry_policy=policy).task.task_id
    bad = c.submit(queue=queue, kind="bad", payload=b"{}", retry_policy=policy).task.task_id
    unknown = c.submit(queue=queue, kind="who.knows", payload=b"{}").task.task_id
    garbled = c.submit(queue=queue, kind="flaky", payload=b"not json", retry_policy=policy).task.task_id
    w = flavor.make([queue], concurrency=2)
    ends: List[Any] = []
    w.middleware.append(flavor.middleware(lambda t, f: ends.append((t.id, t.attempt, f.outcome))))

    def flaky_h(t: tenure.Task) -> str:
        _ = t.args
        if t.attempt < 3:
            raise ConnectionError(f"upstream down (attempt {t.attempt})")
        return "ok"

    def bad_h(t: tenure.Task) -> None:
        raise tenure.Permanent("the card was declined")

    w.task("flaky")(flavor.handler(flaky_h))
    w.task("bad")(flavor.handler(bad_h))
    flavor.start()
    wait_for(lambda: task_of(c, flaky).state == tenure.TaskState.COMPLETED, what="the flaky task")
    wait_for(lambda: all(task_of(c, i).state == tenure.TaskState.FAILED for i in (bad, unknown, garbled)), what="the failures")
    flavor.stop()
    t = task_of(c, flaky)
    assert t.attempt == 3 and [e.status for e in t.executions] == [tenure.ExecutionStatus.ABORTED] * 2 + [tenure.ExecutionStatus.DONE]
    assert "ConnectionError: upstream down (attempt 1)" in t.executions[0].reason
    b = task_of(c, bad)
    assert b.attempt == 1 and b.failure_reason == "the card was declined"
    u = task_of(c, unknown)
    assert u.attempt == 1 and "no handler for kind 'who.knows'" in u.failure_reason and "flaky" in u.failure_reason
    g = task_of(c, garbled)
    assert g.attempt == 1 and "does not decode" in g.failure_reason
    outcomes = {(i, a): o for i, a, o in ends}
    assert outcomes[(flaky, 1)] == tenure.Outcome.RETRYING and outcomes[(flaky, 3)] == tenure.Outcome.COMPLETED
    assert outcomes[(bad, 1)] == tenure.Outcome.FAILED


def test_middleware_order_and_snooze(flavor: Flavor, queue: str) -> None:
    c = flavor.client
    tid = c.submit(queue=queue, kind="later", payload=b"{}").task.task_id
    w = flavor.make([queue], stop_when_empty=False)
    order: List[str] = []
    ends: List[Any] = []
    if flavor.name == "thread":
        def outer(t: Any, call_next: Any) -> Any:
            order.append("outer")
            return call_next()
    else:
        async def outer(t: Any, call_next: Any) -> Any:  # type: ignore[misc]
            order.append("outer")
            return await call_next()
    w.middleware.append(outer)
    w.middleware.append(flavor.middleware(lambda t, f: (order.append("inner"), ends.append(f))))

    def later(t: tenure.Task) -> str:
        if len(ends) == 0:
            raise tenure.Snooze(0.2, "not yet")
        return "now"

    w.task("later")(flavor.handler(later))
    flavor.start()
    wait_for(lambda: task_of(c, tid).state == tenure.TaskState.COMPLETED, what="the snoozed task")
    flavor.stop()
    t = task_of(c, tid)
    assert [e.status for e in t.executions] == [tenure.ExecutionStatus.SNOOZED, tenure.ExecutionStatus.DONE]
    assert t.executions[0].reason == "not yet" and t.executions[1].attempt == 1
    assert ends[0].outcome == tenure.Outcome.SNOOZED and ends[0].retry_at is not None
    assert ends[1].outcome == tenure.Outcome.COMPLETED and ends[1].took > 0
    assert order == ["outer", "inner", "outer", "inner"]


def test_heartbeats_keep_the_lease_and_carry_progress(flavor: Flavor, queue: str) -> None:
    """A task that runs three times its execution window completes in one
    attempt: heartbeats keep its lease; its progress shows while it runs."""
    c = flavor.client
    tid = c.submit(queue=queue, kind="long", payload=b"{}", execution_window=1).task.task_id
    w = flavor.make([queue])
    seen = threading.Event()
    progress: List[Any] = []

    def long_h(t: tenure.Task) -> str:
        t.report_progress("copying", done=1, total=4)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if t.cancelled.is_set():
                return "cancelled"
            time.sleep(0.05)
        return "done"

    if flavor.name == "thread":
        w.task("long")(long_h)
    else:
        async def along(t: tenure.Task) -> str:
            t.report_progress("copying", done=1, total=4)
            await asyncio.sleep(3)
            return "done"
        w.task("long")(along)
    flavor.start()

    def reported() -> bool:
        p = task_of(c, tid).progress
        if p is not None:
            progress.append(p)
            seen.set()
        return p is not None

    wait_for(reported, what="the progress")
    wait_for(lambda: task_of(c, tid).state == tenure.TaskState.COMPLETED, what="the long task")
    flavor.stop()
    t = task_of(c, tid)
    assert t.result == b'"done"' and len(t.executions) == 1
    assert progress[0].message == "copying" and progress[0].percent == 25
    assert [e.type for e in c.get_task_history(task_id=tid).entries].count("LeaseExtended") >= 3


def test_lost_lease_is_told_and_nothing_commits(flavor: Flavor, queue: str) -> None:
    c = flavor.client
    tid = c.submit(queue=queue, kind="slow", payload=b"{}").task.task_id
    w = flavor.make([queue])
    started = threading.Event()
    told: List[str] = []
    ends: List[Any] = []
    w.middleware.append(flavor.middleware(lambda t, f: ends.append(f)))
    if flavor.name == "thread":
        def slow(t: tenure.Task) -> str:
            started.set()
            if not t.cancelled.wait(20):
                return "never told"
            told.append(type(t.cancel_reason).__name__)
            return "a result nobody commits"
        w.task("slow")(slow)
    else:
        async def aslow(t: tenure.Task) -> str:
            started.set()
            try:
                await asyncio.sleep(20)
            except asyncio.CancelledError:
                told.append("CancelledError " + type(t.cancel_reason).__name__)
                raise
            return "never told"
        w.task("slow")(aslow)
    flavor.start()
    assert started.wait(20)
    c.kill_task(task_id=tid, reason="operator")
    wait_for(lambda: ends, what="the attempt's end")
    flavor.stop()
    assert told and told[0].endswith("LostLease")
    assert ends[0].outcome == tenure.Outcome.LOST
    t = task_of(c, tid)
    assert t.state == tenure.TaskState.DEAD and t.result == b"" and t.executions[0].committed_at is None


def test_effects_behind_the_commit_boundary_and_finalisation(flavor: Flavor, queue: str) -> None:
    """Effects run after the commit, with the fencing token; when they keep
    failing the task stays COMMITTED, and the finalisation lease runs them
    again with the committed result, without the handler."""
    c = flavor.client
    ok = c.submit(queue=queue, kind="charge", args={"cents": 5}).task.task_id
    flaky = c.submit(queue=queue, kind="charge", args={"cents": 7, "fail": True}, execution_window=1).task.task_id
    w = flavor.make([queue], concurrency=2)
    computed: List[str] = []
    applied: List[Any] = []
    tries: Dict[str, int] = {}

    def compute(t: tenure.Task) -> Dict[str, Any]:
        computed.append(t.id)
        return {"charged": t.args["cents"], "fail": t.args.get("fail", False)}

    def apply(t: tenure.Task, result: Any, token: m.FencingToken) -> None:
        tries[t.id] = tries.get(t.id, 0) + 1
        if result["fail"] and tries[t.id] <= 3:
            raise RuntimeError("payment provider down")
        applied.append((t.id, result["charged"], token.task_id, token.attempt, t.committed))

    w.task("charge")(flavor.handler(compute))
    w.effects("charge")(flavor.handler(apply))
    flavor.start()
    wait_for(lambda: all(task_of(c, i).state == tenure.TaskState.COMPLETED for i in (ok, flaky)), timeout=40, what="both charges")
    flavor.stop()
    assert sorted(computed) == sorted([ok, flaky]), "the handler ran once per task"
    assert (ok, 5, ok, 1, False) in applied
    assert (flaky, 7, flaky, 1, True) in applied, "the finalisation lease applied the committed result with the committing attempt"
    assert len(applied) == 2 and tries[flaky] == 4
    f = task_of(c, flaky)
    assert f.result == b'{"charged":7,"fail":true}' and len(f.executions) == 2 and f.executions[0].committed_at is not None


def test_graceful_shutdown_fails_what_outlives_the_grace(flavor: Flavor, queue: str) -> None:
    c = flavor.client
    quick = c.submit(queue=queue, kind="quick", payload=b"{}").task.task_id
    stuck = c.submit(queue=queue, kind="stuck", payload=b"{}").task.task_id
    w = flavor.make([queue], concurrency=2, shutdown_grace=0.5)
    began = threading.Event()
    release = threading.Event()

    def quick_h(t: tenure.Task) -> str:
        began.set()
        release.wait(10)
        return "finished in the grace"

    def stuck_h(t: tenure.Task) -> None:
        t.cancelled.wait(30)

    if flavor.name == "thread":
        w.task("quick")(quick_h)
        w.task("stuck")(stuck_h)
    else:
        async def aquick(t: tenure.Task) -> str:
            began.set()
            while not release.is_set():
                await asyncio.sleep(0.02)
            return "finished in the grace"

        async def astuck(t: tenure.Task) -> None:
            await asyncio.sleep(30)

        w.task("quick")(aquick)
        w.task("stuck")(astuck)
    flavor.start()
    assert began.wait(20)
    wait_for(lambda: task_of(c, stuck).state == tenure.TaskState.LEASED, what="both running")
    w.stop()
    time.sleep(0.1)
    release.set()
    flavor.join(30)
    assert not flavor.error
    assert task_of(c, quick).state == tenure.TaskState.COMPLETED
    s = task_of(c, stuck)
    assert s.state == tenure.TaskState.WAITING and s.executions[0].reason == "worker shutting down"


def test_report_start_and_several_queues(flavor: Flavor, queue: str) -> None:
    c = flavor.client
    a = c.submit(queue=queue, kind="k", payload=b"{}").task.task_id
    b = c.submit(queue=queue + "-2", kind="k", payload=b"{}").task.task_id
    statuses: List[Any] = []
    w = flavor.make([queue, queue + "-2"], report_start=True, stop_when_empty=True)
    w.task("k")(flavor.handler(lambda t: statuses.append(t.queue)))
    flavor.run_until_empty()
    assert sorted(statuses) == sorted([queue, queue + "-2"])
    for tid in (a, b):
        t = task_of(c, tid)
        assert t.state == tenure.TaskState.COMPLETED and t.executions[0].started_at is not None


def test_other_takes_every_other_kind(flavor: Flavor, queue: str) -> None:
    c = flavor.client
    known = c.submit(queue=queue, kind="known", payload=b"{}").task.task_id
    odd = c.submit(queue=queue, kind="odd.kind", payload=b"raw bytes").task.task_id
    bare = c.submit(queue=queue, payload=b"no kind").task.task_id
    w = flavor.make([queue], stop_when_empty=True)
    slept: List[bool] = []
    w.task("known")(flavor.handler(lambda t: "known"))

    def other(t: tenure.Task) -> bytes:
        slept.append(t.sleep(0.01))
        return t.kind.encode() + b":" + t.payload

    w.other(flavor.handler(other))
    assert w.kinds() == ["known", "(any other)"]
    flavor.run_until_empty()
    assert task_of(c, known).result == b'"known"'
    assert task_of(c, odd).result == b"odd.kind:raw bytes" and task_of(c, bare).result == b":no kind"
    assert slept == [True, True]


def test_bad_options_and_registrations(server: Server) -> None:
    c = tenure.Client(server.url)
    for bad in ({"concurrency": 0}, {"heartbeat_every": 1}, {"poll_wait": 31}, {"max_complete_batch": 0},
                {"shutdown_grace": -1}, {"namespace": "n" * 300}):
        with pytest.raises(ValueError):
            tenure.Worker(c, ["q"], **bad)
    with pytest.raises(ValueError, match="empty"):
        tenure.Worker(c, [])
    with pytest.raises(ValueError, match="twice"):
        tenure.Worker(c, ["a", "a"])
    with pytest.raises(TypeError, match="AsyncWorker"):
        tenure.Worker(tenure.AsyncClient(server.url), ["q"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Worker"):
        tenure.AsyncWorker(c, ["q"])  # type: ignore[arg-type]
    w = tenure.Worker(c, ["q"])
    w.task("k")(lambda t: None)
    with pytest.raises(ValueError, match="already"):
        w.task("k")(lambda t: None)
    with pytest.raises(ValueError, match="letters"):
        w.task("bad kind")(lambda t: None)
    with pytest.raises(ValueError, match="no handler"):
        w.effects("other")(lambda t, r, k: None)

    async def ah(t: Any) -> None:
        pass

    with pytest.raises(TypeError, match="AsyncWorker"):
        w.task("k2")(ah)
    with pytest.raises(RuntimeError, match="no handler"):
        tenure.Worker(c, ["q"]).run(handle_signals=False)


@pytest.mark.parametrize("kind", ["thread", "asyncio"])
def test_a_refused_lease_stops_the_worker(kind: str, start_server: Any, tenure_bin: str, tmp_path: Any) -> None:
    import subprocess

    tokens = str(tmp_path / "tokens.jsonl")
    subprocess.run([tenure_bin, "token", "create", "--auth-file", tokens, "--name", "x", "--role", "reader", "--namespace", "*"],
                   check=True, capture_output=True)
    s = start_server("--auth-file", tokens)
    f = Flavor(kind, s.url)
    w = f.make(["q"])
    w.task("k")(f.handler(lambda t: None))
    f.run_until_empty(30)
    assert f.error and isinstance(f.error[0], tenure.Unauthenticated)
    f.close()


def test_wait_task_answers_when_a_worker_completes_it(flavor: Flavor, queue: str) -> None:
    c = flavor.client
    tid = c.submit(queue=queue, kind="add", args={"a": 20, "b": 22}).task.task_id
    # Nobody works on it yet: the wait runs out, with the task not done.
    early = tenure.Client(flavor.url).wait_task(task_id=tid, wait=0.2)
    assert not early.done and early.task.state == tenure.TaskState.WAITING
    w = flavor.make([queue], concurrency=1)
    w.task("add")(flavor.handler(lambda t: t.args["a"] + t.args["b"]))
    waiter = tenure.Client(flavor.url)
    flavor.start()
    r = waiter.wait_task(task_id=tid, wait=30)
    while not r.done:  # a wait is 30s at most: ask again
        r = waiter.wait_task(task_id=tid, wait=30)
    assert r.task.state == tenure.TaskState.COMPLETED and r.task.result == b"42"
    # wait asks until the task has ended, and gives the task.
    assert waiter.wait(tid).result == b"42"

    async def await_it() -> m.Task:
        async with tenure.AsyncClient(flavor.url) as ac:
            return await ac.wait(tid, timeout=5)

    assert asyncio.run(await_it()).state == tenure.TaskState.COMPLETED
    other = c.submit(queue=queue + "-nobody", payload=b"x").task.task_id
    with pytest.raises(TimeoutError, match="had not ended"):
        waiter.wait(other, timeout=0.3)
    with pytest.raises(tenure.NotFound):
        waiter.wait_task(task_id="no-such-task", wait=1)
