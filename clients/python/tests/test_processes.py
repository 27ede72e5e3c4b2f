"""The commit boundary with real worker processes, their effects counted
in a file: a stalled worker's late commit is refused and its effects
never run; a worker killed -9 after its commit and its effects is
finalised by another without a second effect; SIGTERM stops a worker
gracefully."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest

import tenure
from conftest import Server, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))


def lines(path: str) -> List[str]:
    try:
        with open(path) as f:
            return [l for l in f.read().splitlines() if l]
    except FileNotFoundError:
        return []


class Proc:
    def __init__(self, mode: str, url: str, queue: str, d: str, name: str, **env: str):
        self.log_path = os.path.join(d, name + ".log")
        self.log = open(self.log_path, "wb")
        e = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **env)
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "procworker.py"), mode, url, queue, d],
                                  stdout=self.log, stderr=subprocess.STDOUT, env=e)

    def output(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def signal(self, sig: int) -> None:
        self.p.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        return self.p.wait(timeout)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def procs() -> Any:
    ps: List[Proc] = []
    yield ps
    for p in ps:
        p.kill()


def test_stalled_raw_commit_is_refused(server: Server, client: tenure.Client, queue: str, tmp_path: Any, procs: List[Proc]) -> None:
    """A leases and stalls past its window; B (a Worker process) leases the
    task again, commits and applies its effect; A's late commit is refused
    (AlreadyCommitted, naming B's lease) and A applies nothing."""
    d = str(tmp_path)
    tid = client.submit(queue=queue, kind="charge", args={"cents": 5}, execution_window=1).task.task_id
    a = Proc("raw", server.url, queue, d, "a")
    procs.append(a)
    wait_for(lambda: lines(os.path.join(d, "leased")), what="A's lease")
    b = Proc("effects", server.url, queue, d, "b")
    procs.append(b)
    wait_for(lambda: client.get_task(task_id=tid).task.state == tenure.TaskState.COMPLETED, what="B's completion")
    open(os.path.join(d, "go"), "w").close()
    assert a.wait() == 0
    assert "refused: AlreadyCommitted" in a.output(), a.output()
    b.signal(signal.SIGTERM)
    assert b.wait() == 0, b.output()
    t = client.get_task(task_id=tid).task
    assert "committed_by=" + t.executions[1].lease_id in a.output()
    effects = lines(os.path.join(d, "effects"))
    assert len(effects) == 1 and effects[0].split()[:2] == [tid, str(b.p.pid)] and effects[0].split()[2] == "2"
    kinds = [e.type for e in client.get_task_history(task_id=tid).entries]
    assert "LeaseExpired" in kinds and kinds.count("TaskCommitted") == 1 and "TaskCancelled" in kinds


def test_stalled_worker_applies_no_effects(server: Server, client: tenure.Client, queue: str, tmp_path: Any, procs: List[Proc]) -> None:
    """Worker A stops (SIGSTOP: a pause of the whole process) in its handler
    past its window; B commits and applies; A, resumed, learns its lease was
    lost and applies nothing: one effect, B's."""
    d = str(tmp_path)
    tid = client.submit(queue=queue, kind="charge", args={"cents": 5}, execution_window=1).task.task_id
    a = Proc("effects", server.url, queue, d, "a", SLOW_COMPUTE="0.5")
    procs.append(a)
    wait_for(lambda: lines(os.path.join(d, "computing")), what="A's handler")
    a.signal(signal.SIGSTOP)
    time.sleep(1.5)
    b = Proc("effects", server.url, queue, d, "b")
    procs.append(b)
    wait_for(lambda: client.get_task(task_id=tid).task.state == tenure.TaskState.COMPLETED, what="B's completion")
    a.signal(signal.SIGCONT)
    wait_for(lambda: "lease lost" in a.output() or "commit refused" in a.output(), what="A learning its lease was lost")
    for p in (a, b):
        p.signal(signal.SIGTERM)
        assert p.wait() == 0, p.output()
    effects = lines(os.path.join(d, "effects"))
    assert len(effects) == 1 and effects[0].split()[:2] == [tid, str(b.p.pid)], effects
    assert lines(os.path.join(d, "skipped")) == [], "A never even tried to apply"
    assert client.get_task(task_id=tid).task.executions[0].committed_at is None


def test_killed_after_commit_is_finalised_once(server: Server, client: tenure.Client, queue: str, tmp_path: Any, procs: List[Proc]) -> None:
    """A commits, applies its effect and is killed -9 before it completes the
    task; once its lease expires B leases the task to finalise it: B runs
    the effects again (not the handler) with the committed result, and the
    effect, keyed by the task, is not applied a second time."""
    d = str(tmp_path)
    tid = client.submit(queue=queue, kind="charge", args={"cents": 5}, execution_window=1).task.task_id
    a = Proc("effects", server.url, queue, d, "a", HANG_AFTER_EFFECTS="1")
    procs.append(a)
    wait_for(lambda: lines(os.path.join(d, "applied")), what="A's effect")
    a.p.kill()
    a.p.wait()
    assert client.get_task(task_id=tid).task.state == tenure.TaskState.COMMITTED
    b = Proc("effects", server.url, queue, d, "b")
    procs.append(b)
    wait_for(lambda: client.get_task(task_id=tid).task.state == tenure.TaskState.COMPLETED, what="B's finalisation")
    b.signal(signal.SIGTERM)
    assert b.wait() == 0, b.output()
    assert "finalising a task committed by an earlier attempt" in b.output()
    effects = lines(os.path.join(d, "effects"))
    assert len(effects) == 1 and effects[0].split() == [tid, str(a.p.pid), "1"], effects
    assert [l.split()[1] for l in lines(os.path.join(d, "skipped"))] == [str(b.p.pid)], "B ran the effects, which did nothing twice"
    assert [l.split()[1] for l in lines(os.path.join(d, "computed"))] == [str(a.p.pid)], "B did not run the handler"
    t = client.get_task(task_id=tid).task
    assert t.result == b'{"cents":5}' and len(t.executions) == 2 and t.executions[1].status == tenure.ExecutionStatus.DONE


@pytest.mark.parametrize("flavor", ["thread", "asyncio"])
def test_sigterm_is_a_graceful_shutdown(flavor: str, server: Server, client: tenure.Client, queue: str, tmp_path: Any, procs: List[Proc]) -> None:
    d = str(tmp_path)
    tid = client.submit(queue=queue, kind="slow", payload=b"{}").task.task_id
    env: Dict[str, str] = {"ASYNC": "1"} if flavor == "asyncio" else {}
    p = Proc("sigterm", server.url, queue, d, "w", **env)
    procs.append(p)
    wait_for(lambda: lines(os.path.join(d, "running")), what="the handler")
    p.signal(signal.SIGTERM)
    assert p.wait() == 0, p.output()
    assert lines(os.path.join(d, "finished")) == [tid]
    assert client.get_task(task_id=tid).task.state == tenure.TaskState.COMPLETED
    assert "shutting down gracefully" in p.output() and "stopped" in p.output()
