"""Fixtures: a real `tenure server` per test session (and more on demand),
from the binary at $TENURE_BIN, else built from this checkout with
`go build`. Each test works in queues of its own (the queue fixture)."""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PKG))
sys.path.insert(0, PKG)

import tenure  # noqa: E402

CI = bool(os.environ.get("CI"))


def need(what: str) -> None:
    """Skips a test that needs what is missing, or, with CI set, fails it."""
    if CI:
        pytest.fail(f"{what} is missing (CI is set: tests do not skip)")
    pytest.skip(f"{what} is missing")


@pytest.fixture(scope="session")
def tenure_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    b = os.environ.get("TENURE_BIN")
    if b:
        if not os.access(b, os.X_OK):
            pytest.fail(f"TENURE_BIN={b} is not an executable")
        return b
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if go is None:
        need("go (to build tenure; or set TENURE_BIN)")
    out = str(tmp_path_factory.mktemp("bin") / "tenure")
    subprocess.run([go, "build", "-o", out, "./cmd/tenure"], cwd=REPO, check=True)
    return out


class Server:
    """A tenure server process on a free port of 127.0.0.1."""

    def __init__(self, binary: str, data_dir: str, flags: List[str], scheme: str = "http"):
        self.data_dir = data_dir
        self.log_path = data_dir + ".log"
        self.binary = binary
        self.flags = flags
        self.scheme = scheme
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""
        self.listen = "127.0.0.1:0"

    def start(self) -> "Server":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary, "server", "--listen", self.listen, "--data-dir", self.data_dir] + self.flags,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                m = re.findall(rb"tenure serving on (https?://[^ \s]+)", f.read())
            if m:
                self.url = m[-1].decode()
                self.listen = self.url.split("://", 1)[1]
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"tenure server did not start; its log:\n{self.log()}")

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def start_server(tenure_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Server]]:
    """Starts a server with the flags given; each is stopped at the end."""
    servers: List[Server] = []

    def start(*flags: str, scheme: str = "http") -> Server:
        d = str(tmp_path_factory.mktemp("server") / "data")
        s = Server(tenure_bin, d, list(flags), scheme).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def server(start_server: Callable[..., Server]) -> Server:
    """The session's server: 200 KiB payloads at most (so that oversize
    payloads are cheap to send), the rest as by default."""
    return start_server("--max-payload-bytes", str(200 << 10))


@pytest.fixture
def client(server: Server) -> Iterator[tenure.Client]:
    c = tenure.Client(server.url)
    yield c
    c.close()


@pytest.fixture
def queue() -> str:
    """A queue of the test's own."""
    return "q-" + uuid.uuid4().hex[:12]


class SyncAsync:
    """An AsyncClient driven from synchronous test code: each call runs on
    an event loop of a thread of its own, so that one test body checks both
    clients."""

    def __init__(self, url: str, **kw: Any):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.inner = self.run(self._make(url, kw))

    async def _make(self, url: str, kw: Dict[str, Any]) -> tenure.AsyncClient:
        return tenure.AsyncClient(url, **kw)

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name == "iter_tasks":
            def gen(**kw: Any) -> Any:
                async def collect() -> List[Any]:
                    return [t async for t in attr(**kw)]
                return iter(self.run(collect()))
            return gen
        if callable(attr) and asyncio.iscoroutinefunction(attr):
            return lambda *a, **kw: self.run(attr(*a, **kw))
        return attr

    def close(self) -> None:
        self.run(self.inner.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


@pytest.fixture(params=["sync", "async"])
def any_client(request: pytest.FixtureRequest, server: Server) -> Iterator[Any]:
    """A Client, or an AsyncClient run from sync code: a test with it runs
    once with each."""
    if request.param == "sync":
        c: Any = tenure.Client(server.url)
    else:
        c = SyncAsync(server.url)
    yield c
    c.close()


def wait_for(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    """Polls cond until it is true (returns its value), failing after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False

