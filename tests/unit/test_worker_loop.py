"""The worker's claim loop, its job runs and its rescuer, in-process on the in-memory
queue (archiver.testing.queue, held to PostgreSQL's behaviour by
tests/integration/test_queue_contract.py): what the end-to-end tests show with real processes,
here in milliseconds, with kinds of the test's own."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from archiver.config import Settings
from archiver.context import Context
from archiver.errors import ArchiverError
from archiver.kinds.kind import JobRun, Kind
from archiver.kinds.registry import KINDS
from archiver.model import Progress, Queueing, Status
from archiver.testing.memory import MemoryStorage
from archiver.testing.queue import MemoryQueue
from archiver.worker import Worker

SETTINGS = dataclasses.replace(
    Settings.from_env({"ARCHIVER_DATABASE_URL": "postgresql://nowhere/none"}),
    poll_interval=0.02,
    heartbeat_seconds=0.02,
    lease_seconds=5.0,
    retry_base_seconds=0.0,
    retry_max_seconds=0.0,
    shutdown_deadline=5.0,
)


class Seen:
    """What the test kinds did: each run, and the most that ran at once."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.now = self.most = 0
        self.lock = threading.Lock()

    def enter(self, payload: dict[str, Any]) -> None:
        with self.lock:
            self.runs.append(payload)
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    """Kinds `sleep` (threaded: sleeps payload['s']), `flaky` (fails until its attempt
    payload['ok']) and `wait` (on the loop, until the worker stops it)."""
    seen = Seen()

    def sleep(ctx: Context, run: JobRun, request: dict[str, Any]) -> Progress:
        seen.enter(run.job.payload)
        time.sleep(run.job.payload.get("s", 0))
        seen.leave()
        return Progress(rows=1)

    async def flaky(ctx: Context, run: JobRun, request: dict[str, Any]) -> Progress:
        seen.enter(run.job.payload)
        seen.leave()
        if run.job.attempts < request["ok"]:
            raise ArchiverError(f"attempt {run.job.attempts} refused")
        return Progress(rows=run.job.attempts)

    def wait(ctx: Context, run: JobRun, request: dict[str, Any]) -> Progress:
        seen.enter(run.job.payload)
        while run.interrupt is None:
            time.sleep(0.01)
        seen.leave()
        raise run.interrupt

    payload = dict  # the payload as it is
    for kind in (
        Kind("sleep", sleep, payload),
        Kind("flaky", flaky, payload, threaded=False),
        Kind("wait", wait, payload),
    ):
        monkeypatch.setitem(KINDS, kind.name, kind)
    yield seen


def work(queue: MemoryQueue, *, concurrency: int = 1, burst: bool = True) -> Worker:
    ctx = Context(SETTINGS, storage=MemoryStorage())
    return Worker(ctx, concurrency=concurrency, burst=burst, name="w", queue=queue)


async def put(q: MemoryQueue, kind: str, key: str, lock: str | None = None, **payload: Any) -> Any:
    job_id, _ = await q.enqueue(kind, payload, Queueing(key, lock, max_attempts=3))
    return job_id


def test_a_burst_worker_runs_every_job_and_one_per_table_at_once(seen: Seen) -> None:
    async def scenario() -> None:
        q = MemoryQueue()
        ids = [await put(q, "sleep", f"a{i}", "table a", s=0.03) for i in range(3)]
        ids += [await put(q, "sleep", f"b{i}", "table b", s=0.03) for i in range(3)]
        ids += [await put(q, "noop", f"n{i}") for i in range(50)]  # completed in batches
        await work(q, concurrency=3).run()
        assert {(await q.get(i)).status for i in ids} == {Status.COMPLETED}
        assert len(seen.runs) == 6 and seen.most == 2  # tables a and b; never two of one
        assert (await q.get(ids[0])).progress["rows"] == 1

    asyncio.run(scenario())


def test_a_failing_job_is_retried_then_fails_for_good(seen: Seen) -> None:
    async def scenario() -> None:
        q = MemoryQueue()
        recovers = await put(q, "flaky", "r", ok=2)
        never = await put(q, "flaky", "n", ok=9)
        unknown = await put(q, "nosuchkind", "u")
        await work(q).run()
        done = await q.get(recovers)
        assert done.status == Status.COMPLETED and done.attempts == 2
        assert [e["error"] for e in done.errors] == ["ArchiverError: attempt 1 refused"]
        failed = await q.get(never)
        assert failed.status == Status.FAILED and failed.attempts == 3
        assert failed.last_error == "ArchiverError: attempt 3 refused"
        lost = await q.get(unknown)
        assert lost.status == Status.FAILED and "no job kind 'nosuchkind'" in str(lost.last_error)

    asyncio.run(scenario())


async def waiting_job(seen: Seen) -> tuple[MemoryQueue, Any, Worker, asyncio.Task[None]]:
    """A worker (not burst) running one job of the `wait` kind, once that job started."""
    q = MemoryQueue()
    job_id = await put(q, "wait", "w")
    worker = work(q, burst=False)
    running = asyncio.create_task(worker.run())
    while not seen.runs:
        await asyncio.sleep(0.01)
    return q, job_id, worker, running


def test_a_stopped_worker_hands_its_job_back_unspent(seen: Seen) -> None:
    async def scenario() -> None:
        q, job_id, worker, running = await waiting_job(seen)
        worker.request_stop()  # what SIGTERM does
        await asyncio.wait_for(running, 5)
        back = await q.get(job_id)
        assert back.status == Status.QUEUED and back.attempts == 0 and back.locked_by is None

    asyncio.run(scenario())


def test_a_cancelled_job_stops_at_its_next_heartbeat(seen: Seen) -> None:
    async def scenario() -> None:
        q, job_id, worker, running = await waiting_job(seen)
        assert await q.cancel(job_id) == Status.RUNNING  # asked; the heartbeat carries it
        deadline = time.monotonic() + 30  # a heartbeat is 0.02 s; a loaded machine is slow
        while (await q.get(job_id)).status != Status.CANCELLED and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert (await q.get(job_id)).status == Status.CANCELLED
        worker.request_stop()
        await asyncio.wait_for(running, 30)

    asyncio.run(scenario())


def test_a_dead_workers_job_is_rescued_and_run(seen: Seen) -> None:
    async def scenario() -> None:
        clock = [dt.datetime.now(dt.UTC)]
        q = MemoryQueue(clock=lambda: clock[0])
        job_id = await put(q, "sleep", "j")
        [claimed] = await q.claim("dead", 1)  # its worker then vanished
        clock[0] += dt.timedelta(seconds=SETTINGS.lease_seconds + 1)
        await work(q).run()  # a burst worker's rescuer runs before its first claim
        done = await q.get(job_id)
        assert done.status == Status.COMPLETED and done.attempts == 2
        assert "dead lost its lease" in str(done.last_error)
        assert seen.runs == [claimed.payload]

    asyncio.run(scenario())


def test_an_idle_worker_claims_once_a_poll_interval() -> None:
    """Nothing queued: the loop waits its poll interval between claims (an empty queue's
    "next run in 0 s" once made it claim 20 times a second; tests/integration/test_scale.py counts
    the same on PostgreSQL in transactions)."""

    class Counted(MemoryQueue):
        claims = 0

        async def claim(self, worker: str, limit: int) -> list[Any]:
            Counted.claims += 1
            return await super().claim(worker, limit)

    async def scenario() -> None:
        q = Counted()
        settings = dataclasses.replace(SETTINGS, poll_interval=0.1)
        worker = Worker(Context(settings, storage=MemoryStorage()), name="w", queue=q)
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(1.0)
        worker.request_stop()
        await asyncio.wait_for(running, 5)
        assert 5 <= Counted.claims <= 13, f"{Counted.claims} claims in 1 s at a 0.1 s interval"

    asyncio.run(scenario())


def test_what_follows_a_job_runs_before_the_job_is_finished(
    seen: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kind's `after` (an archive's publications) is queued while its job still runs:
    a script that waits for no queued or running job never finds what it queues owed."""

    async def scenario() -> None:
        q = MemoryQueue()
        statuses: list[tuple[str, Status]] = []

        async def follow(ctx: Context, job: Any) -> None:
            statuses.append((job.payload["name"], (await q.get(job.id)).status))
            if job.payload["name"] == "first":
                await put(q, "sleep", "follower", name="follower")

        for kind in (Kind("leads", lambda ctx, run, r: Progress(rows=1), dict, after=follow),):
            monkeypatch.setitem(KINDS, kind.name, kind)
        first = await put(q, "leads", "first", name="first")
        await work(q).run()
        assert statuses == [("first", Status.RUNNING)]
        assert (await q.get(first)).status == Status.COMPLETED
        assert [r.get("name") for r in seen.runs] == ["follower"]  # the burst worker took it

    asyncio.run(scenario())
