"""OpenTelemetry: a submit carries the current span's trace context, and
each attempt's span, "process <queue>" (a consumer span), continues that
trace, is current while the handler runs, and ends with the attempt's
outcome. The scenario (otel_scenario.py) runs in a process of its own
against a stand-in of the opentelemetry packages (tests/otelstub, always),
and against the real opentelemetry-api and -sdk where
TENURE_OTEL_PYTHONPATH names them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest

import tenure
from conftest import HERE, Server


def scenario(url: str, queue: str, pythonpath: str) -> List[Dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=pythonpath, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, os.path.join(HERE, "otel_scenario.py"), url, queue], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("otel", ["stand-in", "real"])
def test_traces_run_from_submit_through_every_attempt(otel: str, server: Server, queue: str) -> None:
    if otel == "real":
        path = os.environ.get("TENURE_OTEL_PYTHONPATH")
        if not path:
            pytest.skip("TENURE_OTEL_PYTHONPATH does not name the opentelemetry-api and -sdk sources (no package index here)")
    else:
        path = os.path.join(HERE, "otelstub")
    spans = scenario(server.url, queue, path)
    by_name: Dict[str, List[Dict[str, Any]]] = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    submitter = by_name["submitter"][0]
    process = by_name["process " + queue]
    assert len(process) == 3
    traced = [s for s in process if s["parent_id"] == submitter["span_id"]]
    assert len(traced) == 2 and all(s["trace_id"] == submitter["trace_id"] for s in traced)
    untraced = [s for s in process if s["parent_id"] is None]
    assert len(untraced) == 1 and untraced[0]["trace_id"] != submitter["trace_id"]
    for s in process:
        assert s["kind"] == "CONSUMER"
        a = s["attributes"]
        assert a["messaging.system"] == "tenure" and a["messaging.destination.name"] == queue
        assert a["messaging.operation.type"] == "process" and a["tenure.attempt"] == 1 and a["tenure.lease_id"]
        assert a["tenure.namespace"] == "default" and a["messaging.message.id"] and a["tenure.worker_id"]
    outcomes = sorted((s["attributes"]["tenure.outcome"], s["status"], tuple(s["events"])) for s in process)
    assert outcomes == [("completed", "OK", ()), ("completed", "OK", ()), ("failed", "ERROR", ("exception",))]
    # The handlers' spans are children of their attempt's.
    ids = {s["span_id"] for s in process}
    assert all(h["parent_id"] in ids for h in by_name["handler"]) and len(by_name["handler"]) == 2
    (aprocess,) = by_name["process " + queue + "-async"]
    assert aprocess["parent_id"] == submitter["span_id"]
    assert by_name["async handler"][0]["parent_id"] == aprocess["span_id"]


def test_without_opentelemetry_nothing_is_sent(client: tenure.Client, queue: str) -> None:
    assert not tenure._trace.available()
    assert client.submit(queue=queue, payload=b"x").task.trace_context is None
