"""The generated code is what generate.py makes of proto/tenure/v1, and
covers every call and every field; the JSON codec and the binary decoding
of error details."""
from __future__ import annotations

import base64
import dataclasses
import inspect
import keyword
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

import tenure
from tenure import _codec, messages as m
from tenure._calls import AsyncCalls, Calls
from conftest import PKG, REPO

PROTO = os.path.join(REPO, "proto", "tenure", "v1")


def proto_text() -> str:
    return "".join(open(os.path.join(PROTO, n)).read() for n in sorted(os.listdir(PROTO)) if n.endswith(".proto"))


def test_generated_code_is_up_to_date() -> None:
    r = subprocess.run([sys.executable, os.path.join(PKG, "generate.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_rpc_has_a_method_with_every_field() -> None:
    rpcs = re.findall(r"^\s*rpc (\w+)\((\w+)\) returns \((stream )?(\w+)\)", proto_text(), re.M)
    assert len(rpcs) == len(m.RPCS) >= 36
    assert {"WaitTask", "WatchEvents"} <= set(m.RPCS)
    for name, req, stream, resp in rpcs:
        rpc = m.RPCS[name]
        assert rpc.request.__name__ == req and rpc.response.__name__ == resp
        assert rpc.server_streaming == bool(stream), name
        method = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
        fields = {f.name for f in dataclasses.fields(rpc.request)}
        for cls in (tenure.Client, tenure.AsyncClient):
            fn = getattr(cls, method)
            if stream:
                # A stream: an iterator (a generator; an async iterator),
                # not a coroutine.
                ret = inspect.signature(fn).return_annotation
                assert not inspect.iscoroutinefunction(fn), (cls, method)
                assert ret.startswith("AsyncIterator[" if cls is tenure.AsyncClient else "Iterator["), (cls, method, ret)
            else:
                assert inspect.iscoroutinefunction(fn) == (cls is tenure.AsyncClient), (cls, method)
            params = set(inspect.signature(fn).parameters) - {"self", "request", "args"}
            assert params == fields, (cls.__name__, method, params ^ fields)
    assert set(dir(Calls)) - set(dir(object)) == set(dir(AsyncCalls)) - set(dir(object))


def test_every_message_and_field_is_generated() -> None:
    text = proto_text()
    for msg, body in re.findall(r"^message (\w+) \{(?:\}$|(.*?)^\})", text, re.M | re.S):
        cls = getattr(m, msg)
        # Oneof members are fields; a name that is a Python keyword gets _.
        want = {n + "_" if keyword.iskeyword(n) else n
                for n in re.findall(r"^\s+(?:repeated |optional )?[\w.]+ (\w+) = \d+;", body, re.M)}
        assert {f.name for f in dataclasses.fields(cls)} == want, msg
        assert {f.name for f in cls._FIELDS} == want, msg
    for enum_name, body in re.findall(r"^enum (\w+) \{(.*?)^\}", text, re.M | re.S):
        cls = getattr(m, enum_name)
        values = re.findall(r"^\s+(\w+) = (\d+);", body, re.M)
        assert [(cls._proto_prefix + e.name, e.value) for e in cls] == [(n, int(v)) for n, v in values]


def test_json_round_trip() -> None:
    t = m.Task(task_id="t", payload=b"\x00\xff", state=m.TaskState.LEASED, attempt=2, priority=-3,
               execution_window=timedelta(seconds=1, microseconds=500000),
               created_at=datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc),
               retry_policy=m.RetryPolicy(max_attempts=3, backoff_multiplier=2.5),
               executions=[m.Execution(attempt=1, status=m.ExecutionStatus.DONE)],
               progress=m.Progress(message="m", percent=0))
    j = _codec.to_json(t)
    assert j["payload"] == "AP8=" and j["state"] == "TASK_STATE_LEASED" and j["executionWindow"] == "1.5s"
    assert j["createdAt"] == "2026-01-02T03:04:05.123456Z" and j["priority"] == -3
    assert j["progress"] == {"message": "m", "percent": 0}, "an optional field set to 0 is sent"
    assert "requestId" not in j, "zero values are left out"
    assert _codec.from_json(m.Task, j) == t
    assert _codec.to_json(m.QueueEvents(submitted=2**40))["submitted"] == str(2**40)
    assert _codec.from_json(m.QueueEvents, {"submitted": "1099511627776", "unknownField": 1}).submitted == 2**40
    assert _codec.from_json(m.Queue, {"last5Minutes": {"failed": "2"}}).last_5_minutes.failed == 2


def test_oneofs_and_keyword_fields() -> None:
    ev = _codec.from_json(m.Event, {"type": "TaskCompleted", "lsn": "7", "taskCompleted": {"result": "b2s="}})
    assert ev.lsn == 7 and ev.record == m.TaskCompletedEvent(result=b"ok") and ev.task_created is None
    assert m.Event().record is None
    assert _codec.from_json(m.Event, {"taskDeadlineExceeded": {}}).record == m.TaskDeadlineExceededEvent()
    s = _codec.from_json(m.ScheduleSkippedEvent, {"from": "2026-01-01T00:00:00Z"})
    assert s.from_ == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert _codec.to_json(s) == {"from": "2026-01-01T00:00:00Z"}


def test_stream_envelopes() -> None:
    from tenure import _base
    rpc = m.RPCS["WatchEvents"]
    assert _base.envelope(b'{"a":1}') == b"\x00\x00\x00\x00\x07{\"a\":1}"
    assert _base.envelope_prefix("X", b"\x02\x00\x00\x01\x00") == (2, 256)
    with pytest.raises(tenure.TenureError, match="over this client's limit"):
        _base.envelope_prefix("X", b"\x00\xff\xff\xff\xff")
    msg = _base.stream_message(rpc, 0, b'{"cursor":"c1","caughtUp":true}', "")
    assert msg == m.WatchEventsResponse(cursor="c1", caught_up=True)
    assert _base.stream_message(rpc, 2, b'{"metadata":{"a":["b"]}}', "") is None
    assert _base.stream_message(rpc, 2, b"", "") is None
    # The error at the end of a stream is raised as a unary call's.
    detail = bytes([0x08, 10, 0x52, 0x02]) + b"c0"  # reason CURSOR_EXPIRED, oldest_cursor "c0"
    end = ('{"error":{"code":"out_of_range","message":"expired","details":[{"type":"tenure.v1.ErrorDetail","value":"'
           + base64.b64encode(detail).decode().rstrip("=") + '"}]}}').encode()
    with pytest.raises(tenure.CursorExpired) as e:
        _base.stream_message(rpc, 2, end, "")
    assert e.value.oldest_cursor == "c0" and e.value.op == "WatchEvents"
    with pytest.raises(tenure.CursorExpired):  # no detail: the code says it
        _base.stream_message(rpc, 2, b'{"error":{"code":"out_of_range","message":"m"}}', "")
    with pytest.raises(tenure.TenureError, match="compressed"):
        _base.stream_message(rpc, 1, b"x", "")
    import gzip
    assert _base.stream_message(rpc, 1, gzip.compress(b'{"cursor":"z"}'), "gzip").cursor == "z"


def test_times_and_durations() -> None:
    assert _codec.parse_timestamp("2026-12-02T02:26:05.316878276Z") == datetime(2026, 12, 2, 2, 26, 5, 316878, tzinfo=timezone.utc)
    assert _codec.parse_timestamp("2026-12-02T02:26:05+01:00") == datetime(2026, 12, 2, 1, 26, 5, tzinfo=timezone.utc)
    assert _codec.parse_duration("600s") == timedelta(minutes=10)
    assert _codec.parse_duration("-0.000001s") == timedelta(microseconds=-1)
    assert _codec.parse_duration("0.1234567s") == timedelta(microseconds=123456)
    assert _codec.format_duration(timedelta(microseconds=-1)) == "-0.000001s"
    assert _codec.format_duration(2.5) == "2.5s" and _codec.format_duration(3) == "3s"
    berlin = timezone(timedelta(hours=1))
    assert _codec.format_timestamp(datetime(2026, 1, 1, 12, tzinfo=berlin)) == "2026-01-01T11:00:00Z"
    with pytest.raises(ValueError, match="no time zone"):
        _codec.format_timestamp(datetime(2026, 1, 1))
    with pytest.raises(TypeError):
        _codec.format_duration("1s")  # type: ignore[arg-type]


def test_enums() -> None:
    assert _codec.decode_enum(m.TaskState, "TASK_STATE_DEAD") is m.TaskState.DEAD
    assert _codec.decode_enum(m.TaskState, "TASK_STATE_FROM_THE_FUTURE") is m.TaskState.UNSPECIFIED
    assert _codec.decode_enum(m.TaskState, 99) == 99
    assert _codec.enum_name(m.TaskState, "dead") == "TASK_STATE_DEAD"


def test_error_detail_from_binary() -> None:
    # reason=LEASE_LOST(2), task_id="t1", lease_id="l", state=DEAD(6),
    # size=-1 (ten-byte varint), retry_after={seconds: 3, nanos: 5e8}
    b = bytes([0x08, 0x02, 0x12, 0x02]) + b"t1" + bytes([0x1A, 0x01]) + b"l" + bytes([0x28, 0x06])
    b += bytes([0x38]) + bytes([0xFF] * 9 + [0x01])
    b += bytes([0x4A, 0x08, 0x08, 0x03, 0x10, 0x80, 0xCA, 0xB5, 0xEE, 0x01])
    b += bytes([0x78, 0x05])  # field 15, unknown: skipped
    d = _codec.from_binary(m.ErrorDetail, b)
    assert d.reason == m.ErrorReason.LEASE_LOST and d.task_id == "t1" and d.lease_id == "l"
    assert d.state == m.TaskState.DEAD and d.size == -1
    assert d.retry_after == timedelta(seconds=3, microseconds=500000)
    e = tenure.errors.error_of("Commit", "failed_precondition", "lost", d)
    assert isinstance(e, tenure.LeaseLost) and e.task_id == "t1" and e.retry_after == timedelta(seconds=3.5)


def test_errors_without_reason_follow_the_code() -> None:
    cases = {"not_found": tenure.NotFound, "failed_precondition": tenure.LeaseLost,
             "already_exists": tenure.AlreadyCommitted, "invalid_argument": tenure.InvalidArgument,
             "resource_exhausted": tenure.TooLarge, "unavailable": tenure.Unavailable,
             "unauthenticated": tenure.Unauthenticated, "permission_denied": tenure.PermissionDenied}
    for code, cls in cases.items():
        assert type(tenure.errors.error_of("X", code, "m")) is cls
    assert type(tenure.errors.error_of("X", "internal", "m")) is tenure.TenureError
    full = tenure.errors.error_of("Submit", "resource_exhausted", "m", m.ErrorDetail(reason=m.ErrorReason.FULL))
    assert type(full) is tenure.Full
    from tenure._base import error_of_answer
    proxy = error_of_answer("Submit", 503, {}, b"<html>busy</html>")
    assert isinstance(proxy, tenure.Unavailable) and "busy" in proxy.message
