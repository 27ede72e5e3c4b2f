"""The client's options and transport: tokens, TLS, retries of an
unavailable server, reused connections the server closed, interceptors,
who asks, and bad options."""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from typing import Any, Callable, List

import pytest

import tenure
from conftest import Server, SyncAsync, need


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_tokens(kind: str, start_server: Callable[..., Server], tenure_bin: str, tmp_path: Any, queue: str) -> None:
    tokens = str(tmp_path / "tokens.jsonl")

    def token(*args: str) -> str:
        return subprocess.run([tenure_bin, "token", "create", "--auth-file", tokens, *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    admin = token("--name", "ops", "--role", "admin", "--namespace", "*")
    reader = token("--name", "eyes", "--role", "reader", "--namespace", "default")
    s = start_server("--auth-file", tokens)
    make = (lambda **kw: tenure.Client(s.url, **kw)) if kind == "sync" else (lambda **kw: SyncAsync(s.url, **kw))
    anon, ops, eyes = make(), make(token=admin), make(token=reader)
    try:
        with pytest.raises(tenure.Unauthenticated):
            anon.submit(queue=queue, payload=b"x")
        t = ops.submit(queue=queue, payload=b"x").task
        w = ops.who_am_i()
        assert w.auth_enabled and w.name == "ops" and w.role == "admin"
        assert eyes.get_task(task_id=t.task_id).task.task_id == t.task_id
        with pytest.raises(tenure.PermissionDenied) as e:
            eyes.kill_task(task_id=t.task_id)
        assert e.value.code == "permission_denied" and "reader" in e.value.message
        # Who asks is the token's name, whatever the request says.
        ops.kill_task(task_id=t.task_id, requested_by="someone else")
        h = ops.get_task_history(task_id=t.task_id).entries
        assert h[-1].requested_by == "ops"
    finally:
        for c in (anon, ops, eyes):
            c.close()
    with pytest.raises(ValueError, match="printable"):
        tenure.Client(s.url, token="has space")


def test_tls(start_server: Callable[..., Server], tmp_path: Any, queue: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        need("openssl")
    d = str(tmp_path)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=d)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
        "-subj", "/CN=test CA", "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "ext", "-out", "server.pem")
    s = start_server("--tls-cert", os.path.join(d, "server.pem"), "--tls-key", os.path.join(d, "server.key"))
    assert s.url.startswith("https://")
    ctx = tenure.tls_context(ca_file=os.path.join(d, "ca.pem"))
    with tenure.Client(s.url, ssl_context=ctx) as c:
        assert c.submit(queue=queue, payload=b"over tls").task.payload == b"over tls"
    a = SyncAsync(s.url, ssl_context=ctx)
    try:
        assert a.submit(queue=queue, payload=b"async tls").task.payload == b"async tls"
    finally:
        a.close()
    # The system's CAs do not know this one: refused, and not retried.
    for c in (tenure.Client(s.url, max_retries=3), SyncAsync(s.url, max_retries=3)):
        t0 = time.monotonic()
        with pytest.raises(tenure.TLSRefused) as e:
            c.submit(queue=queue, payload=b"x")
        assert time.monotonic() - t0 < 5 and "tried" not in str(e.value)
        c.close()
    with pytest.raises(ValueError, match="https"):
        tenure.Client("http://127.0.0.1:1", ssl_context=ctx)
    with pytest.raises(ValueError, match="together"):
        tenure.tls_context(cert_file="a.pem")


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_unavailable_is_retried_then_raised(kind: str, queue: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    c: Any = tenure.Client(url, max_retries=2, retry_backoff=0.01) if kind == "sync" else SyncAsync(url, max_retries=2, retry_backoff=0.01)
    with pytest.raises(tenure.Unavailable) as e:
        c.submit(queue=queue, payload=b"x")
    assert "tried 3 times" in str(e.value) and e.value.code == "unavailable"
    c.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_retries_reach_a_server_that_comes_back(kind: str, tenure_bin: str, tmp_path: Any, queue: str) -> None:
    """A submit retried while the server restarts lands once: the request id
    the client made keeps its retries from making a second task; and the
    connections the old server closed are replaced."""
    s = Server(tenure_bin, str(tmp_path / "data"), [])
    s.listen = f"127.0.0.1:{free_port()}"
    s.start()
    c: Any = tenure.Client(s.url, max_retries=60, retry_backoff=0.05) if kind == "sync" else SyncAsync(s.url, max_retries=60, retry_backoff=0.05)
    try:
        c.submit(queue=queue, payload=b"before")  # a connection is now pooled
        s.stop()
        out: List[Any] = []
        import threading

        th = threading.Thread(target=lambda: out.append(c.submit(queue=queue, payload=b"during", request_id=queue + "-r")))
        th.start()
        time.sleep(0.3)
        s.start()
        th.join(30)
        assert out and not out[0].duplicate
        assert c.submit(queue=queue, payload=b"during", request_id=queue + "-r").duplicate
        assert [t.payload for t in c.iter_tasks(queue=queue)] == [b"before", b"during"]
    finally:
        c.close()
        s.stop()


def test_interceptors_and_requested_by(server: Server, queue: str) -> None:
    seen: List[str] = []

    def outer(info: tenure.CallInfo, call_next: Callable[[], Any]) -> Any:
        seen.append("outer " + info.op)
        info.headers["X-Test"] = "1"
        return call_next()

    def inner(info: tenure.CallInfo, call_next: Callable[[], Any]) -> Any:
        seen.append("inner " + info.op + " " + info.headers.get("X-Test", ""))
        return call_next()

    with tenure.Client(server.url, interceptors=[outer, inner], requested_by="bob@host") as c:
        t = c.submit(queue=queue, payload=b"x").task
        c.kill_task(task_id=t.task_id)
        assert c.get_task_history(task_id=t.task_id).entries[-1].requested_by == "bob@host"
    assert seen[:2] == ["outer Submit", "inner Submit 1"]

    async def main() -> None:
        async def aouter(info: tenure.CallInfo, call_next: Any) -> Any:
            seen.append("async " + info.op)
            return await call_next()

        async with tenure.AsyncClient(server.url, interceptors=[aouter]) as ac:
            await ac.get_queue(queue=queue)

    asyncio.run(main())
    assert seen[-1] == "async GetQueue"


def test_bad_options() -> None:
    for url in ("127.0.0.1:7070", "ftp://x", "http://", "http://h:1/?q=1"):
        with pytest.raises(ValueError):
            tenure.Client(url)
    with pytest.raises(ValueError, match="max_retries"):
        tenure.Client(max_retries=1000)
    with pytest.raises(ValueError, match="retry_backoff"):
        tenure.Client(retry_backoff=10)
    with pytest.raises(ValueError, match="timeout"):
        tenure.Client(timeout=0)
    with pytest.raises(ValueError, match="interceptors"):
        tenure.Client(interceptors=[1])  # type: ignore[list-item]


def test_timeout_is_deadline_exceeded(server: Server, queue: str) -> None:
    with tenure.Client(server.url, timeout=0.3) as c:
        t0 = time.monotonic()
        # A long poll is given its wait on top of the timeout: it answers.
        assert c.lease(worker_id="t", queue=queue, wait=0.5).tasks == []
        assert time.monotonic() - t0 >= 0.45
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        with tenure.Client(f"http://127.0.0.1:{srv.getsockname()[1]}", timeout=0.3) as c:
            with pytest.raises(tenure.TenureError) as e:
                c.get_queue(queue=queue)
            assert e.value.code == "deadline_exceeded" and not isinstance(e.value, tenure.Unavailable)
    finally:
        srv.close()



