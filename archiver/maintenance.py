"""The queue's maintenance duties, each a small service on its own timer beside the claim
loop (as River runs its rescuer and pruner): any live worker runs them, so no separate
sweeper process is needed, and a slow or failing duty never holds up claiming."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from archiver import db, jobqueue
from archiver.config import ConfigFile, Settings
from archiver.errors import error_line
from archiver.model import CompactRequest

log = logging.getLogger(__name__)

PRUNE_EVERY = 300.0  # seconds between retention sweeps
PRUNE_BATCH = 1_000  # finished jobs deleted in one transaction
PRUNE_PAUSE = 0.1  # seconds between two batches: at most ~10,000 jobs pruned a second
PUBLISH_EVERY = 30.0  # seconds between looks for files not yet in their Delta table
ORPHANS_EVERY = 60.0  # seconds between looks at whether the storage's orphan sweep is due
COMPACT_BUDGET = 8  # a compaction job merges at most this many target sizes of input


class Maintenance:
    """The rescuer, the pruner, the publication sweep, the orphan sweep and compaction of
    one worker. `once()` runs
    them before the first claim (a burst worker takes rescued jobs, prunes and publishes
    before it exits); `start()` then keeps each on its own timer until the tasks are
    cancelled."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        wake: Callable[[], None],
        config: ConfigFile | None = None,
    ) -> None:
        self.pool, self.settings, self.wake, self.config = pool, settings, wake, config

    async def rescue(self) -> None:
        """Requeue (or fail, or cancel) running jobs whose worker stopped renewing its lease."""
        rescued = await jobqueue.rescue_expired(self.pool, self.settings.lease_seconds)
        for job_id, status in rescued:
            log.warning("job %s: lease expired, now %s", job_id, status)
        if rescued:
            self.wake()

    async def prune(self) -> None:
        """Delete finished jobs older than the retention period, in batches of their own
        transactions (each holds its rows' locks for well under a second: 281 ms at
        most for 1M jobs in the bench), a short pause apart, until fewer than a batch
        are left; one batch per sweep could not keep up with a queue finishing more
        than 1,000 jobs in 5 minutes."""
        total = 0
        while True:
            pruned = await jobqueue.prune_finished(
                self.pool, self.settings.retention_days, PRUNE_BATCH
            )
            total += pruned
            if pruned < PRUNE_BATCH:
                break
            # a pause between batches leaves the database to the claims: back to back,
            # 957k deletes held a claim up to 3.2 s (the bench's catalog section)
            await asyncio.sleep(PRUNE_PAUSE)
        if total:
            log.info("pruned %d finished jobs", total)
        status = await self.pool.execute(
            db.query("prune_ledger"), self.settings.retention_days * 86400, PRUNE_BATCH
        )  # the finished housekeeping operations of the ledger (compactions, conversions)
        if ledger := int(status.split()[-1]):
            log.info("pruned %d finished compactions from the ledger", ledger)
        await jobqueue.compact_counts(self.pool)

    async def publications(self) -> None:
        """Queue a publish job for each table with files not yet in its Delta table (what
        a worker killed before it queued one, or a publisher killed mid-way, left) or
        with retired files to take out and delete (archiver.ledger), publishing on or
        not."""
        if not self.settings.storage_url:
            return
        location = str(self.settings.storage_location())
        if await jobqueue.enqueue_publications(self.pool, location, delta=self.settings.delta):
            self.wake()

    async def orphans(self) -> None:
        """Queue the storage's orphan sweep once per grace period, whichever worker
        asks first (archiver.lifecycle.orphans)."""
        if not self.settings.storage_url:
            return
        location = str(self.settings.storage_location())
        if await jobqueue.enqueue_orphan_sweep(self.pool, location, self.settings.orphan_grace):
            self.wake()

    async def compaction(self) -> None:
        """Queue a compaction of each table with small files, once every
        ARCHIVER_COMPACT_EVERY seconds per storage, whichever worker asks first, with its
        policy's options (archiver.operations.compact)."""
        if not self.settings.storage_url or not self.settings.compact:
            return
        from archiver.operations.compact import options_for

        location = str(self.settings.storage_location())

        def request(table: str) -> CompactRequest | None:
            options = options_for(self.settings, self.config, table)
            if options is None:
                return None
            budget = COMPACT_BUDGET * options.target
            return CompactRequest(table, location, options.target, options.period, budget)

        from archiver.policy import parse_policies

        policies = parse_policies(self.config.policies) if self.config is not None else []
        targets = [p.compact_target for p in policies if p.compact_target]
        small = max([self.settings.compact_target, *targets]) // 2  # each table's plan decides
        every = self.settings.compact_every
        if await jobqueue.enqueue_compactions(self.pool, location, every, small, request):
            self.wake()

    async def once(self) -> None:
        for name, duty in (
            ("rescuer", self.rescue),
            ("pruner", self.prune),
            ("publication sweep", self.publications),
            ("orphan sweep", self.orphans),
            ("compaction", self.compaction),
        ):
            await _logged(duty, name)

    def start(self) -> list[asyncio.Task[None]]:
        rescue_every = min(self.settings.poll_interval, self.settings.heartbeat_seconds)
        return [
            asyncio.create_task(_every(rescue_every, self.rescue, "rescuer")),
            asyncio.create_task(_every(PRUNE_EVERY, self.prune, "pruner")),
            asyncio.create_task(_every(PUBLISH_EVERY, self.publications, "publication sweep")),
            asyncio.create_task(_every(ORPHANS_EVERY, self.orphans, "orphan sweep")),
            asyncio.create_task(_every(ORPHANS_EVERY, self.compaction, "compaction")),
        ]


async def _logged(duty: Callable[[], Awaitable[None]], name: str) -> None:
    try:
        await duty()
    except (*db.CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
        log.warning("%s: queue database unreachable (%s); retrying", name, error_line(exc))
    except Exception:
        log.exception("%s failed; retrying", name)


async def _every(seconds: float, duty: Callable[[], Awaitable[None]], name: str) -> None:
    while True:
        await asyncio.sleep(seconds)
        await _logged(duty, name)
