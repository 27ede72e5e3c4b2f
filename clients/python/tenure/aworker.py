"""AsyncWorker: the Worker for asyncio, with the same promises (see
tenure.worker). Handlers are async def, run as asyncio tasks on the
worker's event loop; a handler whose lease is lost is cancelled (it sees
asyncio.CancelledError) and its task.cancelled is set. A plain def handler
runs on a thread of the worker's pool instead, told by task.cancelled.

    worker = tenure.AsyncWorker(client, queues=["emails"], concurrency=100)

    @worker.task("send_email")
    async def send_email(task: tenure.Task) -> None:
        await mailer.send(task.args["to"])

    asyncio.run(worker.run())
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import signal
import threading
import time
from collections import deque
from typing import Any, Awaitable, Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple

from . import _trace
from .aio import AsyncClient
from .errors import TenureError, lease_gone
from .messages import CompleteRequest, LeasedTask, Progress as ProgressMessage
from .worker import (
    Finish,
    LostLease,
    Op,
    Outcome,
    WorkerShutdown,
    _Attempt,
    _Call,
    _Complete,
    _Finishing,
    _Keeping,
    _Lease,
    _Pause,
    _RunEffects,
    _RunHandler,
    _Settle,
    _Sleep,
    _Stopped,
    _StopKeeper,
    _TakeAhead,
    _TakeSlots,
    _WorkerBase,
)


class _HandlerCancelled(Exception):
    """A handler cancelled because its lease was lost (or shutdown)."""


async def _adrive(flow: Any, perform: Callable[[Op], Awaitable[Any]]) -> Any:
    """Runs a flow (tenure.worker), performing its ops by awaiting them."""
    send: Any = None
    exc: Optional[BaseException] = None
    while True:
        try:
            op = flow.throw(exc) if exc is not None else flow.send(send)
        except StopIteration as s:
            return s.value
        try:
            send, exc = await perform(op), None
        except Exception as e:
            send, exc = None, e


class AsyncWorker(_WorkerBase):
    """Runs tasks on an asyncio event loop: up to concurrency handlers at
    once. Options as Worker's; client is a tenure.AsyncClient. Middleware
    are coroutine functions: await mw(task, call_next) -> Finish, awaiting
    call_next() once."""

    def _init_runtime(self) -> None:
        if not isinstance(self.client, AsyncClient):
            raise TypeError(f"client is a {type(self.client).__name__}; want a tenure.AsyncClient (a Client goes with Worker)")
        self._stopping = _Flag()
        self._hard = False
        self._changed: Optional[asyncio.Event] = None
        self._running: Dict[int, Tuple[_Attempt, "asyncio.Task[None]"]] = {}
        self._lease_call: Optional["asyncio.Task[Any]"] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._threads: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._cq: Deque[Tuple[CompleteRequest, "asyncio.Future[None]"]] = deque()
        self._cq_ready: Optional[asyncio.Event] = None
        self._cq_closed = False
        self._keepers: Set["asyncio.Task[None]"] = set()

    def stop(self) -> None:
        """Begins a graceful shutdown (see Worker.stop). Safe from any
        thread."""
        loop = self._loop
        if loop is None:
            self._stopping.set()
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._stop_now()
        else:
            loop.call_soon_threadsafe(self._stop_now)

    def _stop_now(self) -> None:
        self._stopping.set()
        if self._lease_call is not None:
            self._lease_call.cancel()
        self._wake()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def run(self, *, handle_signals: bool = True) -> None:
        """Leases and runs tasks until stop(), SIGTERM or SIGINT (with
        handle_signals, on the main thread's loop; a second signal stops
        waiting for running tasks), or with stop_when_empty until nothing is
        left; then shuts down gracefully (see Worker.run)."""
        if self._started:
            raise RuntimeError("run was already called on this AsyncWorker; make a new one")
        if not self._routes and self._other is None:
            raise RuntimeError("no handler is registered; register one with @worker.task(kind) before run")
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._cq_ready = asyncio.Event()
        removers = self._handle_signals() if handle_signals else []
        completer = asyncio.ensure_future(self._completer())
        self.log.info("worker %s started: queues %s, concurrency %d, kinds %s", self.worker_id, ",".join(self.queues),
                      self.concurrency, ", ".join(self.kinds()))
        err: Optional[BaseException] = None
        try:
            try:
                await self._lease_loop()
            except TenureError as e:
                err = e
            self._stopping.set()
            await self._drain()
        finally:
            self._cq_closed = True
            self._cq_ready.set()
            if self._hard:
                completer.cancel()
            try:
                await completer
            except asyncio.CancelledError:
                pass
            for remove in removers:
                remove()
            if self._threads is not None:
                self._threads.shutdown(wait=not self._hard)
        self.log.info("worker %s stopped", self.worker_id)
        if err is not None:
            raise err

    def _handle_signals(self) -> List[Callable[[], None]]:
        if threading.current_thread() is not threading.main_thread():
            return []
        loop = self._loop
        assert loop is not None
        out = []

        def on_signal(signum: int) -> None:
            if self._stopping.is_set():
                self.log.warning("second signal: not waiting for running tasks (their leases expire)")
                self._hard = True
                for _, t in list(self._running.values()):
                    t.cancel()
                self._wake()
                return
            self.log.info("signal %d: shutting down gracefully (a second one stops waiting for running tasks)", signum)
            self._stop_now()

        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(s, on_signal, s)
            except (NotImplementedError, RuntimeError):
                continue
            out.append(lambda s=s: loop.remove_signal_handler(s))
        return out

    async def _drain(self) -> None:
        if self._running and not self._hard:
            tasks = [t for _, t in self._running.values()]
            await asyncio.wait(tasks, timeout=self.shutdown_grace if self.shutdown_grace > 0 else None)
        if self._running and not self._hard:
            self.log.warning("shutdown grace (%gs) passed: cancelling %d running tasks and failing them", self.shutdown_grace, len(self._running))
            for a, _ in list(self._running.values()):
                self._lose(a, WorkerShutdown())
        while self._running:
            tasks = [t for _, t in self._running.values()]
            await asyncio.wait(tasks)

    async def _lease_loop(self) -> None:
        changed = self._changed
        assert changed is not None

        async def perform(op: Op) -> Any:
            if isinstance(op, _TakeSlots):
                while not self._stopping.is_set():
                    n = self._slots.take()
                    if n:
                        return n
                    changed.clear()
                    await changed.wait()
                return 0
            if isinstance(op, _Lease):
                self._lease_call = asyncio.ensure_future(self.client.lease(op.request))
                try:
                    return await self._lease_call
                except asyncio.CancelledError:
                    if self._stopping.is_set():
                        raise _Stopped() from None
                    raise
                finally:
                    self._lease_call = None
            if isinstance(op, _Settle):
                self._settle(op.n, op.tasks)
                return None
            if isinstance(op, _Pause):
                return await self._stopping.wait_for(op.seconds)
            raise AssertionError(f"unknown op {op!r}")

        await _adrive(self._lease_flow(), perform)

    def _settle(self, n: int, tasks: Sequence[LeasedTask]) -> None:
        self._slots.put(n - len(tasks))
        for lt in tasks:
            a = _Attempt(self._new_task(lt))
            a.lost_event = asyncio.Event()
            t = asyncio.ensure_future(self._run_task(a))
            self._running[id(a)] = (a, t)
        self._wake()

    def _lose(self, a: _Attempt, cause: BaseException) -> None:
        if a.lose(cause):
            if a.lost_event is not None:
                a.lost_event.set()
            if not isinstance(cause, WorkerShutdown):
                self.log.warning("task %s: lease lost: %s", a.task.id, cause)
            h = a.handler_future
            if h is not None and isinstance(h, asyncio.Task):
                h.cancel()

    async def _run_task(self, a: _Attempt) -> None:
        try:
            self._start_keeper(a)
            span = _trace.AttemptSpan()
            span.start(self.tracer_provider, a.task, self.worker_id)
            f: Optional[Finish] = None
            try:
                f = await self._through_middleware(a)
            finally:
                await self._stop_keeper(a)
                span.end(f or Finish(Outcome.UNREPORTED))
        except asyncio.CancelledError:
            self.log.warning("task %s: abandoned at a hard stop; its lease will expire", a.task.id)
        except BaseException:
            self.log.exception("task %s: internal error running the attempt; its lease will expire", a.task.id)
        finally:
            self._slots.release(a.finishing)
            self._running.pop(id(a), None)
            self._wake()

    async def _through_middleware(self, a: _Attempt) -> Finish:
        async def attempt() -> Finish:
            return await _adrive(self._flow(a), lambda op: self._perform(a, op))  # type: ignore[no-any-return]

        async def at(i: int) -> Finish:
            if i == len(self.middleware):
                return await attempt()
            called: List[Finish] = []

            async def call_next() -> Finish:
                if called:
                    raise RuntimeError("middleware called call_next twice")
                called.append(await at(i + 1))
                return called[0]

            f = await self.middleware[i](a.task, call_next)
            if not called:
                raise RuntimeError(f"middleware {self.middleware[i]!r} did not call call_next")
            return f if isinstance(f, Finish) else called[0]

        return await at(0)

    def _in_thread(self, fn: Callable[..., Any], *args: Any) -> "asyncio.Future[Any]":
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="tenure-task")
        assert self._loop is not None
        return self._loop.run_in_executor(self._threads, fn, *args)

    async def _call_user(self, a: _Attempt, fn: Callable[..., Any], *args: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            h = asyncio.ensure_future(fn(*args))
        else:
            h = self._in_thread(fn, *args)
        a.handler_future = h
        if a.cause is not None and isinstance(h, asyncio.Task):
            h.cancel()
        try:
            return await h
        except asyncio.CancelledError:
            if h.cancelled() and a.cause is not None:
                raise _HandlerCancelled(str(a.cause)) from None
            raise
        finally:
            a.handler_future = None

    async def _perform(self, a: _Attempt, op: Op) -> Any:
        t = a.task
        if isinstance(op, _RunHandler):
            return await self._call_user(a, op.route.handler, t)
        if isinstance(op, _Call):
            return await getattr(self.client, op.method)(*op.args, **op.kwargs)
        if isinstance(op, _StopKeeper):
            await self._stop_keeper(a)
            return None
        if isinstance(op, _Finishing):
            a.finishing = True
            self._slots.finish()
            return None
        if isinstance(op, _Complete):
            await self._complete_item(CompleteRequest(task_id=t.id, lease_id=t.lease_id, result=op.result))
            return None
        if isinstance(op, _RunEffects):
            await self._call_user(a, op.route.effects, t, op.result, op.token)  # type: ignore[arg-type]
            return None
        if isinstance(op, _Sleep):
            if a.task.cancelled.is_set():
                return False
            try:
                await asyncio.wait_for(a.lost_event.wait(), op.seconds)
                return False
            except asyncio.TimeoutError:
                return True
        raise AssertionError(f"unknown op {op!r}")

    # Lease keeping -----------------------------------------------------------

    def _start_keeper(self, a: _Attempt) -> None:
        k = _Keeping(a.task.leased, a.received, a.received_wall, self.heartbeat_every)
        a.keeping = k
        wake = asyncio.Event()
        loop = self._loop
        assert loop is not None

        def report(p: ProgressMessage) -> None:
            def on_loop() -> None:
                if a.keeping is k and k.report(p, time.monotonic()):
                    wake.set()
            loop.call_soon_threadsafe(on_loop)

        a.task._report = report
        a.keeper = asyncio.ensure_future(self._keep(a, k, wake))

    async def _stop_keeper(self, a: _Attempt) -> None:
        kt = a.keeper
        if kt is None:
            return
        a.keeper = None
        a.keeping = None
        kt.cancel()
        try:
            await kt
        except asyncio.CancelledError:
            pass

    async def _keep(self, a: _Attempt, k: _Keeping, wake: asyncio.Event) -> None:
        t = a.task
        while True:
            now = time.monotonic()
            if now >= k.deadline:
                self._lose(a, LostLease(f"no successful heartbeat before the lease's expiry (less a {k.safety:g}s safety margin)"))
                return
            due = k.due()
            if due > now:
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), due - now)
                except asyncio.TimeoutError:
                    pass
                continue
            rep = k.sending(now)
            sent_wall = time.time()
            try:
                res = await asyncio.wait_for(self.client.heartbeat(task_id=t.id, lease_id=t.lease_id, progress=rep),
                                             max(k.deadline - now, 0.001))
            except asyncio.TimeoutError:
                k.failed(time.monotonic())
                continue
            except TenureError as e:
                if lease_gone(e):
                    self._lose(a, LostLease(str(e)))
                    return
                k.failed(time.monotonic())
                self.log.warning("task %s: heartbeat failed; retrying: %s", t.id, e)
                continue
            k.answered(now, res.lease_expiry, sent_wall, rep, time.monotonic())

    # Completions ------------------------------------------------------------

    async def _complete_item(self, item: CompleteRequest) -> None:
        if self.max_complete_batch == 1:
            await self.client.complete(item)
            return
        assert self._loop is not None and self._cq_ready is not None
        fut: "asyncio.Future[None]" = self._loop.create_future()
        self._cq.append((item, fut))
        self._cq_ready.set()
        await fut

    async def _completer(self) -> None:
        ready = self._cq_ready
        assert ready is not None
        while True:
            if not self._cq:
                if self._cq_closed:
                    return
                ready.clear()
                await ready.wait()
                continue
            batch = [self._cq.popleft() for _ in range(min(len(self._cq), self.max_complete_batch))]

            async def perform(op: Op) -> Any:
                if isinstance(op, _Call):
                    return await getattr(self.client, op.method)(*op.args, **op.kwargs)
                if isinstance(op, _TakeAhead):
                    return self._slots.take_ahead(op.completing)
                if isinstance(op, _Settle):
                    self._settle(op.n, op.tasks)
                    return None
                raise AssertionError(f"unknown op {op!r}")

            errs = await _adrive(self._completion_flow([it for it, _ in batch]), perform)
            for (_, fut), e in zip(batch, errs):
                if fut.done():
                    continue
                if e is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(e)


class _Flag:
    """A stop flag that both the loop and other threads can set, and that
    the loop can wait on with a timeout."""

    def __init__(self) -> None:
        self._set = False
        self._waiters: List["asyncio.Future[None]"] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._waiters.clear()

    async def wait_for(self, seconds: float) -> bool:
        """Waits seconds or until set: True if set."""
        if self._set:
            return True
        fut: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), seconds)
        except asyncio.TimeoutError:
            pass
        return self._set

