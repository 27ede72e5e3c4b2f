"""AsyncClient: the tenure.v1 API for asyncio, over persistent HTTP/1.1
connections (asyncio streams), with the calls, errors and retries of
Client."""
from __future__ import annotations

import asyncio
import gzip
import ssl
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from . import _base
from ._calls import AsyncCalls
from .errors import TenureError, Unavailable
from .messages import Event, Rpc, Task, TaskState

_MAX_HEADERS = 100


class _Closed(ConnectionResetError):
    """The server closed the connection before it answered."""


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class _Pool:
    def __init__(self, o: _base._Options, max_idle: int):
        self.o = o
        self.max_idle = max_idle
        self.idle: List[_Conn] = []
        self.host_header = o.host if o.port in (80, 443) else f"{o.host}:{o.port}"
        if ":" in o.host:
            self.host_header = f"[{o.host}]" if o.port in (80, 443) else f"[{o.host}]:{o.port}"

    async def get(self) -> Tuple[_Conn, bool]:
        while self.idle:
            c = self.idle.pop()
            if not c.reader.at_eof() and not c.writer.is_closing():
                return c, True
            c.close()
        return await self.new(), False

    async def new(self) -> _Conn:
        """A new connection to the server."""
        o = self.o
        ctx = None
        if o.scheme == "https":
            ctx = o.ssl_context if o.ssl_context is not None else ssl.create_default_context()
        r, w = await asyncio.open_connection(o.host, o.port, ssl=ctx, server_hostname=o.host if ctx else None)
        return _Conn(r, w)

    def put(self, c: _Conn) -> None:
        if len(self.idle) < self.max_idle:
            self.idle.append(c)
        else:
            c.close()

    def close(self) -> None:
        idle, self.idle = self.idle, []
        for c in idle:
            c.close()

    async def roundtrip(self, path: str, body: bytes, headers: Dict[str, str], timeout: float) -> Tuple[int, Dict[str, str], bytes]:
        while True:
            c, reused = await self.get()
            try:
                status, hdrs, data, keep = await asyncio.wait_for(self._exchange(c, path, body, headers), timeout)
            except (_Closed, BrokenPipeError, ConnectionResetError):
                c.close()
                if reused:
                    continue
                raise
            except BaseException:
                c.close()
                raise
            if keep:
                self.put(c)
            else:
                c.close()
            if hdrs.get("content-encoding") == "gzip":
                data = gzip.decompress(data)
            return status, hdrs, data

    async def _exchange(self, c: _Conn, path: str, body: bytes, headers: Dict[str, str]) -> Tuple[int, Dict[str, str], bytes, bool]:
        status, hdrs, keep = await self.request(c, path, body, headers)
        b = _Body(c.reader, hdrs)
        data = await b.read_all()
        return status, hdrs, data, keep and b.length_known

    async def request(self, c: _Conn, path: str, body: bytes, headers: Dict[str, str]) -> Tuple[int, Dict[str, str], bool]:
        """Sends a POST and reads the answer's head: its status, headers (in
        lower case) and whether the connection may be kept."""
        head = [f"POST {path} HTTP/1.1", f"Host: {self.host_header}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        head.append(f"Content-Length: {len(body)}")
        c.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        try:
            await c.writer.drain()
        except (BrokenPipeError, ConnectionResetError):
            # The server may have answered and closed before it read the
            # whole body (a body over its limit): read its answer.
            pass
        line = await c.reader.readline()
        if not line:
            raise _Closed("the server closed the connection without an answer")
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ConnectionError(f"not an HTTP/1.x answer: {line[:80]!r}")
        status = int(parts[1])
        hdrs: Dict[str, str] = {}
        for _ in range(_MAX_HEADERS):
            h = await c.reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        else:
            raise ConnectionError("the answer has too many headers")
        keep = parts[0] == "HTTP/1.1" and hdrs.get("connection", "").lower() != "close"
        return status, hdrs, keep


class _Body:
    """The body of an answer, read as it comes: chunked, of a known length,
    or up to the end of the connection."""

    def __init__(self, reader: asyncio.StreamReader, hdrs: Dict[str, str]):
        self.reader = reader
        self.chunked = "chunked" in hdrs.get("transfer-encoding", "").lower()
        self.left: Optional[int] = None if self.chunked or "content-length" not in hdrs else int(hdrs["content-length"])
        self.length_known = self.chunked or self.left is not None
        self.chunk_left = 0
        self.done = False
        self.ended = not self.chunked  # the last chunk was read
        self.encoding = ""

    async def read_all(self) -> bytes:
        """The whole body; a body cut short is an error."""
        if self.left is not None:
            data = await self.reader.readexactly(self.left)
            self.left, self.done = 0, True
            return data
        parts = []
        while not self.done:
            parts.append(await self.read(1 << 16))
        if not self.ended:
            raise ConnectionError("the answer was cut short: the connection closed before its last chunk")
        return b"".join(parts)

    async def read(self, n: int) -> bytes:
        """The next n bytes of the body: fewer only at its end (or where the
        connection closed)."""
        out = bytearray()
        r = self.reader
        while len(out) < n and not self.done:
            if self.chunked:
                if self.chunk_left == 0:
                    line = await r.readline()
                    if not line:
                        self.done = True
                        break
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while (await r.readline()) not in (b"\r\n", b"\n", b""):
                            pass
                        self.done = self.ended = True
                        break
                    self.chunk_left = size
                b = await r.read(min(n - len(out), self.chunk_left))
                if not b:
                    self.done = True
                    break
                out += b
                self.chunk_left -= len(b)
                if self.chunk_left == 0:
                    await r.readline()
            else:
                want = n - len(out) if self.left is None else min(n - len(out), self.left)
                if want == 0:
                    self.done = True
                    break
                b = await r.read(want)
                if not b:
                    self.done = True
                    break
                out += b
                if self.left is not None:
                    self.left -= len(b)
        return bytes(out)


class AsyncClient(AsyncCalls):
    """Client for asyncio: the same calls as coroutines, with the same
    options, errors and retries (see Client).

        async with tenure.AsyncClient("http://127.0.0.1:7070") as client:
            r = await client.submit(queue="emails", kind="send_email", args={"to": "ada@example.com"})

    An AsyncClient belongs to the event loop it is first used on.
    Interceptors are coroutine functions: await interceptor(info, call_next)
    (for a server-streaming call, call_next opens the stream and returns
    None).
    """

    def __init__(self, base_url: str = "http://127.0.0.1:7070", *, token: Optional[str] = None, requested_by: str = "",
                 max_retries: Optional[int] = None, retry_backoff: Optional[float] = None, timeout: Optional[float] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 interceptors: Optional[Sequence[Callable[[_base.CallInfo, Callable[[], Awaitable[Any]]], Awaitable[Any]]]] = None,
                 user_agent: str = "", max_idle_connections: int = 32):
        self._o = _base._options(base_url, token, requested_by, max_retries, retry_backoff, timeout, ssl_context,
                                 interceptors, user_agent)
        self._pool = _Pool(self._o, max_idle_connections)

    @property
    def base_url(self) -> str:
        """The server's URL."""
        return self._o.base_url

    async def close(self) -> None:
        """Closes the idle connections (a later call opens new ones)."""
        self._pool.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, rpc: Rpc, request: Any, args: Any = None, **kwargs: Any) -> Any:
        o = self._o
        msg = _base.prepare(o, rpc, request, args, kwargs)
        if not o.interceptors:
            return await self._tries(rpc, msg, dict(o.headers))
        info = _base.CallInfo(rpc.name, msg, dict(o.headers))

        async def at(i: int) -> Any:
            if i == len(o.interceptors):
                return await self._tries(rpc, info.request, info.headers)
            return await o.interceptors[i](info, lambda: at(i + 1))

        return await at(0)

    async def _tries(self, rpc: Rpc, msg: Any, headers: Dict[str, str]) -> Any:
        body = _base.encode(rpc, msg)
        timeout = _base.call_timeout(self._o, msg)
        path = self._o.path + rpc.path

        async def once() -> Any:
            status, hdrs, data = await self._pool.roundtrip(path, body, headers, timeout)
            return _base.decode(rpc, status, hdrs, data)

        return await self._retrying(rpc, once)

    async def _retrying(self, rpc: Rpc, once: Callable[[], Awaitable[Any]]) -> Any:
        """What once returns; once is called again after each unavailable,
        up to the client's max_retries, with a growing wait."""
        o = self._o
        attempt = 0
        while True:
            try:
                return await once()
            except TenureError as e:
                err = e
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                err = _base.transport_error(rpc.name, o, e)
            if not isinstance(err, Unavailable) or attempt >= o.max_retries:
                raise _base.exhausted(err, attempt + 1) if isinstance(err, Unavailable) else err
            await asyncio.sleep(_base.backoff(o, attempt))
            attempt += 1

    # Server-streaming calls -----------------------------------------------

    def _stream(self, rpc: Rpc, request: Any, args: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        msg = _base.prepare(self._o, rpc, request, args, kwargs)
        return self._stream_messages(rpc, msg)

    async def _stream_messages(self, rpc: Rpc, msg: Any) -> AsyncIterator[Any]:
        """The response messages of a server-streaming call, read as the
        loop asks for them, on a connection of the stream's own (closed
        when the stream ends or the iterator is closed)."""
        o = self._o
        headers = _base.stream_headers(o.headers)
        if not o.interceptors:
            c, body = await self._open_stream(rpc, msg, headers)
        else:
            info = _base.CallInfo(rpc.name, msg, headers)
            opened: List[Tuple[_Conn, _Body]] = []

            async def at(i: int) -> Any:
                if i == len(o.interceptors):
                    opened.append(await self._open_stream(rpc, info.request, info.headers))
                    return None
                return await o.interceptors[i](info, lambda: at(i + 1))

            await at(0)
            if not opened:
                raise RuntimeError(f"{rpc.name}: an interceptor returned without calling call_next")
            c, body = opened[-1]
        try:
            while True:
                try:
                    prefix = await asyncio.wait_for(body.read(5), o.timeout)
                    if len(prefix) < 5:
                        raise _base.stream_broken(rpc.name, o)
                    flags, n = _base.envelope_prefix(rpc.name, prefix)
                    data = await asyncio.wait_for(body.read(n), o.timeout) if n else b""
                    if len(data) < n:
                        raise _base.stream_broken(rpc.name, o)
                except (OSError, asyncio.TimeoutError, ValueError) as e:
                    raise _base.stream_broken(rpc.name, o, e) from None
                out = _base.stream_message(rpc, flags, data, body.encoding)
                if out is None:
                    return
                yield out
        finally:
            c.close()

    async def _open_stream(self, rpc: Rpc, msg: Any, headers: Dict[str, str]) -> Tuple[_Conn, "_Body"]:
        """Sends a server-streaming call's request and reads the answer's
        head, tried again after each unavailable as a unary call."""
        o = self._o
        data = _base.envelope(_base.encode(rpc, msg))
        path = o.path + rpc.path

        async def once() -> Tuple[_Conn, _Body]:
            c = await asyncio.wait_for(self._pool.new(), o.timeout)
            try:
                status, hdrs, _ = await asyncio.wait_for(self._pool.request(c, path, data, headers), o.timeout)
                body = _Body(c.reader, hdrs)
                if status != 200:
                    raise _base.error_of_answer(rpc.name, status, hdrs, await asyncio.wait_for(body.read_all(), o.timeout))
                body.encoding = hdrs.get("connect-content-encoding", "").lower()
            except BaseException:
                c.close()
                raise
            return c, body

        return await self._retrying(rpc, once)  # type: ignore[no-any-return]

    # Conveniences over the calls ------------------------------------------

    async def wait(self, task_id: str, *, timeout: Optional[float] = None) -> Task:
        """The task once it has ended: Client.wait for asyncio."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            r = await self.wait_task(task_id=task_id, wait=_base.next_wait(deadline, loop.time()))
            if r.done:
                return r.task  # type: ignore[return-value]
            _base.check_wait(task_id, r, deadline, loop.time(), timeout)

    async def watch(self, *, namespace: str = "", queue: str = "", task_id: str = "",
                    types: Optional[Sequence[str]] = None, cursor: str = "") -> AsyncIterator[Tuple[Event, str]]:
        """The events the filter selects, from cursor, as (event, cursor)
        pairs, opened again from the last cursor when the stream breaks:
        Client.watch for asyncio (async for ev, cursor in client.watch(...)).
        """
        w = _base.Watching(self._o, _base.watch_request(namespace, queue, task_id, types, cursor))
        while True:
            stream = self.watch_events(w.request())
            err: Optional[TenureError] = None
            try:
                async for answer in stream:
                    for ev in answer.events:
                        yield ev, ev.cursor
                        w.moved(ev.cursor)
                    w.moved(answer.cursor)
            except TenureError as e:
                err = e
            finally:
                await stream.aclose()  # type: ignore[attr-defined]
            await asyncio.sleep(w.wait_after(err))

    async def iter_tasks(self, *, namespace: str = "", queue: str = "", state: TaskState = TaskState.UNSPECIFIED,
                         page_size: int = 0, page_token: str = "") -> AsyncIterator[Task]:
        """Every task the filters select, in creation order: list_tasks page
        after page, as the loop asks for more."""
        while True:
            page = await self.list_tasks(namespace=namespace, queue=queue, state=state, page_size=page_size, page_token=page_token)
            for t in page.tasks:
                yield t
            if not page.next_page_token:
                return
            page_token = page.next_page_token
