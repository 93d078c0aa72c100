"""The ledger sweep: archiver.ledger's crash recovery, a duty of its own. What archive
operations (restore, purge, erase, convert, compact) left when their process died is
settled -- a restore whose source transaction committed applied, every other undone,
its rewritten blobs deleted -- and retired files out of their Delta log deleted with
their rows. Each dead operation is taken by its own lock and each table's deletions by
its publisher's (a table being published is left to its publisher, which sweeps it
after), so workers sweeping at once never do the same work twice."""

from __future__ import annotations

import logging

from archiver import ledger
from archiver.bulk import BulkConnection
from archiver.maintenance.duty import Shared
from archiver.store import ledger as ledger_rows

log = logging.getLogger(__name__)


class LedgerSweep:
    name = "ledger sweep"
    every = 30.0

    def __init__(self, shared: Shared) -> None:
        self.ctx, self.pool, self.storage = shared.ctx, shared.pool, shared.ctx.storage()

    async def run(self) -> None:
        here = str(self.storage.location)
        tables = await ledger_rows.sweep_tables(self.pool, here)
        if tables:  # an ADBC session only when there may be work: most sweeps find none
            await self.ctx.in_thread(
                self.ctx.settings.database_url, lambda c: self._sweep(c, tables)
            )

    def _sweep(self, conn: BulkConnection, tables: list[str]) -> None:
        ledger.sweep(self.ctx, conn)
        for table in sorted(tables):
            ledger.reap_now(conn, self.storage, table)
