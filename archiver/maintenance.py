"""The queue's maintenance duties, each a small service on its own timer beside the claim
loop (as River runs its rescuer and pruner): any live worker runs them, so no separate
sweeper process is needed, and a slow or failing duty never holds up claiming."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from archiver import db, jobqueue
from archiver.config import Settings
from archiver.errors import error_line

log = logging.getLogger(__name__)

PRUNE_EVERY = 300.0  # seconds between retention sweeps


async def every(seconds: float, duty: Callable[[], Awaitable[None]], name: str) -> None:
    """Run `duty` now and then every `seconds` until cancelled; errors are logged."""
    while True:
        try:
            await duty()
        except (*db.CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
            log.warning("%s: queue database unreachable (%s); retrying", name, error_line(exc))
        except Exception:
            log.exception("%s failed; retrying", name)
        await asyncio.sleep(seconds)


def maintenance_tasks(
    pool: asyncpg.Pool, settings: Settings, on_rescued: Callable[[], None]
) -> list[asyncio.Task[None]]:
    """Start the rescuer and the pruner; cancel the tasks to stop them."""

    async def rescue() -> None:
        """Requeue (or fail, or cancel) running jobs whose worker stopped renewing its lease."""
        rescued = await jobqueue.rescue_expired(pool, settings.lease_seconds)
        for job_id, status in rescued:
            log.warning("job %s: lease expired, now %s", job_id, status)
        if rescued:
            on_rescued()

    async def prune() -> None:
        """Delete finished jobs older than the retention period."""
        pruned = await jobqueue.prune_finished(pool, settings.retention_days)
        if pruned:
            log.info("pruned %d finished jobs", pruned)

    rescue_every = min(settings.poll_interval, settings.heartbeat_seconds)
    return [
        asyncio.create_task(every(rescue_every, rescue, "rescuer")),
        asyncio.create_task(every(PRUNE_EVERY, prune, "pruner")),
    ]
