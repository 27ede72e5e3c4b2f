"""What Client and AsyncClient share: their options, and the pure steps of
a call (the request message from its arguments, the body and headers, the
answer or the error from what the server sent, the wait between retries).
The two clients differ only in how they send the bytes."""
from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import random
import secrets
import socket
import ssl
import struct
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _codec, _trace
from ._codec import CodecError
from .errors import TLSRefused, TenureError, Unavailable, _invalid, error_of
from .messages import ErrorDetail, EventFilter, Rpc, SubmitRequest, WatchEventsRequest

__version__ = "0.1.0"

DEFAULT_MAX_RETRIES = 5
MAX_MAX_RETRIES = 100
DEFAULT_RETRY_BACKOFF = 0.1
MAX_RETRY_BACKOFF = 5.0
DEFAULT_TIMEOUT = 60.0


@dataclass
class CallInfo:
    """What an interceptor sees of a call: its name ("Submit"), the request
    message, and the HTTP headers it is sent with (add your own)."""

    op: str
    request: Any
    headers: Dict[str, str] = field(default_factory=dict)


@dataclass
class _Options:
    scheme: str
    host: str
    port: int
    path: str
    base_url: str
    headers: Dict[str, str]
    requested_by: str
    max_retries: int
    retry_backoff: float
    timeout: float
    ssl_context: Optional[ssl.SSLContext]
    interceptors: List[Callable[..., Any]]


def _options(base_url: str, token: Optional[str], requested_by: str, max_retries: Optional[int],
             retry_backoff: Optional[float], timeout: Optional[float], ssl_context: Optional[ssl.SSLContext],
             interceptors: Optional[Sequence[Callable[..., Any]]], user_agent: str) -> _Options:
    """The client's options, checked: each bad one is a ValueError that says
    what to give instead."""
    u = urllib.parse.urlsplit(base_url)
    if u.scheme not in ("http", "https"):
        raise ValueError(f"base URL {base_url!r} must start with http:// or https:// (e.g. http://127.0.0.1:7070)")
    if not u.hostname:
        raise ValueError(f"base URL {base_url!r} has no host; give it as http://host:port")
    if u.query or u.fragment or u.username or u.password:
        raise ValueError(f"base URL {base_url!r} must not carry a query, fragment or user info; give it as http://host:port[/path]")
    if ssl_context is not None and u.scheme != "https":
        raise ValueError(f"ssl_context is set but base URL {base_url!r} is not https://; give it as https://host:port")
    port = u.port or (443 if u.scheme == "https" else 80)
    if max_retries is None:
        max_retries = DEFAULT_MAX_RETRIES
    elif max_retries < 0:
        max_retries = 0
    elif max_retries > MAX_MAX_RETRIES:
        raise ValueError(f"max_retries {max_retries} is above the limit of {MAX_MAX_RETRIES}")
    if retry_backoff is None:
        retry_backoff = DEFAULT_RETRY_BACKOFF
    elif not 0 < retry_backoff <= MAX_RETRY_BACKOFF:
        raise ValueError(f"retry_backoff {retry_backoff} is outside (0, {MAX_RETRY_BACKOFF}] seconds (None for the default {DEFAULT_RETRY_BACKOFF})")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    elif not timeout > 0:
        raise ValueError(f"timeout {timeout} must be a positive number of seconds")
    headers = {
        "Content-Type": "application/json",
        "Connect-Protocol-Version": "1",
        "Accept-Encoding": "gzip",
        "User-Agent": user_agent or f"tenure-python/{__version__}",
    }
    if token:
        if any(c <= " " or c >= "\x7f" for c in token):
            raise ValueError("token holds a space or a character that is not printable ASCII: pass the token as `tenure token create` printed it")
        headers["Authorization"] = "Bearer " + token
    ics = list(interceptors or ())
    for i, ic in enumerate(ics):
        if not callable(ic):
            raise ValueError(f"interceptors[{i}] is not callable")
    if requested_by and len(requested_by.encode()) > 256:
        raise ValueError("requested_by is over 256 bytes")
    return _Options(u.scheme, u.hostname, port, u.path.rstrip("/"), base_url.rstrip("/"), headers, requested_by,
                    max_retries, retry_backoff, timeout, ssl_context, ics)


def tls_context(ca_file: Optional[str] = None, cert_file: Optional[str] = None, key_file: Optional[str] = None) -> ssl.SSLContext:
    """An SSL context for an https:// server: the CA to trust (ca_file,
    PEM; None: the system's) and a client certificate (cert_file and
    key_file, PEM) for a server that requires one (tenure server
    --tls-client-ca). Pass it as ssl_context to Client or AsyncClient."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("give cert_file and key_file together (the client certificate and its key), or neither")
    ctx = ssl.create_default_context(cafile=ca_file)
    if cert_file is not None:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


# The request --------------------------------------------------------------


def prepare(o: _Options, rpc: Rpc, request: Any, args: Any, kwargs: Dict[str, Any]) -> Any:
    """The request message of a call, from the message given or from the
    keyword arguments, with what the client fills in: a request id for each
    submit without one (so the client's retries never create a second
    task), the trace context of the current span, requested_by, and the
    kind and payload of args."""
    cls = rpc.request
    if request is None:
        request = cls(**{k: v for k, v in kwargs.items() if v is not None})
    else:
        if not isinstance(request, cls):
            raise TypeError(f"{_snake(rpc.name)}: the request is a {type(request).__name__}; want a {cls.__name__}")
        defaults = cls()
        given = [k for k, v in kwargs.items() if v is not None and v != getattr(defaults, k)]
        if given or args is not None:
            raise TypeError(f"{_snake(rpc.name)}: give the request as a {cls.__name__} or as keyword arguments, not both "
                            f"({', '.join(given + (['args'] if args is not None else []))} given with it)")
        request = dataclasses.replace(request)  # the caller's stays as it was
    if args is not None:
        _apply_args(rpc.name, request, args)
    names = {f.name for f in cls._FIELDS}
    if "requested_by" in names and not request.requested_by and o.requested_by:
        request.requested_by = o.requested_by
    if isinstance(request, SubmitRequest):
        _fill_submit(request)
    elif rpc.name == "SubmitBatch":
        reqs = []
        for i, r in enumerate(request.requests):
            if isinstance(r, dict):
                r = dict(r)
                a = r.pop("args", None)
                try:
                    r = SubmitRequest(**r)
                except TypeError as e:
                    raise TypeError(f"submit_batch: requests[{i}]: {e}") from None
                if a is not None:
                    _apply_args(f"SubmitBatch requests[{i}]", r, a)
            elif isinstance(r, SubmitRequest):
                r = dataclasses.replace(r)
            else:
                raise TypeError(f"submit_batch: requests[{i}] is a {type(r).__name__}; want a SubmitRequest or a dict of its fields")
            _fill_submit(r)
            reqs.append(r)
        request.requests = reqs
    return request


def _fill_submit(r: SubmitRequest) -> None:
    if not r.request_id:
        r.request_id = secrets.token_hex(16)
    if r.trace_context is None:
        r.trace_context = _trace.current_trace_context()


# The defaults a tenure.kind type gives the fields of its submits.
_KIND_DEFAULTS = ("namespace", "queue", "execution_window", "retry_policy", "priority", "timeout")


def _apply_args(op: str, request: Any, args: Any) -> None:
    if request.payload:
        raise TypeError(f"{op}: give payload or args, not both")
    info = getattr(type(args), "__tenure_kind__", None)
    if info is not None:
        if not request.kind:
            request.kind = info.kind
        for name in _KIND_DEFAULTS:
            v = info.defaults.get(name)
            if v is not None and hasattr(request, name) and getattr(request, name) in (None, "", 0):
                setattr(request, name, v)
    try:
        request.payload = _codec.encode_args(args)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{op}: args do not encode as JSON: {e}") from None


def encode(rpc: Rpc, msg: Any) -> bytes:
    """The JSON body of a request."""
    try:
        return json.dumps(_codec.to_json(msg), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except CodecError as e:
        raise _invalid(rpc.name, "", f"the request cannot be encoded: {e}") from None


def call_timeout(o: _Options, msg: Any) -> float:
    """The time a call may take: the client's timeout, and a long poll's wait
    on top (Lease, CompleteBatch with a lease)."""
    wait = getattr(msg, "wait", None)
    lease = getattr(msg, "lease", None)
    if lease is not None and not isinstance(lease, dict):
        wait = getattr(lease, "wait", None)
    if wait is None:
        return o.timeout
    try:
        return o.timeout + _codec.as_timedelta(wait).total_seconds()
    except (TypeError, ValueError):
        return o.timeout


# The answer ---------------------------------------------------------------

# The Connect protocol's codes of HTTP statuses, for an answer without a
# Connect error in its body (from a proxy).
_CODE_OF_STATUS = {400: "internal", 401: "unauthenticated", 403: "permission_denied", 404: "unimplemented",
                   429: "unavailable", 502: "unavailable", 503: "unavailable", 504: "unavailable"}


def decode(rpc: Rpc, status: int, headers: Mapping[str, str], body: bytes) -> Any:
    """The response message of an answer, or raises its TenureError."""
    if status == 200:
        try:
            return _codec.from_json(rpc.response, json.loads(body) if body else {})
        except (ValueError, CodecError) as e:
            raise TenureError(rpc.name, "internal", f"the server's answer does not decode as {rpc.response.__name__}: {e}") from None
    raise error_of_answer(rpc.name, status, headers, body)


def error_of_answer(op: str, status: int, headers: Mapping[str, str], body: bytes) -> TenureError:
    """The exception of an answer that is not 200: the Connect error in its
    body (code, message, the tenure ErrorDetail), or one from its status."""
    try:
        wire = json.loads(body)
    except ValueError:
        wire = None
    if not isinstance(wire, dict) or not isinstance(wire.get("code"), str):
        text = body[:200].decode("utf-8", "replace").strip()
        return error_of(op, _CODE_OF_STATUS.get(status, "unknown"), f"HTTP {status} without a Connect error (a proxy?): {text}")
    return error_of_wire(op, wire)


def error_of_wire(op: str, wire: Dict[str, Any]) -> TenureError:
    """The exception of a Connect error as JSON ({code, message, details}),
    as a unary answer's body or a stream's end carries it."""
    detail = None
    for d in wire.get("details") or ():
        if isinstance(d, dict) and d.get("type") == "tenure.v1.ErrorDetail":
            detail = _detail(d)
            break
    return error_of(op, str(wire.get("code") or "unknown"), str(wire.get("message", "")), detail)


def _detail(d: Dict[str, Any]) -> Optional[ErrorDetail]:
    try:
        return _codec.from_binary(ErrorDetail, _codec.decode_base64(d.get("value", "")))
    except (ValueError, CodecError):
        pass
    try:
        return _codec.from_json(ErrorDetail, d.get("debug") or {})
    except (ValueError, CodecError):
        return None


def transport_error(op: str, o: _Options, e: BaseException) -> TenureError:
    """The exception of a call that never got an answer: unavailable (it is
    retried), or TLSRefused for a handshake that cannot succeed."""
    from .errors import TLSRefused, Unavailable

    if isinstance(e, (TimeoutError, socket.timeout, asyncio.TimeoutError)):
        return TenureError(op, "deadline_exceeded", f"no answer from {o.base_url} within the call's timeout "
                           f"({o.timeout:g}s, a long poll's wait on top; the client's timeout=): {type(e).__name__}")
    if isinstance(e, ssl.SSLCertVerificationError) or (isinstance(e, ssl.SSLError) and "CERTIFICATE" in str(e).upper()):
        return TLSRefused(op, "unavailable", f"TLS handshake with {o.host}:{o.port} failed: {e}")
    return Unavailable(op, "unavailable", f"no answer from {o.base_url}: {type(e).__name__}: {e}")


def backoff(o: _Options, attempt: int, cap: float = MAX_RETRY_BACKOFF) -> float:
    """The wait before retry attempt+1: doubling from retry_backoff up to cap
    (5s), with jitter (between half of it and all of it)."""
    d = min(o.retry_backoff * (2 ** min(attempt, 30)), cap)
    return d / 2 + random.random() * d / 2


def exhausted(e: TenureError, tries: int) -> TenureError:
    """e after tries tries, saying so."""
    if tries > 1:
        e.message += f" (tried {tries} times: the server is down, restarting or overloaded; try again later)"
        e.args = (str(e),)
    return e


# Waiting for a task -------------------------------------------------------

# The longest wait of one WaitTask (the server's bound).
MAX_TASK_WAIT = 30.0


def next_wait(deadline: Optional[float], now: float) -> float:
    """The wait of the next WaitTask of a wait that ends at deadline (None:
    never): the server's longest, or what is left."""
    if deadline is None:
        return MAX_TASK_WAIT
    return max(0.0, min(MAX_TASK_WAIT, deadline - now))


def check_wait(task_id: str, r: Any, deadline: Optional[float], now: float, timeout: Optional[float]) -> None:
    """Raises TimeoutError when a wait for a task that has not ended is past
    its deadline."""
    if deadline is not None and now >= deadline:
        state = r.task.state.name if r.task is not None else "unknown"
        raise TimeoutError(f"task {task_id} had not ended after {timeout:g}s (it is {state}); wait again, or longer")


# Streams ------------------------------------------------------------------
#
# A server-streaming call is the Connect streaming protocol with JSON
# (connectrpc.com/docs/protocol): a POST of Content-Type
# application/connect+json whose body is the request as one enveloped
# message, answered by a sequence of enveloped messages. An envelope is a
# flag byte, the length of the data as 4 bytes big-endian, and the data;
# flag 0x02 marks the last, the end of the stream: a JSON object with an
# optional "error" ({code, message, details}, as a unary error) and
# "metadata" (trailers).

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
# The largest message of a stream this client takes (a server's answer of
# up to 1,000 events, each with its payload).
MAX_STREAM_MESSAGE = 256 << 20


def stream_headers(headers: Mapping[str, str]) -> Dict[str, str]:
    """The headers of a server-streaming call, from the client's: the
    streaming content type, and no HTTP compression (a stream's messages
    would be compressed one by one, which this client does not ask for)."""
    h = {k: v for k, v in headers.items() if k not in ("Content-Type", "Accept-Encoding")}
    h["Content-Type"] = "application/connect+json"
    return h


def envelope(data: bytes, flags: int = 0) -> bytes:
    """data as one enveloped message of a stream."""
    return struct.pack(">BI", flags, len(data)) + data


def envelope_prefix(op: str, prefix: bytes) -> Tuple[int, int]:
    """The flags and the length of the message whose 5-byte prefix this is."""
    flags, n = struct.unpack(">BI", prefix)
    if n > MAX_STREAM_MESSAGE:
        raise TenureError(op, "resource_exhausted", f"the server sent a stream message of {n} bytes, over this client's "
                          f"limit of {MAX_STREAM_MESSAGE}")
    return flags, n


def stream_message(rpc: Rpc, flags: int, data: bytes, encoding: str) -> Any:
    """The response message an envelope holds, or None for the end of the
    stream; raises the error the end of the stream carries. encoding is the
    stream's Connect-Content-Encoding."""
    if flags & FLAG_COMPRESSED:
        if encoding != "gzip":
            raise TenureError(rpc.name, "internal", f"the server sent a message compressed with {encoding or 'nothing named'!r}, "
                              "which this client did not ask for")
        data = gzip.decompress(data)
    if flags & FLAG_END_STREAM:
        try:
            end = json.loads(data) if data else {}
        except ValueError as e:
            raise TenureError(rpc.name, "internal", f"the end of the stream is not JSON: {e}") from None
        err = end.get("error") if isinstance(end, dict) else None
        if isinstance(err, dict):
            raise error_of_wire(rpc.name, err)
        return None
    try:
        return _codec.from_json(rpc.response, json.loads(data) if data else {})
    except (ValueError, CodecError) as e:
        raise TenureError(rpc.name, "internal", f"a message of the stream does not decode as {rpc.response.__name__}: {e}") from None


def stream_broken(op: str, o: _Options, e: Optional[BaseException] = None) -> TenureError:
    """The exception of a stream that ended without its end message: the
    connection dropped (the server stopped, a proxy cut it), or no answer
    came within the client's timeout."""
    if e is not None:
        return transport_error(op, o, e)
    return Unavailable(op, "unavailable", f"the stream from {o.base_url} broke before its end (the connection closed)")


# Watching the events ------------------------------------------------------

# The longest wait between two tries to open a watch's stream again.
MAX_WATCH_BACKOFF = 10.0


def watch_request(namespace: str, queue: str, task_id: str, types: Optional[Sequence[str]], cursor: str) -> WatchEventsRequest:
    """The WatchEvents request of a watch."""
    if isinstance(types, str):
        raise TypeError("watch: types is a list of record type names (\"TaskCompleted\", ...), not one string")
    return WatchEventsRequest(cursor=cursor, filter=EventFilter(namespace=namespace, queue=queue, task_id=task_id,
                                                                types=list(types or ())))


class Watching:
    """Where a watch stands: the request of its next stream (its cursor
    moved along as events are yielded), and the tries that failed since the
    last one that received anything."""

    def __init__(self, o: _Options, req: WatchEventsRequest):
        self.o = o
        self.req = req
        self.failures = 0
        self.progressed = False

    def request(self) -> WatchEventsRequest:
        """The request of the next stream, from the last cursor."""
        self.progressed = False
        return dataclasses.replace(self.req)

    def moved(self, cursor: str) -> None:
        """The stream got as far as cursor (an event's, or an answer's)."""
        self.progressed = True
        if cursor:
            self.req.cursor = cursor

    def wait_after(self, err: Optional[TenureError]) -> float:
        """The wait before the next stream, after one that ended with err
        (None: the server ended it); raises err when retrying cannot help."""
        if err is None:
            err = Unavailable("WatchEvents", "unavailable", "the server ended the stream")
        if not watch_retries(err):
            raise err
        if self.progressed:
            self.failures = 0
        self.failures += 1
        return backoff(self.o, self.failures - 1, MAX_WATCH_BACKOFF)


def watch_retries(e: TenureError) -> bool:
    """Whether a watch opens its stream again after e: unless the server
    refused it for good (an expired or invalid cursor, a bad filter, no
    permission)."""
    if isinstance(e, TLSRefused):
        return False
    return e.code not in ("invalid_argument", "unauthenticated", "permission_denied", "out_of_range", "unimplemented",
                          "failed_precondition", "not_found")


def _snake(name: str) -> str:
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i:
            out.append("_")
        out.append(c.lower())
    return "".join(out)


class TaskKind:
    """What tenure.kind records on a type: its kind and its submit defaults."""

    def __init__(self, kind: str, defaults: Dict[str, Any]):
        self.kind = kind
        self.defaults = defaults


def check_kind(kind: str) -> None:
    """Checks a kind as the server does: 1 to 128 bytes of letters, digits
    and . _ - : /."""
    if not isinstance(kind, str) or not 1 <= len(kind) <= 128:
        raise ValueError(f"kind {kind!r}: a kind is 1 to 128 bytes")
    for c in kind:
        if not (c.isascii() and (c.isalnum() or c in "._-:/")):
            raise ValueError(f"kind {kind!r} holds {c!r}: a kind is letters, digits and . _ - : / only")


def kind(name: str, *, queue: Optional[str] = None, namespace: Optional[str] = None,
         execution_window: Optional[Any] = None, retry_policy: Optional[Any] = None, priority: Optional[int] = None,
         timeout: Optional[Any] = None) -> Callable[[type], type]:
    """Makes a class a typed task (the Go SDK's client.Args): its kind names
    the work, its fields are the task's arguments, and the keyword
    arguments are the defaults of its submits (the Go SDK's SubmitOptions).

        @tenure.kind("send_email", queue="emails")
        @dataclass
        class SendEmail:
            to: str

        client.submit(args=SendEmail(to="ada@example.com"))   # kind send_email, queue emails

        @worker.task(SendEmail)
        def send_email(task: tenure.Task) -> None:
            mailer.send(task.args.to)    # task.args is a SendEmail

    The payload is the JSON of its fields (dataclasses.asdict); a worker
    makes the instance back with cls(**fields).
    """
    check_kind(name)
    defaults = {"queue": queue, "namespace": namespace, "execution_window": execution_window,
                "retry_policy": retry_policy, "priority": priority, "timeout": timeout}

    def mark(cls: type) -> type:
        cls.__tenure_kind__ = TaskKind(name, {k: v for k, v in defaults.items() if v is not None})  # type: ignore[attr-defined]
        return cls

    return mark


def kind_of(cls: Any) -> Optional[TaskKind]:
    """The TaskKind of a type made with tenure.kind, or None."""
    return getattr(cls, "__tenure_kind__", None)



class _Base:
    """The type of what Calls and AsyncCalls call (for type checkers)."""

    def _call(self, rpc: Rpc, request: Any, args: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError
