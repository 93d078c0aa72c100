"""Offline files' blobs moved to the Archive tier once readers no longer need them where
they are: by the publisher, holding the table's publisher lock (a rehydration brings
files back online under it too), after the publication that took them out of the
Delta log is in both logs and the readers' retention after it is over
(store/archive_files.sql, offline_due; archiver.operations.tiers marks them)."""

from __future__ import annotations

import logging

from archiver import failpoints
from archiver.bulk import BulkConnection
from archiver.config import ARCHIVE_TIER
from archiver.context import Context
from archiver.errors import StorageError
from archiver.store import archive_files
from archiver.text import counted

log = logging.getLogger(__name__)


def move_due(ctx: Context, conn: BulkConnection, table: str) -> int:
    """Move the table's due offline blobs to the Archive tier, each recorded once moved;
    a move the storage refuses is left for the next publication. How many moved."""
    storage = ctx.storage()
    due = archive_files.offline_due(conn, str(storage.location), table)
    moved = 0
    for file_id, path in due:
        try:
            storage.set_tier(str(path), ARCHIVE_TIER)
        except StorageError as exc:
            log.warning("%s: not moved to the Archive tier yet: %s", table, exc)
            break
        archive_files.moved_to_archive(conn, [int(file_id)])
        conn.commit()
        moved += 1
        ctx.committed(
            f"{moved} of {counted(len(due), 'file')} of {table} moved to {ARCHIVE_TIER}",
            f"the next publication of {table} moves the rest",
            partial=True,
        )
        failpoints.reach("tier_moved")
    if moved:
        log.info("%s: %s moved to the Archive tier", table, counted(moved, "file"))
    return moved
