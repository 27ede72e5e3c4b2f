"""Every call of the API through Client and AsyncClient (each test runs with
both: the any_client fixture), against a real server."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import tenure
from tenure import messages as m
from conftest import wait_for


def submit(c: Any, queue: str, **kw: Any) -> m.Task:
    return c.submit(queue=queue, **kw).task


def lease_one(c: Any, queue: str, **kw: Any) -> m.LeasedTask:
    r = c.lease(worker_id="test", queue=queue, **kw)
    assert len(r.tasks) == 1, r
    return r.tasks[0]


# TaskService ---------------------------------------------------------------


def test_submit_and_get(any_client: Any, queue: str) -> None:
    r = any_client.submit(queue=queue, payload=b"\x00hi\xff", priority=3, execution_window=timedelta(seconds=7),
                          retry_policy=m.RetryPolicy(max_attempts=4), timeout=3600, kind="raw.kind")
    t = r.task
    assert not r.duplicate
    assert t.task_id and t.queue == queue and t.namespace == "default"
    assert t.state == tenure.TaskState.WAITING and t.priority == 3 and t.kind == "raw.kind"
    assert t.payload == b"\x00hi\xff"
    assert t.execution_window == timedelta(seconds=7)
    assert t.retry_policy.max_attempts == 4 and t.retry_policy.initial_backoff == timedelta(seconds=1)
    assert t.deadline is not None and t.deadline > datetime.now(timezone.utc) + timedelta(minutes=59)
    assert t.request_id, "the client makes a request id when none is given"
    got = any_client.get_task(task_id=t.task_id).task
    assert got.task_id == t.task_id and got.payload == t.payload and got.created_at == t.created_at
    # As a request message, the same.
    again = any_client.get_task(m.GetTaskRequest(task_id=t.task_id)).task
    assert again == got


def test_submit_request_id_deduplicates(any_client: Any, queue: str) -> None:
    a = any_client.submit(queue=queue, payload=b"x", request_id=queue + "-order-42")
    b = any_client.submit(queue=queue, payload=b"x", request_id=queue + "-order-42")
    assert not a.duplicate and b.duplicate and a.task.task_id == b.task.task_id
    with pytest.raises(tenure.InvalidArgument) as e:
        any_client.submit(queue=queue, payload=b"other", request_id=queue + "-order-42")
    assert "request" in str(e.value).lower()


def test_submit_args_json_and_typed_kinds(any_client: Any, queue: str) -> None:
    t = submit(any_client, queue, kind="send_email", args={"to": "ada", "n": [1, 2]})
    assert t.kind == "send_email" and t.payload == b'{"to":"ada","n":[1,2]}'

    @tenure.kind("typed.email", queue=queue, priority=7, retry_policy=m.RetryPolicy(max_attempts=9))
    @dataclasses.dataclass
    class Email:
        to: str

    r = any_client.submit(args=Email(to="grace"))
    assert r.task.kind == "typed.email" and r.task.queue == queue and r.task.priority == 7
    assert r.task.retry_policy.max_attempts == 9 and r.task.payload == b'{"to":"grace"}'
    # A field given wins over the type's default.
    r2 = any_client.submit(args=Email(to="x"), priority=1)
    assert r2.task.priority == 1
    with pytest.raises(TypeError, match="payload or args"):
        any_client.submit(queue=queue, payload=b"p", args={"a": 1})
    with pytest.raises(TypeError, match="not both"):
        any_client.submit(m.SubmitRequest(queue=queue), payload=b"p")


def test_submit_batch(any_client: Any, queue: str) -> None:
    r = any_client.submit_batch(requests=[
        m.SubmitRequest(queue=queue, payload=b"a", request_id=queue + "-b-1"),
        {"queue": queue, "kind": "k", "args": {"i": 2}},
        m.SubmitRequest(queue=queue, payload=b"a", request_id=queue + "-b-1"),
    ])
    assert len(r.task_ids) == 3 and r.duplicates == [False, False, True]
    assert r.task_ids[0] == r.task_ids[2]
    assert any_client.get_task(task_id=r.task_ids[1]).task.payload == b'{"i":2}'
    with pytest.raises(tenure.InvalidArgument) as e:
        any_client.submit_batch(requests=[m.SubmitRequest(queue=queue), m.SubmitRequest(queue="")])
    assert e.value.field == "requests[1].queue"


def test_list_tasks_pages(any_client: Any, queue: str) -> None:
    ids = any_client.submit_batch(requests=[m.SubmitRequest(queue=queue, payload=b"%d" % i) for i in range(7)]).task_ids
    page = any_client.list_tasks(queue=queue, page_size=3)
    assert [t.task_id for t in page.tasks] == ids[:3] and page.next_page_token
    assert [t.task_id for t in any_client.iter_tasks(queue=queue, page_size=3)] == ids
    assert [t.task_id for t in any_client.iter_tasks(queue=queue, state=tenure.TaskState.WAITING)] == ids
    assert list(any_client.iter_tasks(queue=queue, state=tenure.TaskState.DEAD)) == []


def test_kill_retry_and_history(any_client: Any, queue: str) -> None:
    t = submit(any_client, queue, payload=b"x")
    killed = any_client.kill_task(task_id=t.task_id, reason="no longer needed", requested_by="alice").task
    assert killed.state == tenure.TaskState.DEAD and killed.failure_reason == "no longer needed"
    with pytest.raises(tenure.WrongState) as e:
        any_client.kill_task(task_id=t.task_id)
    assert e.value.state == tenure.TaskState.DEAD and e.value.task_id == t.task_id
    back = any_client.retry_task(task_id=t.task_id, reason="try again").task
    assert back.state == tenure.TaskState.WAITING
    h = any_client.get_task_history(task_id=t.task_id).entries
    assert [e.type for e in h] == ["TaskCreated", "TaskDead", "TaskRetried"]
    assert h[1].requested_by == "alice" and h[1].reason == "no longer needed" and h[0].lsn < h[1].lsn
    assert isinstance(h[0].at, datetime)
    with pytest.raises(tenure.NotFound) as nf:
        any_client.get_task_history(task_id="no-such-task")
    assert nf.value.reason == tenure.ErrorReason.NOT_FOUND


def test_bulk_actions(any_client: Any, queue: str) -> None:
    ids = any_client.submit_batch(requests=[m.SubmitRequest(queue=queue, payload=b"x") for _ in range(4)]).task_ids
    f = m.TaskFilter(queue=queue)
    k = any_client.kill_tasks(filter=f, reason="cleanup")
    assert (k.changed, k.skipped) == (4, 0)
    r = any_client.retry_tasks(filter=m.TaskFilter(queue=queue, state=tenure.TaskState.DEAD))
    assert r.changed == 4
    any_client.kill_tasks(filter={"queue": queue})
    p = any_client.purge_tasks(filter=f, reason="gone")
    assert p.changed == 4
    with pytest.raises(tenure.NotFound):
        any_client.get_task(task_id=ids[0])
    with pytest.raises(tenure.InvalidArgument):
        any_client.kill_tasks(filter=m.TaskFilter())


# WorkerService ----------------------------------------------------------------


def test_worker_protocol(any_client: Any, queue: str) -> None:
    t = submit(any_client, queue, payload=b"in", execution_window=10)
    lt = lease_one(any_client, queue, max_tasks=5)
    assert lt.task_id == t.task_id and lt.attempt == 1 and lt.payload == b"in"
    assert lt.execution_window == timedelta(seconds=10) and lt.lease_expiry > datetime.now(timezone.utc)
    any_client.start(task_id=lt.task_id, lease_id=lt.lease_id)
    hb = any_client.heartbeat(task_id=lt.task_id, lease_id=lt.lease_id, progress=m.Progress(message="half", percent=50))
    assert hb.lease_expiry >= lt.lease_expiry
    got = any_client.get_task(task_id=t.task_id).task
    assert got.progress.message == "half" and got.progress.percent == 50
    assert got.executions[0].status == tenure.ExecutionStatus.IN_PROGRESS
    tok = any_client.commit(task_id=lt.task_id, lease_id=lt.lease_id, result=b"out").fencing_token
    assert tok == m.FencingToken(task_id=t.task_id, attempt=1)
    # The same lease committing again gets the same answer.
    assert any_client.commit(task_id=lt.task_id, lease_id=lt.lease_id, result=b"out").fencing_token == tok
    with pytest.raises(tenure.AlreadyCommitted) as e:
        any_client.commit(task_id=lt.task_id, lease_id="another-lease", result=b"x")
    assert e.value.committed_by == lt.lease_id and e.value.code == "already_exists"
    with pytest.raises(tenure.WrongState):
        any_client.fail(task_id=lt.task_id, lease_id=lt.lease_id, reason="too late")
    any_client.complete(task_id=lt.task_id, lease_id=lt.lease_id)
    done = any_client.get_task(task_id=t.task_id).task
    assert done.state == tenure.TaskState.COMPLETED and done.result == b"out"


def test_lease_wait_and_queues(any_client: Any, queue: str) -> None:
    other = queue + "-b"
    r = any_client.lease(worker_id="test", queues=[queue, other], wait=0.2)
    assert r.tasks == [] and r.paused is None
    submit(any_client, other, payload=b"1")
    r = any_client.lease(worker_id="test", queues=[queue, other], wait=timedelta(seconds=5))
    assert len(r.tasks) == 1 and r.tasks[0].queue == other


def test_fail_retries_per_policy(any_client: Any, queue: str) -> None:
    t = submit(any_client, queue, payload=b"x", retry_policy=m.RetryPolicy(max_attempts=2, initial_backoff=0.1))
    lt = lease_one(any_client, queue)
    r = any_client.fail(task_id=lt.task_id, lease_id=lt.lease_id, reason="boom")
    assert r.state == tenure.TaskState.WAITING and r.retry_at is not None
    lt2 = wait_for(lambda: any_client.lease(worker_id="test", queue=queue).tasks, what="the retry").pop()
    assert lt2.attempt == 2
    r2 = any_client.fail(task_id=lt2.task_id, lease_id=lt2.lease_id, reason="boom again")
    assert r2.state == tenure.TaskState.FAILED and r2.retry_at is None
    assert any_client.get_task(task_id=t.task_id).task.failure_reason == "boom again"
    t2 = submit(any_client, queue, payload=b"y")
    lt3 = lease_one(any_client, queue)
    assert any_client.fail(task_id=lt3.task_id, lease_id=lt3.lease_id, permanent=True).state == tenure.TaskState.FAILED
    with pytest.raises(tenure.LeaseLost) as e:
        any_client.heartbeat(task_id=lt3.task_id, lease_id=lt3.lease_id)
    assert e.value.lease_id == lt3.lease_id and e.value.task_id == t2.task_id


def test_snooze(any_client: Any, queue: str) -> None:
    submit(any_client, queue, payload=b"x")
    lt = lease_one(any_client, queue)
    r = any_client.snooze(task_id=lt.task_id, lease_id=lt.lease_id, delay=0.2, reason="not yet")
    assert r.not_before > datetime.now(timezone.utc) - timedelta(seconds=1)
    lt2 = wait_for(lambda: any_client.lease(worker_id="test", queue=queue).tasks, what="the snoozed task").pop()
    assert lt2.attempt == 1, "a snooze does not use up an attempt"
    ex = any_client.get_task(task_id=lt.task_id).task.executions
    assert ex[0].status == tenure.ExecutionStatus.SNOOZED and ex[0].reason == "not yet"


def test_complete_batch(any_client: Any, queue: str) -> None:
    any_client.submit_batch(requests=[m.SubmitRequest(queue=queue, payload=b"%d" % i) for i in range(5)])
    lts = any_client.lease(worker_id="test", queue=queue, max_tasks=3).tasks
    items = [m.CompleteRequest(task_id=t.task_id, lease_id=t.lease_id, result=b"ok") for t in lts]
    items.append(m.CompleteRequest(task_id=lts[0].task_id, lease_id="wrong-lease"))
    r = any_client.complete_batch(items=items, lease=m.LeaseRequest(worker_id="test", queue=queue, max_tasks=10))
    assert len(r.failed) == 1 and r.failed[0].index == 3
    err = tenure.errors.from_complete_result(r.failed[0])
    assert isinstance(err, tenure.AlreadyCommitted) and err.task_id == lts[0].task_id
    assert err.committed_by == lts[0].lease_id
    assert len(r.leased) == 2
    for t in lts:
        assert any_client.get_task(task_id=t.task_id).task.state == tenure.TaskState.COMPLETED


# QueueService -----------------------------------------------------------------


def test_queues(any_client: Any, queue: str) -> None:
    submit(any_client, queue, payload=b"x")
    q = any_client.get_queue(queue=queue).queue
    assert q.queue == queue and q.tasks.waiting == 1 and q.partitions == 1 and q.last_hour.submitted == 1
    assert any(x.queue == queue for x in any_client.list_queues().queues)
    assert [x.queue for x in any_client.list_queues(namespace="nobody").queues] == []
    p = any_client.pause_queue(queue=queue, reason="incident", requested_by="ops")
    assert p.changed and p.queue.paused and p.queue.pause.reason == "incident" and p.queue.pause.requested_by == "ops"
    assert not any_client.pause_queue(queue=queue).changed
    lr = any_client.lease(worker_id="test", queue=queue)
    assert lr.tasks == [] and lr.paused is not None and lr.paused.reason == "incident"
    r = any_client.resume_queue(queue=queue, reason="fixed")
    assert r.changed and not r.queue.paused
    lim = any_client.set_queue_limits(queue=queue, max_concurrency=2, rate=1.5, burst=3, reason="gentle")
    assert lim.changed and lim.queue.limits.max_concurrency == 2 and lim.queue.limits.rate == 1.5 and lim.queue.limits.burst == 3
    cleared = any_client.set_queue_limits(queue=queue, clear_max_concurrency=True, clear_rate=True)
    assert cleared.queue.limits is None
    with pytest.raises(tenure.NotFound):
        any_client.get_queue(queue=queue + "-none")
    with pytest.raises(tenure.InvalidArgument) as e:
        any_client.set_queue_limits(queue=queue, max_concurrency=0)
    assert e.value.field == "max_concurrency"


# ScheduleService --------------------------------------------------------------


def test_schedules(any_client: Any, queue: str) -> None:
    c = any_client.create_schedule(queue=queue, name="nightly", cron="0 2 * * *", time_zone="Europe/Berlin",
                                   kind="report", args={"k": "daily"}, overlap=tenure.OverlapPolicy.ALLOW, requested_by="me")
    s = c.schedule
    assert c.created and s.name == "nightly" and s.kind == "report" and s.payload == b'{"k":"daily"}'
    assert s.overlap == tenure.OverlapPolicy.ALLOW and len(s.next_fires) == 5 and s.created_by == "me"
    again = any_client.create_schedule(queue=queue, name="nightly", cron="0 2 * * *", time_zone="Europe/Berlin",
                                       kind="report", args={"k": "daily"}, overlap=tenure.OverlapPolicy.ALLOW, requested_by="me")
    assert not again.created
    with pytest.raises(tenure.AlreadyExists):
        any_client.create_schedule(queue=queue, name="nightly", cron="0 3 * * *")
    with pytest.raises(tenure.InvalidArgument) as e:
        any_client.create_schedule(queue=queue, name="bad", cron="not a cron")
    assert e.value.field == "cron"
    assert any_client.get_schedule(queue=queue, name="nightly").schedule.cron == "0 2 * * *"
    assert [x.name for x in any_client.list_schedules(queue=queue).schedules] == ["nightly"]
    u = any_client.update_schedule(queue=queue, name="nightly", cron="@every 1h", reason="hourly").schedule
    assert u.cron == "@every 1h" and u.overlap == tenure.OverlapPolicy.SKIP
    p = any_client.pause_schedule(queue=queue, name="nightly", reason="quarter close")
    assert p.changed and p.schedule.paused and p.schedule.pause.reason == "quarter close"
    assert any_client.resume_schedule(queue=queue, name="nightly").changed
    now = datetime.now(timezone.utc)
    any_client.create_schedule(queue=queue, name="often", cron="@every 1s")
    wait_for(lambda: any_client.get_schedule(queue=queue, name="often").schedule.recent, what="a fire")
    any_client.delete_schedule(queue=queue, name="often")
    with pytest.raises(tenure.NotFound):
        any_client.get_schedule(queue=queue, name="often")
    any_client.create_schedule(queue=queue, name="minutely", cron="* * * * *")
    bf = any_client.backfill_schedule(queue=queue, name="minutely", start=now - timedelta(minutes=3), end=now - timedelta(seconds=1))
    assert len(bf.fired) >= 2 and all(f.outcome == tenure.FireOutcome.BACKFILLED for f in bf.fired)
    assert all(f.task_id for f in bf.fired)
    with pytest.raises(tenure.InvalidArgument, match="time zone"):
        any_client.backfill_schedule(queue=queue, name="minutely", start=datetime(2026, 1, 1), end=now)


# AdminService -----------------------------------------------------------------


def test_admin(any_client: Any) -> None:
    w = any_client.who_am_i()
    assert not w.auth_enabled
    c = any_client.get_cluster()
    assert c.mode == tenure.ServerMode.EMBEDDED
    s = any_client.snapshot()
    assert s.lsn > 0 and s.path and isinstance(s.pause, timedelta)


# Errors ---------------------------------------------------------------------------


def test_oversize_payload_is_an_exception_not_a_reset(any_client: Any, queue: str, server: Any) -> None:
    # Over the payload limit (200 KiB here), within the body's cap: the
    # server's own check.
    with pytest.raises(tenure.TooLarge) as e:
        any_client.submit(queue=queue, payload=b"x" * (210 << 10))
    assert e.value.field == "payload" and e.value.limit == 200 << 10 and e.value.size == 210 << 10
    assert e.value.code == "resource_exhausted"
    # Far over the body's cap: refused before the body is read, and the
    # client still reads the answer.
    with pytest.raises(tenure.TooLarge) as e2:
        any_client.submit(queue=queue, payload=b"y" * (8 << 20))
    assert "over its limit" in e2.value.message and e2.value.limit > 0
    # The client goes on working.
    assert any_client.submit(queue=queue, payload=b"small").task.task_id


def test_invalid_argument_names_field(any_client: Any) -> None:
    with pytest.raises(tenure.InvalidArgument) as e:
        any_client.submit(queue="", payload=b"x")
    assert e.value.field == "queue" and e.value.reason == tenure.ErrorReason.INVALID_ARGUMENT
    assert str(e.value).startswith("Submit: ")


def test_bad_values_are_refused_before_sending(any_client: Any, queue: str) -> None:
    with pytest.raises(tenure.InvalidArgument, match="no time zone"):
        any_client.submit(queue=queue, payload=b"x", not_before=datetime(2030, 1, 1))
    with pytest.raises(tenure.InvalidArgument, match="want str"):
        any_client.get_task(task_id=42)
