"""10,000 tasks through a threaded Worker and through an AsyncWorker
against a real server: every task handled once and COMPLETED after one
attempt (bench.py, which also prints the throughput and CPU per task)."""
from __future__ import annotations

import sys

import pytest

from conftest import PKG, Server

sys.path.insert(0, PKG)
import bench  # noqa: E402


@pytest.mark.parametrize("flavor", ["thread", "asyncio"])
def test_ten_thousand_tasks_each_completed_once(flavor: str, server: Server) -> None:
    r = bench.run(server.url, 10000, flavor, 64, 64)
    print(r)
    assert r["problems"] == [] and r["handled"] == 10000 and r["completed_once"] == 10000
