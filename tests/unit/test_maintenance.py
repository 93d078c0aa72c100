"""The maintenance duties: which a worker runs, each on its own timer, and the two that
need only the queue (rescuer, pruner) run on the in-memory one."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any, cast

import asyncpg

from archiver.config import Settings
from archiver.context import Context
from archiver.maintenance import Maintenance, prune
from archiver.maintenance.duty import Shared
from archiver.maintenance.prune import Pruner
from archiver.maintenance.rescue import Rescuer
from archiver.model import Queueing, Status
from archiver.testing.memory import MemoryStorage
from archiver.testing.queue import MemoryQueue

SETTINGS = dataclasses.replace(
    Settings.from_env({"ARCHIVER_DATABASE_URL": "postgresql://nowhere/none"}),
    storage_url="az://memory/archive",
    lease_seconds=30.0,
    retention_days=7.0,
)


def test_a_worker_runs_each_duty_its_queue_and_storage_allow() -> None:
    q = MemoryQueue()
    ctx = Context(SETTINGS, storage=MemoryStorage())
    on_memory = Maintenance(ctx, q, lambda: None)
    assert [d.name for d in on_memory.duties] == ["rescuer", "pruner"]
    ctx.pool = cast(asyncpg.Pool, object())  # never used: nothing runs here
    real = Maintenance(ctx, q, lambda: None)
    assert [d.name for d in real.duties] == [
        "rescuer", "pruner", "ledger sweep", "publication sweep", "orphan sweep", "compaction",
    ]  # fmt: skip
    assert len({d.every for d in real.duties}) >= 4  # timers of their own


def test_the_rescuer_requeues_expired_leases_and_wakes_the_loop() -> None:
    async def scenario() -> None:
        clock = [dt.datetime.now(dt.UTC)]
        q = MemoryQueue(clock=lambda: clock[0])
        job_id, _ = await q.enqueue("noop", {}, Queueing("j", None))
        await q.claim("gone", 1)
        woken: list[Any] = []
        rescuer = Rescuer(Shared(Context(SETTINGS), q, lambda: woken.append(1)))
        await rescuer.run()
        assert not woken and (await q.get(job_id)).status == Status.RUNNING
        clock[0] += dt.timedelta(seconds=31)
        await rescuer.run()
        assert woken and (await q.get(job_id)).status == Status.QUEUED

    asyncio.run(scenario())


def test_the_pruner_goes_batch_by_batch_until_fewer_are_left() -> None:
    async def scenario() -> None:
        clock = [dt.datetime.now(dt.UTC)]
        q = MemoryQueue(clock=lambda: clock[0])
        for i in range(2 * prune.BATCH + 5):
            await q.enqueue("noop", {}, Queueing(str(i), None))
        claimed = await q.claim("w", 3 * prune.BATCH)
        await q.complete_many([j.id for j in claimed[:-1]], "w")  # one still runs
        clock[0] += dt.timedelta(days=8)
        await Pruner(Shared(Context(SETTINGS), q, lambda: None)).run()
        assert [j.status for j in q.jobs.values()] == [Status.RUNNING]

    asyncio.run(scenario())
