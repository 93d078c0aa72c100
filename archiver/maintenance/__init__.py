"""The worker's maintenance duties, one module each, as River runs its rescuer, pruner
and the rest as small services with their own config and timer: any live worker runs
them beside its claim loop, so no sweeper process is needed, and a slow or failing duty
never holds up claiming (nor another duty).

    rescue        running jobs whose worker stopped renewing its lease, queued again
    prune         finished jobs (and finished housekeeping in the ledger) past retention
    settle        what dead archive operations left: settled or undone, retired files
                  out of their Delta log deleted (archiver.ledger's crash recovery)
    publish       a publish job for each table with files not yet in its Delta log
    orphans       the storage's orphan sweep queued, once a grace period
    compact       a compaction job for each table with small files, once a period

Each is named as its job kind is across the layers (kinds/compact.py is the job,
operations/compact.py runs it, lifecycle/compact.py plans it; kinds/publish.py,
operations/publish.py and delta/publish.py publish). Each is made from the one
`duty.Shared`.

`Maintenance.once()` runs each before the first claim (a burst worker rescues, prunes,
settles and publishes before it exits); `start()` keeps each on its own timer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg

from archiver import db
from archiver.config import ConfigFile
from archiver.context import Context
from archiver.errors import error_line
from archiver.maintenance.compact import CompactionSweep
from archiver.maintenance.duty import Duty, Shared
from archiver.maintenance.orphans import OrphanSweep
from archiver.maintenance.prune import Pruner
from archiver.maintenance.publish import PublicationSweep
from archiver.maintenance.rescue import Rescuer
from archiver.maintenance.settle import LedgerSweep
from archiver.store.queue import Queue

log = logging.getLogger(__name__)


def duties(
    ctx: Context, queue: Queue, wake: Callable[[], None], config: ConfigFile | None = None
) -> list[Duty]:
    """The duties a worker runs: those its settings and its queue allow (a worker on an
    in-memory queue has no pool of the queue database: the duties that read the catalog or
    the storage stay off), each made from what the worker shares with them."""
    shared = Shared(ctx, queue, wake, config)
    which: list[Callable[[Shared], Duty]] = [Rescuer, Pruner]
    if ctx.pool is not None and ctx.settings.storage_url:
        which += [LedgerSweep, PublicationSweep, OrphanSweep, CompactionSweep]
    return [duty(shared) for duty in which]


class Maintenance:
    def __init__(
        self, ctx: Context, queue: Queue, wake: Callable[[], None], config: ConfigFile | None = None
    ) -> None:
        self.duties = duties(ctx, queue, wake, config)

    async def once(self) -> None:
        for duty in self.duties:
            await _logged(duty)

    def start(self) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(_every(duty)) for duty in self.duties]


async def _logged(duty: Duty) -> None:
    try:
        await duty.run()
    except (*db.CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
        log.warning("%s: queue database unreachable (%s); retrying", duty.name, error_line(exc))
    except Exception:
        log.exception("%s failed; retrying", duty.name)


async def _every(duty: Duty) -> None:
    while True:
        await asyncio.sleep(duty.every)
        await _logged(duty)
