"""A Delta log's history, forgotten after an erasure (archiver.lifecycle.erase).

Every earlier commit of a Delta log still holds the add actions of files an erasure
removed, with their statistics: a column's minimum and maximum, which may be an erased
value (an email that was the smallest of its file). After the publication that removes
erased files, a checkpoint of the table as it is now is written, then every earlier
entry of the log is deleted: Delta's log cleanup (delta.logRetentionDuration), brought
forward. Readers start from the checkpoint; time travel to before the erasure goes with
the history, which is the point."""

from __future__ import annotations

import logging

from archiver.delta.check import LOG_DIR
from archiver.errors import StorageError
from archiver.storage.seam import Storage

log = logging.getLogger(__name__)


def forget_history(
    storage: Storage, uri: str, options: dict[str, str], root: str, table: str
) -> int:
    """Checkpoint the Delta table at `uri` (objects under `root`), then delete its log's
    entries before that version. Safe to run again (after a crash): returns how many
    objects went."""
    from deltalake import DeltaTable

    delta = DeltaTable(uri, storage_options=options)
    version = delta.version()
    delta.create_checkpoint()
    before = []
    for stored in storage.list(f"{root}/{LOG_DIR}/"):
        base = stored.name.rsplit("/", 1)[1]
        if base[:20].isdigit() and int(base[:20]) < version:
            before.append(stored.name)
    refused = storage.delete_many(before)  # years of hourly commits: a batch per 256
    if refused:
        first = min(refused)
        raise StorageError(
            f"{table}: {len(refused)} Delta log entries not deleted ({first}: {refused[first]})"
        )
    gone = len(before)
    log.info(
        "%s: Delta log before version %d deleted (%d objects): an erasure", table, version, gone
    )
    return gone
