"""The pruner: finished jobs past the retention period deleted, in batches of their own
transactions; then the ledger's finished housekeeping (compactions, conversions) and
the read audit's reads past it, and the count deltas the operator views read folded
into a row each."""

from __future__ import annotations

import asyncio
import logging

from archiver.maintenance.duty import Shared
from archiver.store import archive_files, jobs, ledger, read_audit

log = logging.getLogger(__name__)

BATCH = 1_000  # finished jobs deleted in one transaction
PAUSE = 0.1  # seconds between two batches: at most ~10,000 jobs pruned a second


class Pruner:
    name = "pruner"
    every = 300.0

    def __init__(self, shared: Shared) -> None:
        self.queue, self.days = shared.queue, shared.settings.retention_days
        self.pool = shared.ctx.pool  # None for a worker on an in-memory queue

    async def run(self) -> None:
        """Batches (each short enough to hold its rows' locks well under a second), a
        short pause apart, until fewer than a batch are left; one batch per sweep could
        not keep up with a busy queue."""
        total = 0
        while True:
            pruned = await self.queue.prune_finished(self.days, BATCH)
            total += pruned
            if pruned < BATCH:
                break
            # a pause between batches leaves the database to the claims: back to back,
            # a big prune held claims for seconds (the bench's catalog section)
            await asyncio.sleep(PAUSE)
        if total:
            log.info("pruned %d finished jobs", total)
        if self.pool is None:
            return
        if pruned := await ledger.prune(self.pool, self.days * 86400, BATCH):
            log.info("pruned %d finished compactions from the ledger", pruned)
        if pruned := await read_audit.prune(self.pool, self.days * 86400, BATCH):
            log.info("pruned %d reads from the read audit", pruned)
        await jobs.compact_counts(self.pool)
        await archive_files.compact_counts(self.pool)
