"""Worker: runs tenure tasks on threads, with the Go SDK's promises
(sdk/worker): it leases the tasks of one or more queues, routes each by
its kind to the handler registered for it, runs up to concurrency at once,
keeps their leases with heartbeats, and reports the outcome, following the
commit boundary (docs/design/state-machine.md).

    worker = tenure.Worker(client, queues=["emails"], concurrency=8)

    @worker.task("send_email")
    def send_email(task: tenure.Task) -> None:
        mailer.send(task.args["to"])     # the payload's JSON, as Python objects

    worker.run()   # until SIGTERM or SIGINT

What it promises (AsyncWorker, for async def handlers, the same):

- A handler whose lease is lost is told: task.cancelled (a
  threading.Event) is set when a heartbeat is refused (the lease expired,
  the task was killed, another attempt committed) or the lease's expiry,
  less a safety margin, passed without a successful heartbeat. Its result
  is then discarded: nothing is committed, no effect runs, the server
  retries the task. A handler must return soon after task.cancelled is
  set (task.sleep(seconds) waits and returns False once it is).
- Without effects, a handler's result (its return value: bytes as they
  are, None as no result, anything else as JSON) is committed and the
  task completed in one step. Completions are coalesced: one CompleteBatch
  call out at a time, carrying the completions that arrived meanwhile and
  the worker's next lease.
- With effects (@worker.effects(kind)), the result is first committed;
  only if that commit wins do the effects run, with the fencing token;
  then the task is completed. A commit refused (LeaseLost,
  AlreadyCommitted) means another attempt owns the task: the effects do
  not run. So across all attempts and workers, the effects run for one
  result only. They may run more than once for it (this worker crashed,
  or they kept failing, before Complete: a finalisation lease runs them
  again with the committed result, without the handler), so they must be
  idempotent, keyed by token.task_id.
- An exception fails the attempt: the server retries the task per its
  retry policy, or fails it for good if it is a Permanent. A payload that
  does not decode fails the task for good. Raising Snooze(delay) runs the
  task again later without using an attempt.
- Middleware (middleware=[...]) runs around each attempt and hears how it
  ended: Finish(outcome, error, retry_at, took), the server's answer to
  the report, not a guess from the handler.
- Graceful shutdown: on SIGTERM or SIGINT (or stop()), the worker leases
  no more, lets running tasks finish for up to shutdown_grace seconds,
  then sets their task.cancelled and fails each whose handler was still
  running with the reason "worker shutting down" (it is retried).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import heapq
import inspect
import itertools
import json
import logging
import os
import random
import secrets
import signal
import socket
import threading
import time
from collections import deque
from datetime import datetime, timedelta
from typing import Any, Callable, Deque, Dict, Generator, List, Optional, Sequence, Tuple, TypeVar, Union

from . import _codec, _trace
from ._base import check_kind, kind_of
from .client import Client, Interrupted
from .errors import (
    InvalidArgument,
    PermissionDenied,
    TenureError,
    TLSRefused,
    Unauthenticated,
    WrongState,
    from_complete_result,
    lease_gone,
)
from .messages import CompleteRequest, FencingToken, LeasedTask, LeaseRequest, Progress as ProgressMessage, TaskState

log = logging.getLogger("tenure.worker")

DEFAULT_NAMESPACE = "default"
MAX_CONCURRENCY = 10000
DEFAULT_HEARTBEAT_EVERY = 1 / 3
DEFAULT_POLL_WAIT = 10.0
MAX_POLL_WAIT = 30.0
DEFAULT_SHUTDOWN_GRACE = 30.0
MAX_ID_BYTES = 256
MAX_QUEUES = 32
DEFAULT_MAX_COMPLETE_BATCH = 64
MAX_COMPLETE_BATCH = 1000
# The most tasks one Lease call asks for (the server allows 1000).
MAX_LEASE_TASKS = 100
MAX_REASON_BYTES = 4 << 10
MAX_PROGRESS_BYTES = 256
# Effects are tried this often while the worker holds the lease, before
# the task is left to a finalisation lease.
EFFECTS_TRIES = 3
# The least time between two heartbeats that a change of progress makes
# early: a handler may report as often as it likes.
PROGRESS_EVERY = 1.0
# Waits between retries of a failed Lease, an early empty answer, failed effects.
RETRY_INITIAL, RETRY_MAX = 0.1, 5.0


def _retry_wait(attempt: int) -> float:
    d = min(RETRY_INITIAL * (2 ** min(attempt, 30)), RETRY_MAX)
    return d / 2 + random.random() * d / 2


# What handlers raise and middleware hears --------------------------------


class Permanent(Exception):
    """Raised by a handler (or with `raise Permanent(...) from e`), fails
    the task for good: no retries. Subclass it for errors of your own that
    no retry can fix."""


class PayloadError(Permanent):
    """A task's payload does not decode as its handler's arguments: the task
    fails for good (no retry would help)."""


class Snooze(Exception):
    """Raised by a handler, ends the attempt without using it up: the task
    runs again after delay (seconds, or a timedelta), and the next attempt
    has the same number, with the same retry budget and backoff. For work
    that cannot run yet: a rate limit, an upstream not ready, a poll that
    found nothing. The server bounds snoozes (by default 1000 per task, each
    at most 24h, and not past the task's deadline); a snooze it refuses
    fails the attempt instead."""

    def __init__(self, delay: Union[float, timedelta] = 0.0, reason: str = ""):
        self.delay = _codec.as_timedelta(delay)
        self.reason = reason
        super().__init__(f"snoozed for {self.delay.total_seconds():g}s" + (f": {reason}" if reason else ""))


class WorkerShutdown(Exception):
    """Why a task whose handler ran past the shutdown grace is failed."""

    def __str__(self) -> str:
        return "worker shutting down"


class LostLease(Exception):
    """Why a handler was told its lease was lost (task.cancel_reason)."""


class Outcome(str, enum.Enum):
    """How one leased attempt ended for this worker."""

    COMPLETED = "completed"
    """The task completed (with this attempt's result, or on a finalisation
    lease with the committed one)."""
    RETRYING = "retrying"
    """The attempt failed and the server scheduled a retry (retry_at)."""
    FAILED = "failed"
    """The task failed for good: Permanent, or its last attempt."""
    LOST = "lost"
    """The lease was lost before this worker's report landed; nothing of
    this attempt counts."""
    UNREPORTED = "unreported"
    """The report to the server failed (or the effects did): the lease
    expires and the server decides what follows."""
    SNOOZED = "snoozed"
    """The handler snoozed the task: it runs again at retry_at, and this
    attempt did not count."""


@dataclasses.dataclass
class Finish:
    """The end of one leased attempt, as middleware hears it."""

    outcome: Outcome
    error: Optional[BaseException] = None
    """Why the attempt did not complete: the handler's exception for
    RETRYING and FAILED, the refusal or failed call for LOST and
    UNREPORTED. None for COMPLETED."""
    retry_at: Optional[datetime] = None
    """When the retry may be leased (RETRYING), or the snoozed task runs
    again (SNOOZED)."""
    took: float = 0.0
    """Seconds from the lease's arrival to the end of the attempt's report."""


# The task a handler gets ---------------------------------------------------


class Task:
    """One leased attempt of a task, as its handler sees it: the leased
    task's fields (id, kind, queue, namespace, attempt, lease_id, payload,
    ...), its arguments decoded from the JSON payload (args), whether the
    lease was lost (cancelled), and progress reports.

    The API's Task message, which get_task answers, is tenure.messages.Task.
    """

    def __init__(self, leased: LeasedTask, args_type: Optional[Callable[..., Any]] = None):
        self.leased = leased
        """The LeasedTask message, as Lease answered it."""
        self.cancelled = threading.Event()
        """Set when the lease is lost (or the worker shuts down past its
        grace): stop, and return soon; the result is discarded."""
        self.cancel_reason: Optional[BaseException] = None
        """Why cancelled was set: a LostLease or a WorkerShutdown."""
        self._args_type = args_type
        self._args: Any = _UNSET
        self._report: Optional[Callable[[ProgressMessage], None]] = None

    @property
    def id(self) -> str:
        return self.leased.task_id

    @property
    def kind(self) -> str:
        return self.leased.kind

    @property
    def queue(self) -> str:
        return self.leased.queue

    @property
    def namespace(self) -> str:
        return self.leased.namespace

    @property
    def attempt(self) -> int:
        """This lease's attempt number, from 1."""
        return self.leased.attempt

    @property
    def lease_id(self) -> str:
        return self.leased.lease_id

    @property
    def payload(self) -> bytes:
        """The payload as it was submitted."""
        return self.leased.payload

    @property
    def lease_expiry(self) -> Optional[datetime]:
        """The expiry at lease time (heartbeats move the real one)."""
        return self.leased.lease_expiry

    @property
    def execution_window(self) -> Optional[timedelta]:
        return self.leased.execution_window

    @property
    def deadline(self) -> Optional[datetime]:
        return self.leased.deadline

    @property
    def committed(self) -> bool:
        """A finalisation lease: an earlier attempt committed
        committed_result; only the effects run."""
        return self.leased.committed

    @property
    def committed_result(self) -> bytes:
        return self.leased.committed_result

    @property
    def trace_context(self) -> Any:
        return self.leased.trace_context

    @property
    def args(self) -> Any:
        """The payload decoded from JSON (None for an empty one); for a
        handler registered with a type, an instance of it. A payload that
        does not decode raises PayloadError, which fails the task for good."""
        if self._args is _UNSET:
            try:
                self._args = _codec.decode_args(self.payload, self._args_type)
            except (ValueError, TypeError) as e:
                what = getattr(self._args_type, "__name__", "JSON")
                raise PayloadError(f"the payload of task {self.id} (kind {self.kind!r}) does not decode as {what}: {e}") from None
        return self._args

    def sleep(self, seconds: float) -> bool:
        """Waits seconds, or until the lease is lost: True if it waited them
        all, False if cancelled was set."""
        return not self.cancelled.wait(seconds)

    def report_progress(self, message: str = "", done: int = 0, total: int = 0) -> None:
        """Reports the attempt's progress: a short message (at most 256
        bytes), and done of total (shown as a percentage; total 0 for none).
        It returns at once: the report goes with the lease's next heartbeat,
        which a change brings forward (at most one a second), so the task
        shows it soon (get_task, `tenure task get`, the dashboard)."""
        if len(message.encode("utf-8")) > MAX_PROGRESS_BYTES:
            raise ValueError(f"report_progress: the message is {len(message.encode())} bytes; the limit is {MAX_PROGRESS_BYTES}")
        if total < 0 or done < 0 or done > total:
            raise ValueError(f"report_progress: done {done} of total {total}: want 0 <= done <= total (total 0 for no share)")
        p = ProgressMessage(message=message)
        if total > 0:
            p.percent = int(done * 100 / total)
        if self._report is not None:
            self._report(p)

    def __repr__(self) -> str:
        return f"<tenure.Task {self.id} kind={self.kind!r} attempt={self.attempt}>"


_UNSET = object()

H = TypeVar("H", bound=Callable[..., Any])


@dataclasses.dataclass
class _Route:
    handler: Callable[..., Any]
    args_type: Optional[Callable[..., Any]]
    effects: Optional[Callable[..., Any]] = None


def encode_result(v: Any) -> bytes:
    """A handler's return value as the task's result: bytes as they are,
    None as none, anything else as JSON."""
    if v is None:
        return b""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    return _codec.encode_args(v)


def decode_result(b: bytes) -> Any:
    """A committed result for effects: its JSON as Python objects, None for
    an empty one, the bytes for one that is not JSON."""
    if not b:
        return None
    try:
        return json.loads(b)
    except ValueError:
        return b


def _cut(s: str) -> str:
    b = s.encode("utf-8")
    if len(b) <= MAX_REASON_BYTES:
        return s
    return b[:MAX_REASON_BYTES].decode("utf-8", "ignore")


def _reason(e: BaseException) -> str:
    s = str(e) or type(e).__name__
    if not isinstance(e, (Permanent, TenureError, Snooze, WorkerShutdown)):
        s = f"{type(e).__name__}: {s}"
    return _cut(s)


def _rejected(e: BaseException) -> bool:
    """Whether a failed Lease can never succeed as it is (a bad namespace or
    queue, an API the server lacks, no permission, TLS that fails for
    good): retrying it would only spin."""
    return isinstance(e, (InvalidArgument, Unauthenticated, PermissionDenied, TLSRefused)) or (
        isinstance(e, TenureError) and e.code == "unimplemented")


def _default_worker_id() -> str:
    host = socket.gethostname() or "worker"
    wid = f"{host}-{os.getpid()}-{secrets.token_hex(4)}"
    return wid[-MAX_ID_BYTES:]


# Slots ----------------------------------------------------------------------


class _Slots:
    """The worker's task slots, for its lease loop and for the leases its
    completion calls carry (the Go worker's slots, sdk/worker/slots.go).

    assigned counts the slots held: by tasks handed over to run (running,
    or waiting for a thread that is about to free) and by lease calls out.
    A lease loop leases for the free slots at once when no task is in its
    final report (finishing), or when a full call's worth is free;
    otherwise it waits until the tasks finishing at that moment have given
    their slots back, and leases for them all in one call. A completion call
    carries a lease for the free slots and for those of the tasks it
    completes (take_ahead): they end as soon as it answers, so the tasks it
    leases wait at most for them."""

    def __init__(self, size: int):
        self.size = size
        self.target = min(size, MAX_LEASE_TASKS)
        self.assigned = 0
        self.finishing = 0
        self.returned = 0
        self._until: Optional[int] = None

    def free(self) -> int:
        return max(self.size - self.assigned, 0)

    def take(self) -> int:
        """The slots to lease for now (taken), or 0: wait for a change."""
        free = self.free()
        if free == 0:
            return 0
        ready = self.finishing == 0 or free >= self.target
        if not ready:
            if self._until is None:
                # Wait for the tasks finishing now, not for those that start
                # finishing meanwhile: the wait stays bounded by the reports
                # under way.
                self._until = self.returned + self.finishing
            ready = self.returned >= self._until
        if not ready:
            return 0
        self._until = None
        n = min(free, MAX_LEASE_TASKS)
        self.assigned += n
        return n

    def put(self, n: int) -> None:
        """Gives back n taken slots that a lease call did not fill."""
        self.assigned -= n

    def finish(self) -> None:
        """A running task entered its final report."""
        self.finishing += 1

    def release(self, finishing: bool) -> None:
        """A task ended (finishing: it had entered its final report)."""
        self.assigned -= 1
        self.returned += 1
        if finishing:
            self.finishing -= 1

    def take_ahead(self, completing: int) -> int:
        """The slots for the lease of a completion call that completes
        `completing` tasks: the free ones and theirs, at most a call's worth."""
        n = min(self.free() + completing, MAX_LEASE_TASKS)
        self.assigned += n
        return n

    def running(self) -> int:
        return min(self.assigned, self.size)


# Lease keeping (the timing, apart from the I/O) ---------------------------


def _margin(window: float) -> float:
    """How long before the known expiry a lease is given up: a tenth of the
    window, at most 2s, so network delay cannot make the worker act on a
    lease the server already expired."""
    return min(window / 10, 2.0)


class _Keeping:
    """When one lease's next heartbeat is due and when it counts as lost, on
    this process's monotonic clock: from the lease's arrival, its remaining
    time (by the wall-clock expiry, at most one window) less the margin;
    after a heartbeat sent at s, min(s + window, the new expiry) less the
    margin, because the server extends from its own now, which is after s."""

    def __init__(self, lt: LeasedTask, received_mono: float, received_wall: float, every_fraction: float):
        left = (lt.lease_expiry.timestamp() - received_wall) if lt.lease_expiry is not None else 0.0
        window = lt.execution_window.total_seconds() if lt.execution_window else left
        if window <= 0:
            window = max(left, 0.1)
        self.window = window
        self.every = max(window * every_fraction, 0.001)
        self.safety = _margin(window)
        self.beat_at = received_mono + self.every
        self.deadline = received_mono + min(left, window) - self.safety
        self.inflight = False
        self.pending: Optional[ProgressMessage] = None
        self.sent: Optional[ProgressMessage] = None
        self.last_beat: Optional[float] = None

    def due(self) -> float:
        """The next event: a heartbeat due, or the deadline (only the
        deadline while a heartbeat is out)."""
        return self.deadline if self.inflight else min(self.beat_at, self.deadline)

    def sending(self, now: float) -> Optional[ProgressMessage]:
        """A heartbeat goes out now, carrying the progress it returns."""
        self.inflight = True
        self.last_beat = now
        return self.pending

    def answered(self, sent_at: float, expiry: Optional[datetime], sent_wall: float, rep: Optional[ProgressMessage], now: float) -> None:
        """The heartbeat sent at sent_at extended the lease to expiry."""
        self.inflight = False
        until = (expiry.timestamp() - sent_wall) if expiry is not None else self.window
        self.deadline = sent_at + min(self.window, until) - self.safety
        self.beat_at = now + self.every
        if rep is not None:
            self.sent = rep
            if self.pending is rep:
                self.pending = None
        if self.pending is not None:
            self.beat_at = min(self.beat_at, sent_at + PROGRESS_EVERY)

    def failed(self, now: float) -> None:
        """The heartbeat failed (not refused): try again soon; the deadline
        ends the lease if this goes on."""
        self.inflight = False
        self.beat_at = now + self.every / 2

    def report(self, p: ProgressMessage, now: float) -> bool:
        """p becomes the pending report; the next heartbeat comes forward to
        carry it (at most one a second). True if the next event moved."""
        if self.pending is not None and self.pending == p or self.pending is None and self.sent == p:
            return False
        self.pending = p
        if self.inflight:
            return False
        at = now if self.last_beat is None else max(now, self.last_beat + PROGRESS_EVERY)
        if at < self.beat_at:
            self.beat_at = at
            return True
        return False


# The attempt, apart from its I/O --------------------------------------------
#
# flow() is one attempt's logic, written once for both workers: a generator
# that yields what it needs done (an op) and is sent the answer, or thrown
# the exception. The thread worker performs the ops by blocking calls, the
# asyncio worker by awaiting them.


class _Call:
    __slots__ = ("method", "args", "kwargs")

    def __init__(self, method: str, *args: Any, **kwargs: Any):
        self.method, self.args, self.kwargs = method, args, kwargs


class _RunHandler:
    __slots__ = ("route",)

    def __init__(self, route: _Route):
        self.route = route


class _RunEffects:
    __slots__ = ("route", "result", "token")

    def __init__(self, route: _Route, result: Any, token: FencingToken):
        self.route, self.result, self.token = route, result, token


class _StopKeeper:
    __slots__ = ()


class _Sleep:
    __slots__ = ("seconds",)

    def __init__(self, seconds: float):
        self.seconds = seconds


class _Complete:
    __slots__ = ("result",)

    def __init__(self, result: bytes):
        self.result = result


class _Finishing:
    __slots__ = ()


class _TakeAhead:
    __slots__ = ("completing",)

    def __init__(self, completing: int):
        self.completing = completing


class _Settle:
    __slots__ = ("n", "tasks")

    def __init__(self, n: int, tasks: Sequence[LeasedTask]):
        self.n, self.tasks = n, tasks


class _TakeSlots:
    """Waits until it is time to lease (see _Slots.take) and answers the
    slots taken, or 0 once the worker is stopping."""

    __slots__ = ()


class _Lease:
    """A Lease call that stopping the worker interrupts (raising _Stopped)."""

    __slots__ = ("request",)

    def __init__(self, request: LeaseRequest):
        self.request = request


class _Pause:
    """Waits seconds, or until the worker is stopping: answers whether it is."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float):
        self.seconds = seconds


class _Stopped(Exception):
    """A lease call interrupted because the worker is stopping."""


TAKE_SLOTS = _TakeSlots()


STOP_KEEPER, FINISHING = _StopKeeper(), _Finishing()

Op = Union[_Call, _RunHandler, _RunEffects, _StopKeeper, _Sleep, _Complete, _Finishing, _TakeAhead, _Settle, _TakeSlots, _Lease, _Pause]
Flow = Generator[Op, Any, Finish]


class _Attempt:
    """One leased attempt: its task, when it arrived, its keeping, and why
    its lease ended early (cause), if it did."""

    __slots__ = ("task", "received", "received_wall", "finishing", "cause", "keeping", "keeper", "handler_future", "lost_event")

    def __init__(self, task: Task):
        self.task = task
        self.received = time.monotonic()
        self.received_wall = time.time()
        self.finishing = False
        self.cause: Optional[BaseException] = None
        self.keeping: Optional[_Keeping] = None
        self.keeper: Any = None
        self.handler_future: Any = None
        self.lost_event: Any = None

    def lose(self, cause: BaseException) -> bool:
        """Ends the attempt's lease early: the handler is told. False if it
        had ended already."""
        if self.cause is not None:
            return False
        self.cause = cause
        self.task.cancel_reason = cause
        self.task.cancelled.set()
        return True


class _WorkerBase:
    """What Worker and AsyncWorker share: options, registration, the
    attempt's logic."""

    def __init__(self, client: Any, queues: Sequence[str], *, namespace: str = DEFAULT_NAMESPACE,
                 worker_id: Optional[str] = None, concurrency: int = 1, heartbeat_every: float = DEFAULT_HEARTBEAT_EVERY,
                 poll_wait: float = DEFAULT_POLL_WAIT, report_start: bool = False,
                 max_complete_batch: int = DEFAULT_MAX_COMPLETE_BATCH, shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
                 stop_when_empty: bool = False, middleware: Sequence[Callable[..., Any]] = (),
                 logger: Optional[logging.Logger] = None, tracer_provider: Any = None):
        if isinstance(queues, str):
            queues = [queues]
        queues = list(queues)
        namespace = namespace or DEFAULT_NAMESPACE
        worker_id = worker_id or _default_worker_id()
        if len(namespace.encode()) > MAX_ID_BYTES:
            raise ValueError(f"namespace is {len(namespace.encode())} bytes; the limit is {MAX_ID_BYTES}")
        if len(worker_id.encode()) > MAX_ID_BYTES:
            raise ValueError(f"worker_id is {len(worker_id.encode())} bytes; the limit is {MAX_ID_BYTES}")
        if not queues:
            raise ValueError("queues is empty; name the queue (or queues) to lease from")
        if len(queues) > MAX_QUEUES:
            raise ValueError(f"queues names {len(queues)} queues; the limit is {MAX_QUEUES}")
        for i, q in enumerate(queues):
            if not q:
                raise ValueError(f"queues[{i}] is empty")
            if len(q.encode()) > MAX_ID_BYTES:
                raise ValueError(f"queues[{i}] is {len(q.encode())} bytes; the limit is {MAX_ID_BYTES}")
            if q in queues[:i]:
                raise ValueError(f"queues names {q!r} twice")
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency {concurrency} is outside 1..{MAX_CONCURRENCY}")
        if not 0 < heartbeat_every < 1:
            raise ValueError(f"heartbeat_every {heartbeat_every} must be a fraction of the execution window strictly between 0 and 1 (e.g. 0.33)")
        if not 0 < poll_wait <= MAX_POLL_WAIT:
            raise ValueError(f"poll_wait {poll_wait} is outside (0, {MAX_POLL_WAIT}] seconds")
        if not 1 <= max_complete_batch <= MAX_COMPLETE_BATCH:
            raise ValueError(f"max_complete_batch {max_complete_batch} is outside 1..{MAX_COMPLETE_BATCH}")
        if shutdown_grace < 0:
            raise ValueError(f"shutdown_grace {shutdown_grace} is negative; use 0 to cancel running tasks at once")
        for i, mw in enumerate(middleware):
            if not callable(mw):
                raise ValueError(f"middleware[{i}] is not callable")
        self.client = client
        self.queues = queues
        self.namespace = namespace
        self.worker_id = worker_id
        self.concurrency = concurrency
        self.heartbeat_every = heartbeat_every
        self.poll_wait = poll_wait
        self.report_start = report_start
        self.max_complete_batch = max_complete_batch
        self.shutdown_grace = shutdown_grace
        self.stop_when_empty = stop_when_empty
        self.middleware = list(middleware)
        self.tracer_provider = tracer_provider
        self.log = logger or log
        self._routes: Dict[str, _Route] = {}
        self._other: Optional[_Route] = None
        self._started = False
        self._slots = _Slots(concurrency)
        self._paused: Any = None
        self._single = False  # the server has no CompleteBatch: one Complete per task
        self._refused = False  # the server refused a carried lease: carry none
        self._init_runtime()

    def _init_runtime(self) -> None:
        """Sets up what the worker's kind needs before run (and stop)."""

    # Registration ----------------------------------------------------------

    def task(self, kind: Union[str, type], *, args: Optional[Callable[..., Any]] = None) -> Callable[[H], H]:
        """Registers the decorated function as the handler of a kind of task:

            @worker.task("send_email")
            def send_email(task: tenure.Task) -> None: ...

        kind is a kind's name, or a type made with tenure.kind (then task.args
        is an instance of it). args, with a name, is the type task.args is
        made into (cls(**payload)). The handler's return value is the task's
        result. Register every handler before run."""

        def register(fn: H) -> H:
            name, typ = self._kind(kind, args, "task")
            self._check_handler(fn)
            if name in self._routes:
                raise ValueError(f"kind {name!r} has a handler already")
            self._routes[name] = _Route(fn, typ)
            return fn

        return register

    def effects(self, kind: Union[str, type]) -> Callable[[H], H]:
        """Registers the decorated function as the effects of a kind, behind
        the commit boundary: effects(task, result, token) runs only once the
        handler's result committed, with the result (its JSON as Python
        objects) and the FencingToken; then the task is completed. They
        must be idempotent, keyed by token.task_id: after a crash they run
        again on a finalisation lease, without the handler. Register the
        kind's handler first."""

        def register(fn: H) -> H:
            name, _ = self._kind(kind, None, "effects")
            self._check_handler(fn)
            r = self._routes.get(name)
            if r is None:
                raise ValueError(f"effects for kind {name!r}, which has no handler: register the handler (@worker.task) first")
            if r.effects is not None:
                raise ValueError(f"kind {name!r} has effects already")
            r.effects = fn
            return fn

        return register

    def other(self, fn: H) -> H:
        """Registers the decorated function for every kind no other handler
        is registered for (task.payload as it is). Without it, a task of a
        kind the worker does not know fails for good, naming the kind."""
        if self._started:
            raise RuntimeError("register every handler before run")
        if self._other is not None:
            raise ValueError("other: registered twice")
        self._check_handler(fn)
        self._other = _Route(fn, None)
        return fn

    def _kind(self, kind: Union[str, type], args: Optional[Callable[..., Any]], what: str) -> Tuple[str, Optional[Callable[..., Any]]]:
        if self._started:
            raise RuntimeError(f"{what} registered after run: register every handler before run")
        if isinstance(kind, str):
            if kind != "":
                check_kind(kind)
            return kind, args
        info = kind_of(kind)
        if info is None:
            raise TypeError(f"{kind!r} is neither a kind's name nor a type made with tenure.kind")
        return info.kind, args or kind

    def _check_handler(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")

    def _route(self, kind: str) -> Optional[_Route]:
        return self._routes.get(kind, self._other)

    def kinds(self) -> List[str]:
        """The kinds the worker handles, "(none)" for tasks without one."""
        out = sorted(k or "(none)" for k in self._routes)
        if self._other is not None:
            out.append("(any other)")
        return out

    def _unknown_kind(self, kind: str) -> Permanent:
        what = f"kind {kind!r}" if kind else 'tasks without a kind (register one with @worker.task(""))'
        return Permanent(f"no handler for {what} on worker {self.worker_id}, which handles {', '.join(self.kinds())}; "
                         "register one, or retry the task (tenure task retry) once a worker that handles it runs")

    def _lease_request(self, n: int, wait: float) -> LeaseRequest:
        r = LeaseRequest(worker_id=self.worker_id, namespace=self.namespace, max_tasks=n)
        if wait > 0:
            r.wait = timedelta(seconds=wait)
        if len(self.queues) == 1:
            r.queue = self.queues[0]
        else:
            r.queues = list(self.queues)
        return r

    def _note_pause(self, ans: Any) -> None:
        """Logs that the queue was paused, or resumed, when that changes."""
        now = ans.paused if not ans.tasks else None
        if now is not None and self._paused is None:
            self.log.info("the queue is paused: leasing nothing until it is resumed (paused by %s: %s)", now.requested_by, now.reason)
        elif now is None and self._paused is not None:
            self.log.info("the queue was resumed: leasing again")
        self._paused = now

    def _new_task(self, lt: LeasedTask) -> Task:
        r = self._route(lt.kind)
        return Task(lt, r.args_type if r is not None else None)

    # The attempt's logic ---------------------------------------------------

    def _flow(self, a: _Attempt) -> Flow:
        t = a.task
        r = self._route(t.kind)
        if t.committed:
            return (yield from self._finalise(a, r))
        if r is None:
            yield STOP_KEEPER
            return (yield from self._fail(a, self._unknown_kind(t.kind)))
        if self.report_start:
            try:
                yield _Call("start", task_id=t.id, lease_id=t.lease_id)
            except TenureError as e:
                if lease_gone(e):
                    self.log.warning("task %s: lease lost before the handler started; skipping the task: %s", t.id, e)
                    return self._finished(a, Outcome.LOST, e)
                self.log.debug("task %s: reporting the start failed; running the task anyway: %s", t.id, e)
        herr: Optional[BaseException] = None
        result: Any = None
        try:
            result = yield _RunHandler(r)
        except Exception as e:
            herr = e
        if a.cause is not None:
            yield STOP_KEEPER
            if not isinstance(a.cause, WorkerShutdown):
                self.log.warning("task %s: lease lost while the handler ran: result discarded, nothing committed (%s)", t.id, a.cause)
                return self._finished(a, Outcome.LOST, a.cause)
            f = yield from self._fail(a, a.cause)
            if f.outcome not in (Outcome.UNREPORTED, Outcome.LOST):
                self.log.info("task %s failed at shutdown; it will be retried", t.id)
            return f
        if isinstance(herr, Snooze):
            yield STOP_KEEPER
            return (yield from self._snooze(a, herr))
        if herr is not None:
            yield STOP_KEEPER
            return (yield from self._fail(a, herr))
        try:
            encoded = encode_result(result)
        except (TypeError, ValueError) as e:
            yield STOP_KEEPER
            return (yield from self._fail(a, TypeError(f"the handler's result does not encode as JSON: {e}")))
        if r.effects is None:
            yield STOP_KEEPER
            return (yield from self._complete(a, encoded))
        try:
            resp = yield _Call("commit", task_id=t.id, lease_id=t.lease_id, result=encoded)
        except TenureError as e:
            yield STOP_KEEPER
            if lease_gone(e):
                self.log.warning("task %s: commit refused: another attempt owns the task; effects not applied: %s", t.id, e)
                return self._finished(a, Outcome.LOST, e)
            self.log.error("task %s: commit failed; effects not applied (if the commit did land, a later lease applies them): %s", t.id, e)
            return self._finished(a, Outcome.UNREPORTED, e)
        tok = resp.fencing_token or FencingToken(task_id=t.id, attempt=t.attempt)
        return (yield from self._effects_and_complete(a, r, decode_result(encoded), tok))

    def _finalise(self, a: _Attempt, r: Optional[_Route]) -> Flow:
        t = a.task
        if r is None:
            yield STOP_KEEPER
            err = self._unknown_kind(t.kind)
            self.log.error("task %s: a committed task of a kind this worker does not handle: left committed (its lease expires) for a worker that handles it: %s", t.id, err)
            return self._finished(a, Outcome.UNREPORTED, err)
        self.log.info("task %s: finalising a task committed by an earlier attempt", t.id)
        if r.effects is None:
            yield STOP_KEEPER
            return (yield from self._complete(a, b""))
        tok = FencingToken(task_id=t.id, attempt=t.attempt)
        try:
            task = (yield _Call("get_task", task_id=t.id)).task
            for e in task.executions if task is not None else ():
                if e.committed_at is not None:
                    tok.attempt = e.attempt
                    break
        except TenureError as e:
            self.log.warning("task %s: could not read the committing attempt; the fencing token carries this lease's attempt: %s", t.id, e)
        return (yield from self._effects_and_complete(a, r, decode_result(t.committed_result), tok))

    def _effects_and_complete(self, a: _Attempt, r: _Route, result: Any, tok: FencingToken) -> Flow:
        t = a.task
        tries = 0
        while True:
            tries += 1
            try:
                yield _RunEffects(r, result, tok)
                break
            except Exception as e:
                err = e
            if tries >= EFFECTS_TRIES or a.cause is not None:
                yield STOP_KEEPER
                self.log.error("task %s: effects failed; the task stays committed and a later lease applies them again (tries %d): %s", t.id, tries, err)
                return self._finished(a, Outcome.UNREPORTED, err)
            wait = _retry_wait(tries - 1)
            self.log.warning("task %s: effects failed (try %d); retrying in %.2fs: %s", t.id, tries, wait, err)
            if not (yield _Sleep(wait)):
                yield STOP_KEEPER
                self.log.error("task %s: lease lost while retrying effects; a later lease applies them again (%s)", t.id, a.cause)
                return self._finished(a, Outcome.LOST, a.cause)
        yield STOP_KEEPER
        return (yield from self._complete(a, b""))

    def _complete(self, a: _Attempt, result: bytes) -> Flow:
        t = a.task
        yield FINISHING
        try:
            yield _Complete(result)
        except TenureError as e:
            if lease_gone(e):
                self.log.warning("task %s: complete refused: the lease was lost: %s", t.id, e)
                return self._finished(a, Outcome.LOST, e)
            self.log.error("task %s: complete failed; the lease will expire: %s", t.id, e)
            return self._finished(a, Outcome.UNREPORTED, e)
        self.log.debug("task %s completed", t.id)
        return self._finished(a, Outcome.COMPLETED)

    def _fail(self, a: _Attempt, cause: BaseException) -> Flow:
        t = a.task
        permanent = isinstance(cause, Permanent)
        yield FINISHING
        try:
            res = yield _Call("fail", task_id=t.id, lease_id=t.lease_id, reason=_reason(cause), permanent=permanent)
        except TenureError as e:
            if isinstance(cause, WorkerShutdown):
                self.log.error("task %s: failing the task at shutdown failed; its lease will expire: %s", t.id, e)
            else:
                self.log.error("task %s: reporting the handler's failure failed; the lease will expire and the task be retried: %s (handler: %s)", t.id, e, cause)
            return self._failed(a, cause, None, e)
        if not isinstance(cause, WorkerShutdown):
            level = logging.DEBUG if self.middleware else logging.INFO
            self.log.log(level, "task %s attempt %d failed (permanent %s, now %s): %s", t.id, t.attempt, permanent,
                         res.state.name, _reason(cause), exc_info=cause if not isinstance(cause, (Permanent, TenureError)) else None)
        return self._failed(a, cause, res, None)

    def _snooze(self, a: _Attempt, s: Snooze) -> Flow:
        t = a.task
        yield FINISHING
        try:
            res = yield _Call("snooze", task_id=t.id, lease_id=t.lease_id, delay=max(s.delay, timedelta(0)), reason=_cut(s.reason))
        except WrongState as e:
            cause = Exception(f"the server refused the snooze: {e}")
            try:
                fres = yield _Call("fail", task_id=t.id, lease_id=t.lease_id, reason=_reason(cause), permanent=False)
                ferr = None
            except TenureError as fe:
                fres, ferr = None, fe
            self.log.warning("task %s: snooze refused; the attempt failed instead: %s", t.id, e)
            return self._failed(a, cause, fres, ferr)
        except TenureError as e:
            if lease_gone(e):
                self.log.warning("task %s: snooze refused: the lease was lost: %s", t.id, e)
                return self._finished(a, Outcome.LOST, e)
            self.log.error("task %s: reporting the snooze failed; the lease will expire and the task be retried: %s", t.id, e)
            return self._finished(a, Outcome.UNREPORTED, e)
        self.log.info("task %s snoozed until %s%s", t.id, res.not_before, f" ({s.reason})" if s.reason else "")
        return self._finished(a, Outcome.SNOOZED, retry_at=res.not_before)

    def _lease_flow(self) -> Generator[Op, Any, None]:
        """The lease loop's logic: lease for the free slots while the worker
        runs (in batches: see _Slots), hand each leased task over to run,
        back off after a failed call or an early empty answer (a server
        draining for shutdown), and stop when the worker stops or, with
        stop_when_empty, when nothing is left. A refusal no retry can fix is
        raised."""
        failures = empties = 0
        while True:
            n = yield TAKE_SLOTS
            if not n:
                return
            # Alone (no task runs, no carried lease is out), a worker that
            # stops when empty asks without waiting: an empty answer ends it.
            alone = self.stop_when_empty and self._slots.assigned == n
            sent = time.monotonic()
            try:
                ans = yield _Lease(self._lease_request(n, 0.0 if alone else self.poll_wait))
            except _Stopped:
                yield _Settle(n, [])
                return
            except TenureError as e:
                yield _Settle(n, [])
                if self._stopping.is_set():
                    return
                if _rejected(e):
                    self.log.error("the server rejected the lease request, stopping: %s", e)
                    raise
                wait = _retry_wait(failures)
                failures += 1
                self.log.error("lease failed; retrying in %.2fs: %s", wait, e)
                if (yield _Pause(wait)):
                    return
                continue
            failures = 0
            tasks = ans.tasks[:n]
            if len(ans.tasks) > n:
                self.log.error("the server leased more tasks than asked for (%d of %d); the extra leases will expire", len(ans.tasks), n)
            self._note_pause(ans)
            yield _Settle(n, tasks)
            if alone and not tasks:
                self.log.info("nothing %sleft to lease: stopping (stop_when_empty)", "" if self._paused is None else "(the queue is paused) ")
                return
            if not tasks and not alone and time.monotonic() - sent < self.poll_wait / 2:
                # An empty answer long before the wait ran out: the server
                # ends long-polls early (it is draining). Do not spin.
                if (yield _Pause(_retry_wait(empties))):
                    return
                empties += 1
            else:
                empties = 0

    def _completion_flow(self, items: List[CompleteRequest]) -> Generator[Op, Any, List[Optional[BaseException]]]:
        """One completion call's logic: the items in one CompleteBatch call,
        carrying the worker's next lease (for the free slots and the slots
        of the tasks it completes) unless it is stopping; each item's answer
        (None: completed). A call that fails with its lease is made again
        without it: the same lease completing again gets the same answer."""
        if self._single:
            return (yield from self._one_by_one(items))
        n = 0
        if not self._refused and not self._stopping.is_set():
            n = yield _TakeAhead(len(items))
        settled = n == 0
        try:
            resp = yield _Call("complete_batch", items=items, lease=self._lease_request(n, 0) if n else None)
            leased = resp.leased[:n]
            if len(resp.leased) > n:
                self.log.error("the server leased more tasks than asked for (%d of %d); the extra leases will expire", len(resp.leased), n)
            settled = True
            yield _Settle(n, leased)
            return _item_errors(resp, items)
        except TenureError as e:
            if not settled:
                yield _Settle(n, [])
            if e.code == "unimplemented":
                self.log.warning("the server does not implement CompleteBatch (an older version?): completing one task per call")
                self._single = True
                return (yield from self._one_by_one(items))
            if not n:
                return [e] * len(items)
            if _rejected(e):
                self._refused = True
                self.log.warning("the server refused the lease a completion call carried; completion calls carry no lease from now on: %s", e)
        try:
            return _item_errors((yield _Call("complete_batch", items=items)), items)
        except TenureError as e2:
            return [e2] * len(items)

    def _one_by_one(self, items: List[CompleteRequest]) -> Generator[Op, Any, List[Optional[BaseException]]]:
        errs: List[Optional[BaseException]] = []
        for it in items:
            try:
                yield _Call("complete", it)
                errs.append(None)
            except TenureError as e:
                errs.append(e)
        return errs

    def _finished(self, a: _Attempt, outcome: Outcome, err: Optional[BaseException] = None, retry_at: Optional[datetime] = None) -> Finish:
        return Finish(outcome, err, retry_at, time.monotonic() - a.received)

    def _failed(self, a: _Attempt, cause: BaseException, res: Any, err: Optional[TenureError]) -> Finish:
        if err is not None:
            if lease_gone(err):
                return self._finished(a, Outcome.LOST, err)
            return self._finished(a, Outcome.UNREPORTED, err)
        if res.state == TaskState.WAITING:
            return self._finished(a, Outcome.RETRYING, cause, res.retry_at)
        return self._finished(a, Outcome.FAILED, cause)


def _drive(flow: Flow, perform: Callable[[Op], Any]) -> Finish:
    """Runs an attempt's flow, performing its ops with blocking calls."""
    send: Any = None
    exc: Optional[BaseException] = None
    while True:
        try:
            op = flow.throw(exc) if exc is not None else flow.send(send)
        except StopIteration as s:
            return s.value  # type: ignore[no-any-return]
        try:
            send, exc = perform(op), None
        except Exception as e:
            send, exc = None, e


# The thread worker ----------------------------------------------------------


class _Beater:
    """Heartbeats the leases of the running tasks: one thread keeps them in
    a heap ordered by their next event and sleeps until the earliest; each
    heartbeat call runs on a small pool of its own, so a slow call delays
    no other lease."""

    def __init__(self, w: "Worker"):
        self.w = w
        self.cond = threading.Condition()
        self.heap: List[Tuple[float, int, _Attempt]] = []
        self.seq = itertools.count()
        self.calls = concurrent.futures.ThreadPoolExecutor(max_workers=min(w.concurrency, 16), thread_name_prefix="tenure-heartbeat")
        self.quit = False
        self.thread = threading.Thread(target=self.run, name="tenure-beater", daemon=True)

    def add(self, a: _Attempt) -> None:
        k = _Keeping(a.task.leased, a.received, a.received_wall, self.w.heartbeat_every)
        a.keeping = k
        a.keeper = threading.Event()  # set once no heartbeat is out and none will be
        a.task._report = lambda p: self.report(a, p)
        with self.cond:
            heapq.heappush(self.heap, (k.due(), next(self.seq), a))
            self.cond.notify()

    def _push(self, a: _Attempt) -> None:
        heapq.heappush(self.heap, (a.keeping.due(), next(self.seq), a))  # type: ignore[union-attr]
        self.cond.notify()

    def stop(self, a: _Attempt) -> None:
        """Ends the heartbeats of a and waits until none is out, so that a
        later report is the lease's last call."""
        with self.cond:
            k = a.keeping
            if k is None:
                return
            a.keeping = None
            idle = not k.inflight
        if idle:
            a.keeper.set()
        a.keeper.wait()

    def report(self, a: _Attempt, p: ProgressMessage) -> None:
        with self.cond:
            k = a.keeping
            if k is not None and k.report(p, time.monotonic()):
                self._push(a)

    def run(self) -> None:
        with self.cond:
            while not self.quit:
                now = time.monotonic()
                while self.heap and self.heap[0][0] <= now:
                    due, _, a = heapq.heappop(self.heap)
                    k = a.keeping
                    if k is None or k.due() != due:
                        continue  # stopped, or an older entry of a rescheduled lease
                    if now >= k.deadline:
                        a.keeping = None
                        a.keeper.set()
                        a.lose(LostLease(f"no successful heartbeat before the lease's expiry (less a {k.safety:g}s safety margin)"))
                        self.w._lost(a)
                        continue
                    rep = k.sending(now)
                    heapq.heappush(self.heap, (k.due(), next(self.seq), a))
                    self.calls.submit(self.beat, a, k, now, time.time(), rep)
                timeout = self.heap[0][0] - now if self.heap else None
                self.cond.wait(timeout)

    def beat(self, a: _Attempt, k: _Keeping, sent: float, sent_wall: float, rep: Optional[ProgressMessage]) -> None:
        t = a.task
        err: Optional[BaseException] = None
        exp = None
        try:
            exp = self.w.client.heartbeat(task_id=t.id, lease_id=t.lease_id, progress=rep).lease_expiry
        except Exception as e:
            err = e
        with self.cond:
            if a.keeping is not k:
                # Stopped, or lost, while the call was out.
                k.inflight = False
                a.keeper.set()
                return
            if err is None:
                k.answered(sent, exp, sent_wall, rep, time.monotonic())
            elif lease_gone(err):
                a.keeping = None
                a.keeper.set()
                a.lose(LostLease(str(err)))
                self.w._lost(a)
                return
            else:
                k.failed(time.monotonic())
            self._push(a)
        if err is not None:
            self.w.log.warning("task %s: heartbeat failed; retrying: %s", t.id, err)

    def close(self) -> None:
        with self.cond:
            self.quit = True
            self.cond.notify()
        self.thread.join()
        self.calls.shutdown(wait=True)


def _item_errors(resp: Any, items: List[CompleteRequest]) -> List[Optional[BaseException]]:
    """Each item's answer in a CompleteBatch response (None: completed)."""
    errs: List[Optional[BaseException]] = [None] * len(items)
    for r in resp.failed:
        if r.index >= len(items) or r.task_id != items[r.index].task_id:
            e = TenureError("CompleteBatch", "internal", f"the server answered a failure of item {r.index} (task {r.task_id!r}) "
                            "that does not fit the items (a server bug; the lease expires and the task is retried)")
            return [e] * len(items)
        errs[r.index] = from_complete_result(r)
    return errs


class _Completion:
    __slots__ = ("item", "done", "error")

    def __init__(self, item: CompleteRequest):
        self.item = item
        self.done = threading.Event()
        self.error: Optional[BaseException] = None


class _Completer:
    """Coalesces the completions of the worker's tasks into CompleteBatch
    calls, one out at a time from one thread: a completion that arrives
    while no call is out goes at once, alone; those that arrive while one
    is out go together in the next. Each call carries the worker's next
    lease, for the free slots and for those of the tasks it completes."""

    def __init__(self, w: "Worker"):
        self.w = w
        self.cond = threading.Condition()
        self.queue: Deque[_Completion] = deque()
        self.closed = False
        self.thread = threading.Thread(target=self.run, name="tenure-completer", daemon=True)

    def complete(self, item: CompleteRequest) -> None:
        if self.w.max_complete_batch == 1:
            self.w.client.complete(item)
            return
        c = _Completion(item)
        with self.cond:
            self.queue.append(c)
            self.cond.notify()
        c.done.wait()
        if c.error is not None:
            raise c.error

    def run(self) -> None:
        w = self.w
        while True:
            with self.cond:
                while not self.queue and not self.closed:
                    self.cond.wait()
                if not self.queue:
                    return
                batch = [self.queue.popleft() for _ in range(min(len(self.queue), w.max_complete_batch))]
            self.send(batch)

    def send(self, batch: List[_Completion]) -> None:
        w = self.w

        def perform(op: Op) -> Any:
            if isinstance(op, _Call):
                return getattr(w.client, op.method)(*op.args, **op.kwargs)
            if isinstance(op, _TakeAhead):
                with w._cond:
                    return w._slots.take_ahead(op.completing)
            if isinstance(op, _Settle):
                w._settle(op.n, op.tasks)
                return None
            raise AssertionError(f"unknown op {op!r}")

        errs = _drive(w._completion_flow([c.item for c in batch]), perform)
        for c, e in zip(batch, errs):
            c.error = e
            c.done.set()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.thread.join()


class Worker(_WorkerBase):
    """Runs tasks on threads: up to concurrency handlers at once, each on a
    thread of its own pool. See the module's documentation for what it
    promises.

    client: a tenure.Client.
    queues: the queues to lease from (one pool of slots serves them all).
    namespace: default "default".
    worker_id: names this process in leases (default host-pid-random).
    concurrency: tasks run at once (default 1).
    heartbeat_every: the time between heartbeats as a fraction of the
      task's execution window (default 1/3).
    poll_wait: seconds one Lease call long-polls (default 10, at most 30).
    report_start: report each task's start (its execution shows
      IN_PROGRESS); a call and a log record per task.
    max_complete_batch: most completions per CompleteBatch call (default
      64; 1: one Complete call per task).
    shutdown_grace: seconds running tasks may go on after stop (default 30).
    stop_when_empty: return from run once nothing is left to lease and no
      task runs (for scripts that work a queue off).
    middleware: functions run around each attempt, the first outermost:
      mw(task, call_next) -> Finish, calling call_next() once.
    logger: the logger of the worker's records (default "tenure.worker").
    tracer_provider: the OpenTelemetry tracer provider of the attempts'
      spans (default the global one), when opentelemetry-api is installed.
    """

    def _init_runtime(self) -> None:
        if not isinstance(self.client, Client):
            raise TypeError(f"client is a {type(self.client).__name__}; want a tenure.Client (an AsyncClient goes with AsyncWorker)")
        self._cond = threading.Condition()  # guards the slots and the running attempts
        self._running: Dict[int, _Attempt] = {}
        self._stopping = threading.Event()
        self._hard = threading.Event()
        self._scope: Any = None
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._beater: Optional[_Beater] = None
        self._completer: Optional[_Completer] = None

    def _check_handler(self, fn: Callable[..., Any]) -> None:
        super()._check_handler(fn)
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"{getattr(fn, '__name__', fn)} is an async def: run it with tenure.AsyncWorker")

    def stop(self) -> None:
        """Begins a graceful shutdown: run leases no more, lets running tasks
        finish for up to shutdown_grace, then returns. Safe from any thread
        and from a signal handler."""
        self._stopping.set()
        s = self._scope
        if s is not None:
            threading.Thread(target=s.interrupt, daemon=True).start()

    def run(self, *, handle_signals: bool = True) -> None:
        """Leases and runs tasks until stop(), SIGTERM or SIGINT (with
        handle_signals, from the main thread; a second signal stops waiting
        for running tasks), or, with stop_when_empty, until nothing is left;
        then shuts down gracefully and returns. It raises the server's
        refusal when the server rejects the lease request itself (a bad
        queue, no permission), after the same graceful shutdown. run may be
        called once."""
        if self._started:
            raise RuntimeError("run was already called on this Worker; make a new one")
        if not self._routes and self._other is None:
            raise RuntimeError("no handler is registered; register one with @worker.task(kind) before run")
        self._started = True
        restore = self._handle_signals() if handle_signals else None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="tenure-task")
        self._beater = _Beater(self)
        self._completer = _Completer(self)
        self._beater.thread.start()
        self._completer.thread.start()
        self.log.info("worker %s started: queues %s, concurrency %d, kinds %s", self.worker_id, ",".join(self.queues),
                      self.concurrency, ", ".join(self.kinds()))
        err: List[BaseException] = []
        loop = threading.Thread(target=self._lease_loop_guarded, args=(err,), name="tenure-lease", daemon=True)
        loop.start()
        try:
            while loop.is_alive():
                loop.join(0.5)
            self._drain()
        finally:
            if not self._hard.is_set():
                self._completer.close()
                self._beater.close()
            self._pool.shutdown(wait=not self._hard.is_set())
            if restore is not None:
                restore()
        self.log.info("worker %s stopped", self.worker_id)
        if err:
            raise err[0]

    def _handle_signals(self) -> Optional[Callable[[], None]]:
        if threading.current_thread() is not threading.main_thread():
            return None
        old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: Any) -> None:
            if self._stopping.is_set():
                self.log.warning("second signal: not waiting for running tasks (their leases expire)")
                self._hard.set()
                with self._cond:
                    self._cond.notify_all()
                return
            self.log.info("signal %d: shutting down gracefully (a second one stops waiting for running tasks)", signum)
            self.stop()

        for s in old:
            signal.signal(s, on_signal)

        def restore() -> None:
            for s, h in old.items():
                signal.signal(s, h)

        return restore

    def _drain(self) -> None:
        """Waits for the running tasks, up to the grace; then cancels them
        (they are failed as the worker shuts down) and waits for them."""
        deadline = time.monotonic() + self.shutdown_grace
        with self._cond:
            while self._running and not self._hard.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            if self._running and not self._hard.is_set():
                self.log.warning("shutdown grace (%gs) passed: cancelling %d running tasks and failing them", self.shutdown_grace, len(self._running))
                for a in list(self._running.values()):
                    a.lose(WorkerShutdown())
            while self._running and not self._hard.is_set():
                self._cond.wait(0.5)

    def _lease_loop_guarded(self, err: List[BaseException]) -> None:
        try:
            self._lease_loop()
        except BaseException as e:
            err.append(e)
        finally:
            self._stopping.set()

    def _lease_loop(self) -> None:
        def perform(op: Op) -> Any:
            if isinstance(op, _TakeSlots):
                with self._cond:
                    while not self._stopping.is_set():
                        n = self._slots.take()
                        if n:
                            return n
                        self._cond.wait(0.5)
                return 0
            if isinstance(op, _Lease):
                try:
                    return self.client.lease(op.request)
                except Interrupted:
                    raise _Stopped() from None
            if isinstance(op, _Settle):
                self._settle(op.n, op.tasks)
                return None
            if isinstance(op, _Pause):
                return self._stopping.wait(op.seconds)
            raise AssertionError(f"unknown op {op!r}")

        with self.client.interruptible() as scope:
            self._scope = scope
            if not self._stopping.is_set():
                _drive(self._lease_flow(), perform)  # type: ignore[arg-type]

    def _settle(self, n: int, tasks: Sequence[LeasedTask]) -> None:
        """Starts the tasks a lease call for n slots leased; the slots left
        are free again."""
        with self._cond:
            self._slots.put(n - len(tasks))
            atts = []
            for lt in tasks:
                a = _Attempt(self._new_task(lt))
                self._running[id(a)] = a
                atts.append(a)
            self._cond.notify_all()
        for a in atts:
            self._pool.submit(self._run_task, a)  # type: ignore[union-attr]

    def _lost(self, a: _Attempt) -> None:
        self.log.warning("task %s: lease lost: %s", a.task.id, a.cause)

    def _run_task(self, a: _Attempt) -> None:
        try:
            self._beater.add(a)  # type: ignore[union-attr]
            span = _trace.AttemptSpan()
            span.start(self.tracer_provider, a.task, self.worker_id)
            f: Optional[Finish] = None
            try:
                f = self._through_middleware(a)
            finally:
                self._beater.stop(a)  # type: ignore[union-attr]
                span.end(f or Finish(Outcome.UNREPORTED))
        except BaseException:
            self.log.exception("task %s: internal error running the attempt; its lease will expire", a.task.id)
        finally:
            with self._cond:
                self._slots.release(a.finishing)
                self._running.pop(id(a), None)
                self._cond.notify_all()

    def _through_middleware(self, a: _Attempt) -> Finish:
        def attempt() -> Finish:
            return _drive(self._flow(a), lambda op: self._perform(a, op))

        def at(i: int) -> Finish:
            if i == len(self.middleware):
                return attempt()
            called: List[Finish] = []

            def call_next() -> Finish:
                if called:
                    raise RuntimeError("middleware called call_next twice")
                called.append(at(i + 1))
                return called[0]

            f = self.middleware[i](a.task, call_next)
            if not called:
                raise RuntimeError(f"middleware {self.middleware[i]!r} did not call call_next")
            return f if isinstance(f, Finish) else called[0]

        return at(0)

    def _perform(self, a: _Attempt, op: Op) -> Any:
        t = a.task
        if isinstance(op, _RunHandler):
            return op.route.handler(t)
        if isinstance(op, _Call):
            return getattr(self.client, op.method)(*op.args, **op.kwargs)
        if isinstance(op, _StopKeeper):
            self._beater.stop(a)  # type: ignore[union-attr]
            return None
        if isinstance(op, _Finishing):
            with self._cond:
                a.finishing = True
                self._slots.finish()
            return None
        if isinstance(op, _Complete):
            self._completer.complete(CompleteRequest(task_id=t.id, lease_id=t.lease_id, result=op.result))  # type: ignore[union-attr]
            return None
        if isinstance(op, _RunEffects):
            op.route.effects(t, op.result, op.token)  # type: ignore[misc]
            return None
        if isinstance(op, _Sleep):
            return not t.cancelled.wait(op.seconds)
        raise AssertionError(f"unknown op {op!r}")

