"""Blobs nothing references (orphans): found under a table's folder and deleted.

An object there is an orphan when no catalog row names it, in any state (committed,
pending, retired: what the Delta log references is among them until it is out of the
log), the one who wrote it is done (its job is neither queued nor running; its ledger
operation is not running) and it was written longer ago than a grace period. Such a blob
can never be referenced again: an attempt catalogues a file only while it holds its job
(catalog.add_committed checks the lease in the chunk's transaction), and an operation
commits only while its ledger row is running. Who leaves them: a chunk's upload whose
transaction then rolled back, with no later attempt to delete it; a rewrite uploaded by
a process whose operation the sweep had abandoned (its session killed, the process not:
a soak's find); a process killed between an upload and its commit.

The Delta log's own objects (`_delta_log/`) and the Iceberg table's (`metadata/`) are
the publisher's. A name archiver does
not make is never deleted: it is counted, for the operator to look at."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from archiver.bulk import BulkConnection
from archiver.files import names
from archiver.storage.seam import Storage, StoredObject
from archiver.store import archive_files, reads


@dataclass
class Orphans:
    """One table's look: the orphans (deleted unless a dry run), and what was kept."""

    table: str
    found: list[StoredObject] = field(default_factory=list)
    young: int = 0  # uncatalogued, their writer done, but written within the grace period
    busy: int = 0  # uncatalogued, their job or operation still running
    foreign: list[str] = field(default_factory=list)  # names archiver does not make

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.found)


def find(
    conn: BulkConnection,
    storage: Storage,
    table: str,
    listed: Iterable[StoredObject],
    grace: dt.timedelta,
    now: dt.datetime,
) -> Orphans:
    """The orphans of `table` (schema.table) among `listed`, the objects of its folder on
    `storage`: one query of its catalogued names, one of the writers still at work."""
    here = str(storage.location)
    prefix = storage.object_name(names.job_prefix(table))
    result = Orphans(table)
    candidates: list[tuple[StoredObject, str]] = []
    for stored in listed:
        rest = stored.name[len(prefix) :] if stored.name.startswith(prefix) else "/"
        if names.is_format_object(rest):
            continue
        writer = names.writer_of(stored.name)
        if "/" in rest or writer is None:
            result.foreign.append(stored.name)  # deeper down too: archiver makes none
            continue
        candidates.append((stored, writer))
    if not candidates:
        return result
    # the writers first, the catalog then: a writer done by now catalogued what it
    # kept before it was (read the other way, a file catalogued as its job finished
    # between the two reads would look an orphan)
    job_ids, operations = names.split_writers([w for _, w in candidates])
    working = reads.writers_at_work(conn, job_ids, operations)
    catalogued = archive_files.table_paths(conn, here, table)
    candidates = [c for c in candidates if c[0].name not in catalogued]  # full object names
    for stored, writer in candidates:
        if writer in working:
            result.busy += 1
        elif stored.modified is None or now - stored.modified < grace:
            result.young += 1
        else:
            result.found.append(stored)
    return result


def remove(
    conn: BulkConnection,
    storage: Storage,
    table: str,
    grace: dt.timedelta,
    *,
    listed: Iterable[StoredObject] | None = None,
    dry_run: bool = False,
) -> Orphans:
    """`find` (among `listed`, or a listing of the table's folder), then delete each
    orphan (not in a dry run). A blob deleted meanwhile is no error."""
    if listed is None:
        listed = storage.list(storage.object_name(names.job_prefix(table)))
    orphans = find(conn, storage, table, listed, grace, dt.datetime.now(dt.UTC))
    if not dry_run:
        refused = storage.delete_many([stored.name for stored in orphans.found])
        orphans.found = [stored for stored in orphans.found if stored.name not in refused]
    return orphans
