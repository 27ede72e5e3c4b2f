"""The event stream (EventService.WatchEvents, docs/guides/events.md)
through Client and AsyncClient, against a real server: the generated
streaming call, and watch, which resumes from its cursor by itself."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, List, Tuple

import pytest

import tenure
from tenure import messages as m
from conftest import Server

LIFE = ["TaskCreated", "LeaseGranted", "TaskCompleted"]


def run_one_task(c: tenure.Client, queue: str, result: bytes = b"done") -> str:
    """Submits a task to queue, leases it and completes it: three records."""
    tid = c.submit(queue=queue, payload=b"in").task.task_id
    lt = c.lease(worker_id="events-test", queue=queue).tasks[0]
    assert lt.task_id == tid
    c.complete(task_id=tid, lease_id=lt.lease_id, result=result)
    return tid


def until_caught_up(answers: Any) -> List[m.Event]:
    """The events of a stream's answers up to the first that is caught up."""
    out: List[m.Event] = []
    for a in answers:
        out += a.events
        if a.caught_up:
            answers.close()
            return out
    pytest.fail("the stream ended before it caught up")


def check_life(evs: List[Tuple[m.Event, str]], tid: str, queue: str) -> None:
    assert [e.type for e, _ in evs] == LIFE
    assert all(e.task_id == tid and e.queue == queue and e.namespace == "default" for e, _ in evs)
    assert [cur for _, cur in evs] == [e.cursor for e, _ in evs] and len({cur for _, cur in evs}) == 3
    lsns = [e.lsn for e, _ in evs]
    assert lsns == sorted(lsns) and len(set(lsns)) == 3
    created, leased, completed = (e for e, _ in evs)
    assert isinstance(created.record, m.TaskCreatedEvent) and created.task_created.payload == b"in"
    assert isinstance(leased.record, m.LeaseGrantedEvent) and leased.lease_granted.worker_id == "events-test"
    assert completed.task_completed is not None and completed.task_completed.result == b"done"
    assert completed.task_completed.lease_id == leased.lease_granted.lease_id


def test_watch_from_the_start_and_resume_from_a_cursor(client: tenure.Client, queue: str) -> None:
    tid = run_one_task(client, queue)
    w = client.watch(namespace="default", queue=queue, cursor="oldest")
    evs = [next(w) for _ in range(3)]
    w.close()
    check_life(evs, tid, queue)
    # The raw call: a stream of answers, the first with the cursor it starts
    # from and no event; from the cursor after LeaseGranted exactly the rest.
    f = m.EventFilter(namespace="default", queue=queue)
    stream = client.watch_events(cursor=evs[1][1], filter=f)
    first = next(stream)
    assert first.events == [] and first.cursor == evs[1][1]
    rest = until_caught_up(stream)
    assert [(e.type, e.cursor) for e in rest] == [("TaskCompleted", evs[2][1])]
    # From the last cursor: nothing more, until something happens.
    assert until_caught_up(client.watch_events(cursor=evs[2][1], filter=f)) == []
    # The filter by type and by task.
    by_type = until_caught_up(client.watch_events(cursor="oldest", filter=m.EventFilter(namespace="default", queue=queue,
                                                                                         types=["TaskCompleted"])))
    assert [e.cursor for e in by_type] == [evs[2][1]]
    by_task = until_caught_up(client.watch_events(m.WatchEventsRequest(cursor="oldest", filter=m.EventFilter(task_id=tid))))
    assert [e.type for e in by_task] == LIFE


def test_watch_sees_what_happens_while_it_watches(client: tenure.Client, queue: str) -> None:
    f = m.EventFilter(namespace="default", queue=queue)
    stream = client.watch_events(cursor="now", filter=f)
    start = next(stream).cursor  # the stream is open: "now" is this cursor
    tid = client.submit(queue=queue, payload=b"in").task.task_id
    got = until_caught_up(stream) or until_caught_up(client.watch_events(cursor=start, filter=f))
    assert [(e.type, e.task_id) for e in got] == [("TaskCreated", tid)]
    ev, _ = next(client.watch(namespace="default", queue=queue, cursor=start))
    assert ev.type == "TaskCreated" and ev.task_id == tid


def test_bad_cursors_raise(client: tenure.Client, queue: str) -> None:
    with pytest.raises(tenure.InvalidArgument) as e:
        next(client.watch_events(cursor="not-a-cursor"))
    assert "cursor" in str(e.value)
    # watch raises it, not retried.
    with pytest.raises(tenure.InvalidArgument):
        next(client.watch(namespace="default", queue=queue, cursor="not-a-cursor"))
    with pytest.raises(tenure.InvalidArgument) as e:
        next(client.watch(queue=queue))
    assert e.value.field == "filter.namespace"
    with pytest.raises(TypeError, match="list of record type names"):
        next(client.watch(namespace="default", types="TaskCompleted"))  # type: ignore[arg-type]


def test_an_expired_cursor_raises_cursor_expired(start_server: Callable[..., Server]) -> None:
    s = start_server("--wal-segment-bytes", "4096")
    with tenure.Client(s.url) as c:
        w = c.watch(cursor="oldest")
        c.submit(queue="q", payload=b"x")
        first_cursor = next(w)[1]
        w.close()
        for _ in range(3):
            for _ in range(20):
                c.submit(queue="q", payload=b"p" * 2000)
            c.snapshot()
        with pytest.raises(tenure.CursorExpired) as e:
            next(c.watch(cursor=first_cursor))
        assert e.value.code == "out_of_range" and e.value.reason == m.ErrorReason.CURSOR_EXPIRED
        oldest = e.value.oldest_cursor
        assert oldest and oldest != first_cursor
        # The raw call raises the same, from the end of its stream.
        with pytest.raises(tenure.CursorExpired):
            until_caught_up(c.watch_events(cursor=first_cursor))
        # From the oldest cursor the log still holds, the watch goes on.
        ev, _ = next(c.watch(cursor=oldest))
        assert ev.type == "TaskCreated" and ev.task_created.payload == b"p" * 2000


def test_watch_resumes_after_the_server_restarts(start_server: Callable[..., Server]) -> None:
    s = start_server()
    c = tenure.Client(s.url, retry_backoff=0.05)
    w = c.watch(namespace="default", queue="q", cursor="oldest")
    a = c.submit(queue="q", payload=b"a").task.task_id
    ev, cur_a = next(w)
    assert ev.task_id == a
    # The connection drops under the loop; the server comes back on the
    # same address, and the loop goes on after the last event it saw.
    s.stop()
    s.start()
    b = c.submit(queue="q", payload=b"b").task.task_id
    ev, cur_b = next(w)
    assert (ev.type, ev.task_id) == ("TaskCreated", b), "exactly the next event: none seen twice, none lost"
    assert cur_b != cur_a
    w.close()
    c.close()


def test_async_watch(server: Server, queue: str) -> None:
    tid = run_one_task(tenure.Client(server.url), queue)

    async def main() -> None:
        async with tenure.AsyncClient(server.url) as c:
            evs: List[Tuple[m.Event, str]] = []
            async for ev, cur in c.watch(namespace="default", queue=queue, cursor="oldest"):
                evs.append((ev, cur))
                if len(evs) == 3:
                    break
            check_life(evs, tid, queue)
            stream = c.watch_events(cursor=evs[1][1], filter=m.EventFilter(namespace="default", queue=queue))
            rest: List[m.Event] = []
            async for a in stream:
                rest += a.events
                if a.caught_up:
                    break
            await stream.aclose()  # type: ignore[attr-defined]
            assert [(e.type, e.cursor) for e in rest] == [("TaskCompleted", evs[2][1])]
            with pytest.raises(tenure.InvalidArgument):
                async for _ in c.watch(namespace="default", queue=queue, cursor="not-a-cursor"):
                    pass
            seen: List[Any] = []

            async def intercept(info: tenure.CallInfo, call_next: Any) -> Any:
                seen.append(info.op)
                info.headers["X-Test"] = "1"
                return await call_next()

            async with tenure.AsyncClient(server.url, interceptors=[intercept]) as ic:
                async for a in ic.watch_events(cursor="oldest", filter=m.EventFilter(task_id=tid)):
                    break
            assert seen == ["WatchEvents"]

    asyncio.run(main())
