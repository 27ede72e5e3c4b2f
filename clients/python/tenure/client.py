"""Client: the tenure.v1 API over the Connect protocol with JSON bodies,
on persistent HTTP/1.1 connections (http.client), from any thread."""
from __future__ import annotations

import gzip
import http.client
import socket
import ssl
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from . import _base
from ._calls import Calls
from .errors import TenureError, Unavailable
from .messages import Event, Rpc, Task, TaskState

# Errors of a connection that the server closed while it was idle in the
# pool: the request never reached it, so it is sent again at once on a
# new connection (not counted as a retry).
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class Interrupted(Exception):
    """A call interrupted by Scope.interrupt (a worker shutting down)."""


class Scope:
    """Calls made in a `with client.interruptible() as scope:` block, on
    that thread, can be interrupted from another thread: their connection is
    shut down, and the call raises Interrupted. The worker ends its long
    polls so at shutdown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None
        self.interrupted = False

    def _set(self, conn: Optional[http.client.HTTPConnection]) -> None:
        with self._lock:
            self._conn = conn
            if conn is not None and self.interrupted:
                raise Interrupted()

    def interrupt(self) -> None:
        """Ends the call under way in the scope, and every later one."""
        with self._lock:
            self.interrupted = True
            c = self._conn
        if c is not None and c.sock is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


_local = threading.local()


class _Pool:
    """Idle connections to the server, reused call after call."""

    def __init__(self, o: _base._Options, max_idle: int):
        self.o = o
        self.max_idle = max_idle
        self.lock = threading.Lock()
        self.idle: List[http.client.HTTPConnection] = []

    def get(self) -> Tuple[http.client.HTTPConnection, bool]:
        with self.lock:
            if self.idle:
                return self.idle.pop(), True
        return self.new(), False

    def new(self) -> http.client.HTTPConnection:
        """A new connection (not yet open) to the server."""
        o = self.o
        if o.scheme == "https":
            ctx = o.ssl_context if o.ssl_context is not None else ssl.create_default_context()
            return http.client.HTTPSConnection(o.host, o.port, timeout=o.timeout, context=ctx)
        return http.client.HTTPConnection(o.host, o.port, timeout=o.timeout)

    def put(self, c: http.client.HTTPConnection) -> None:
        with self.lock:
            if len(self.idle) < self.max_idle:
                self.idle.append(c)
                return
        c.close()

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for c in idle:
            c.close()

    def roundtrip(self, path: str, body: bytes, headers: Dict[str, str], timeout: float) -> Tuple[int, Dict[str, str], bytes]:
        """One HTTP exchange: (status, headers in lower case, body)."""
        scope: Optional[Scope] = getattr(_local, "scope", None)
        while True:
            c, reused = self.get()
            if scope is not None:
                try:
                    scope._set(c)
                except Interrupted:
                    self.put(c)
                    raise
            try:
                c.timeout = timeout
                if c.sock is not None:
                    c.sock.settimeout(timeout)
                try:
                    c.request("POST", path, body, headers)
                except (BrokenPipeError, ConnectionResetError):
                    # The server may have answered and closed before it read
                    # the whole body (a body over its limit): read its answer.
                    if c.sock is None:
                        raise
                resp = c.getresponse()
                data = resp.read()
                hdrs = {k.lower(): v for k, v in resp.getheaders()}
            except _STALE:
                c.close()
                if reused and not (scope is not None and scope.interrupted):
                    continue
                raise
            except BaseException:
                c.close()
                raise
            finally:
                if scope is not None:
                    scope._set(None)
            if resp.will_close:
                c.close()
            else:
                self.put(c)
            if hdrs.get("content-encoding") == "gzip":
                data = gzip.decompress(data)
            return resp.status, hdrs, data


class Client(Calls):
    """A client of a tenure server, safe to share between threads: create one
    per server and keep it.

        client = tenure.Client("http://127.0.0.1:7070")
        task = client.submit(queue="emails", kind="send_email", args={"to": "ada@example.com"}).task

    Every call of the API is a method named after it in snake_case
    (submit, get_task, lease, commit, pause_queue, create_schedule,
    who_am_i, ...), taking its request message, or its fields as keyword
    arguments, and returning its response message (tenure.messages).
    A refused call raises a TenureError subclass: LeaseLost,
    AlreadyCommitted, NotFound, InvalidArgument, TooLarge, ...
    watch_events, a server-streaming call, returns a generator of its
    answers; watch yields the events themselves and resumes by itself,
    and wait waits for a task to end.

    base_url: http://host:port or https://host:port.
    token: the bearer token of a server that authenticates callers
      (`tenure token create`).
    requested_by: who asks, for the calls that record it (kill_task,
      pause_queue, ...) when the request does not say.
    max_retries: how often a call that failed as unavailable (the server
      is down, restarting, reopening its log) is retried (default 5; 0 or
      less: never), with a doubling, jittered wait from retry_backoff
      seconds (default 0.1) up to 5s. Retrying is safe for every call:
      submits carry a request id (one is made when the request has none),
      and reports are fenced by the lease.
    timeout: seconds a call may take (default 60), a long poll's wait on top.
    ssl_context: TLS for https:// (tenure.tls_context makes one from PEM
      files); default: the system's CAs.
    interceptors: functions run around every call, the first outermost:
      interceptor(info: CallInfo, call_next) -> answer; info.headers may
      be added to. For a server-streaming call (watch_events) they run
      around opening the stream: call_next opens it and returns None.
    max_idle_connections: connections kept open for reuse (default 32).
    """

    def __init__(self, base_url: str = "http://127.0.0.1:7070", *, token: Optional[str] = None, requested_by: str = "",
                 max_retries: Optional[int] = None, retry_backoff: Optional[float] = None, timeout: Optional[float] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 interceptors: Optional[Sequence[Callable[[_base.CallInfo, Callable[[], Any]], Any]]] = None,
                 user_agent: str = "", max_idle_connections: int = 32):
        self._o = _base._options(base_url, token, requested_by, max_retries, retry_backoff, timeout, ssl_context,
                                 interceptors, user_agent)
        self._pool = _Pool(self._o, max_idle_connections)

    @property
    def base_url(self) -> str:
        """The server's URL."""
        return self._o.base_url

    def close(self) -> None:
        """Closes the idle connections (a later call opens new ones)."""
        self._pool.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def interruptible(self) -> "_ScopeContext":
        """A context whose calls (on this thread) another thread may end with
        scope.interrupt(); see Scope."""
        return _ScopeContext()

    def _call(self, rpc: Rpc, request: Any, args: Any = None, **kwargs: Any) -> Any:
        o = self._o
        msg = _base.prepare(o, rpc, request, args, kwargs)
        if not o.interceptors:
            return self._tries(rpc, msg, dict(o.headers))
        info = _base.CallInfo(rpc.name, msg, dict(o.headers))

        def at(i: int) -> Any:
            if i == len(o.interceptors):
                return self._tries(rpc, info.request, info.headers)
            return o.interceptors[i](info, lambda: at(i + 1))

        return at(0)

    def _tries(self, rpc: Rpc, msg: Any, headers: Dict[str, str]) -> Any:
        body = _base.encode(rpc, msg)
        timeout = _base.call_timeout(self._o, msg)
        path = self._o.path + rpc.path

        def once() -> Any:
            status, hdrs, data = self._pool.roundtrip(path, body, headers, timeout)
            return _base.decode(rpc, status, hdrs, data)

        return self._retrying(rpc, once)

    def _retrying(self, rpc: Rpc, once: Callable[[], Any]) -> Any:
        """What once returns; once is called again after each unavailable,
        up to the client's max_retries, with a growing wait."""
        o = self._o
        scope: Optional[Scope] = getattr(_local, "scope", None)
        attempt = 0
        while True:
            try:
                return once()
            except Interrupted:
                raise
            except TenureError as e:
                err = e
            except (OSError, http.client.HTTPException) as e:
                if scope is not None and scope.interrupted:
                    raise Interrupted() from e
                err = _base.transport_error(rpc.name, o, e)
            if not isinstance(err, Unavailable) or attempt >= o.max_retries:
                raise _base.exhausted(err, attempt + 1) if isinstance(err, Unavailable) else err
            time.sleep(_base.backoff(o, attempt))
            if scope is not None and scope.interrupted:
                raise Interrupted()
            attempt += 1

    # Server-streaming calls -----------------------------------------------

    def _stream(self, rpc: Rpc, request: Any, args: Any = None, **kwargs: Any) -> Iterator[Any]:
        msg = _base.prepare(self._o, rpc, request, args, kwargs)
        return self._stream_messages(rpc, msg)

    def _stream_messages(self, rpc: Rpc, msg: Any) -> Iterator[Any]:
        """The response messages of a server-streaming call, read as the
        loop asks for them, on a connection of the stream's own (closed
        when the stream ends or the generator is closed)."""
        o = self._o
        headers = _base.stream_headers(o.headers)
        if not o.interceptors:
            c, resp = self._open_stream(rpc, msg, headers)
        else:
            info = _base.CallInfo(rpc.name, msg, headers)
            opened: List[Tuple[http.client.HTTPConnection, http.client.HTTPResponse]] = []

            def at(i: int) -> Any:
                if i == len(o.interceptors):
                    opened.append(self._open_stream(rpc, info.request, info.headers))
                    return None
                return o.interceptors[i](info, lambda: at(i + 1))

            at(0)
            if not opened:
                raise RuntimeError(f"{rpc.name}: an interceptor returned without calling call_next")
            c, resp = opened[-1]
        try:
            encoding = (resp.getheader("connect-content-encoding") or "").lower()
            while True:
                try:
                    prefix = resp.read(5)
                    if len(prefix) < 5:
                        raise _base.stream_broken(rpc.name, o)
                    flags, n = _base.envelope_prefix(rpc.name, prefix)
                    data = resp.read(n) if n else b""
                    if len(data) < n:
                        raise _base.stream_broken(rpc.name, o)
                except (OSError, http.client.HTTPException) as e:
                    raise _base.stream_broken(rpc.name, o, e) from None
                out = _base.stream_message(rpc, flags, data, encoding)
                if out is None:
                    return
                yield out
        finally:
            c.close()

    def _open_stream(self, rpc: Rpc, msg: Any, headers: Dict[str, str]) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a server-streaming call's request and reads the answer's
        head, tried again after each unavailable as a unary call."""
        body = _base.envelope(_base.encode(rpc, msg))
        path = self._o.path + rpc.path

        def once() -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
            c = self._pool.new()
            try:
                c.request("POST", path, body, headers)
                resp = c.getresponse()
                if resp.status != 200:
                    data = resp.read()
                    raise _base.error_of_answer(rpc.name, resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
            except BaseException:
                c.close()
                raise
            return c, resp

        return self._retrying(rpc, once)  # type: ignore[no-any-return]

    # Conveniences over the calls ------------------------------------------

    def wait(self, task_id: str, *, timeout: Optional[float] = None) -> Task:
        """The task once it has ended (COMPLETED, with its result; FAILED;
        DEAD): wait_task asked again until then. timeout: seconds to wait at
        most (None: as long as it takes), then TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            r = self.wait_task(task_id=task_id, wait=_base.next_wait(deadline, time.monotonic()))
            if r.done:
                return r.task  # type: ignore[return-value]
            _base.check_wait(task_id, r, deadline, time.monotonic(), timeout)

    def watch(self, *, namespace: str = "", queue: str = "", task_id: str = "", types: Optional[Sequence[str]] = None,
              cursor: str = "") -> Iterator[Tuple[Event, str]]:
        """The events the filter selects, from cursor, for as long as the
        loop runs: (event, cursor) pairs, cursor the one after the event
        (save the last one handled to resume exactly after it).

        cursor: one saved from an earlier event; "now" or "": what happens
        from now on; "oldest": everything the server's log still holds.
        namespace, queue, task_id and types (record type names:
        "TaskCompleted", ...) select; unset, everything.

        A stream that breaks (the server restarts, the connection drops) is
        opened again from the cursor after the last event yielded, with a
        growing wait between tries (up to 10s): the loop sees every event
        once, in order within each partition. An error retrying cannot fix
        is raised: CursorExpired (its oldest_cursor is where the log now
        starts), InvalidArgument, Unauthenticated, PermissionDenied. Close
        the generator (or break out of the loop) to stop.
        """
        w = _base.Watching(self._o, _base.watch_request(namespace, queue, task_id, types, cursor))
        while True:
            stream = self.watch_events(w.request())
            err: Optional[TenureError] = None
            try:
                for answer in stream:
                    for ev in answer.events:
                        yield ev, ev.cursor
                        w.moved(ev.cursor)
                    w.moved(answer.cursor)
            except TenureError as e:
                err = e
            finally:
                stream.close()  # type: ignore[attr-defined]
            time.sleep(w.wait_after(err))

    def iter_tasks(self, *, namespace: str = "", queue: str = "", state: TaskState = TaskState.UNSPECIFIED,
                   page_size: int = 0, page_token: str = "") -> Iterator[Task]:
        """Every task the filters select, in creation order: list_tasks page
        after page, as the loop asks for more."""
        while True:
            page = self.list_tasks(namespace=namespace, queue=queue, state=state, page_size=page_size, page_token=page_token)
            yield from page.tasks
            if not page.next_page_token:
                return
            page_token = page.next_page_token


class _ScopeContext:
    def __enter__(self) -> Scope:
        if getattr(_local, "scope", None) is not None:
            raise RuntimeError("interruptible scopes do not nest")
        s = Scope()
        _local.scope = s
        return s

    def __exit__(self, *exc: Any) -> None:
        _local.scope = None
