"""The ledger sweep: archiver.ledger's crash recovery, a duty of its own. What archive
operations (restore, purge, erase, convert, compact) left when their process died is
settled -- a restore whose source transaction committed applied, every other undone,
its rewritten blobs deleted -- and retired files out of their Delta log deleted with
their rows. Each dead operation is taken by its own lock and each table's deletions by
its publisher's (a table being published is left to its publisher, which sweeps it
after), so workers sweeping at once never do the same work twice."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from archiver import ledger
from archiver.bulk import connect_bulk
from archiver.config import Settings
from archiver.storage.seam import Storage
from archiver.store import ledger as ledger_rows

log = logging.getLogger(__name__)


class LedgerSweep:
    name = "ledger sweep"
    every = 30.0

    def __init__(self, pool: asyncpg.Pool, settings: Settings, storage: Storage) -> None:
        self.pool, self.settings, self.storage = pool, settings, storage

    async def run(self) -> None:
        here = str(self.storage.location)
        tables = await ledger_rows.sweep_tables(self.pool, here)
        if tables:  # an ADBC session only when there may be work: most sweeps find none
            await asyncio.to_thread(self._sweep, sorted(tables))

    def _sweep(self, tables: list[str]) -> None:
        settings = self.settings
        with connect_bulk(settings.database_url) as conn:
            ledger.sweep(conn, self.storage, settings.effective_source_url)
            for table in tables:
                ledger.reap_now(conn, self.storage, table)
