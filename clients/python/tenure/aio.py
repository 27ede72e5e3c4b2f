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
from .messages import Rpc, Task, TaskState

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
        o = self.o
        ctx = None
        if o.scheme == "https":
            ctx = o.ssl_context if o.ssl_context is not None else ssl.create_default_context()
        r, w = await asyncio.open_connection(o.host, o.port, ssl=ctx, server_hostname=o.host if ctx else None)
        return _Conn(r, w), False

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
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            chunks = []
            while True:
                size = int((await c.reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await c.reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(await c.reader.readexactly(size))
                await c.reader.readline()
            data = b"".join(chunks)
        elif "content-length" in hdrs:
            data = await c.reader.readexactly(int(hdrs["content-length"]))
        else:
            data = await c.reader.read()
            keep = False
        return status, hdrs, data, keep


class AsyncClient(AsyncCalls):
    """Client for asyncio: the same calls as coroutines, with the same
    options, errors and retries (see Client).

        async with tenure.AsyncClient("http://127.0.0.1:7070") as client:
            r = await client.submit(queue="emails", kind="send_email", args={"to": "ada@example.com"})

    An AsyncClient belongs to the event loop it is first used on.
    Interceptors are coroutine functions: await interceptor(info, call_next).
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
        o = self._o
        body = _base.encode(rpc, msg)
        timeout = _base.call_timeout(o, msg)
        path = o.path + rpc.path
        attempt = 0
        while True:
            try:
                status, hdrs, data = await self._pool.roundtrip(path, body, headers, timeout)
                return _base.decode(rpc, status, hdrs, data)
            except TenureError as e:
                err = e
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                err = _base.transport_error(rpc.name, o, e)
            if not isinstance(err, Unavailable) or attempt >= o.max_retries:
                raise _base.exhausted(err, attempt + 1) if isinstance(err, Unavailable) else err
            await asyncio.sleep(_base.backoff(o, attempt))
            attempt += 1

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
