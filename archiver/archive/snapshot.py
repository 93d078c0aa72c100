"""Copy mode's one snapshot: every chunk of a copy job reads the same REPEATABLE READ
transaction, shared with the job's pair reader through pg_export_snapshot (as pg_dump
--jobs shares its snapshot).

Every table the job's chunks read is locked ACCESS SHARE first thing in that
transaction, as pg_dump locks its tables: a chunk then never waits for a table lock.
One that did (an application's ACCESS EXCLUSIVE lock taken between the job's planning
and its first read of a child table) ran out of lock_timeout, and its rollback ended the
transaction holding the snapshot: the chunks after it read newer rows than the pair
reader and than the chunks before (tests/integration/test_locks.py, which saw orders deleted
mid-job missing from the copy). A lock an application holds past ARCHIVER_LOCK_TIMEOUT
now stops the snapshot from being taken, before anything is read: both transactions
are rolled back and it is taken again after a backoff."""

from __future__ import annotations

import re

from archiver.archive.context import JobContext
from archiver.bulk import BulkConnection
from archiver.errors import ArchiverError, LockBusy
from archiver.source.guardrails import LOCK_NOT_AVAILABLE, lock_holders

SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+-[0-9]+")  # e.g. 00000003-0000001B-1


def open_snapshot(job: JobContext, *, export: bool = False) -> str | None:
    """The job's transaction on its source, and its reader's on the same snapshot;
    LockBusy (both rolled back) when a table it reads is locked past its lock_timeout.
    An aggregate's chunks collect into temporary tables: not READ ONLY then. `export`:
    return the snapshot's id for other connections to import (import_snapshot) too."""
    access = "" if job.aggregate else ", READ ONLY"
    with job.source.cursor() as cur:
        cur.execute(f"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ{access}")
    lock_tables(job, job.source)  # before the snapshot: no DDL slips between the two
    if job.reader is None and not export:
        return None
    with job.source.cursor() as cur:
        cur.execute("SELECT pg_export_snapshot()")
        snapshot = str(cur.fetchall()[0][0])
    if not SNAPSHOT_ID.fullmatch(snapshot):  # it is spliced into SET TRANSACTION SNAPSHOT
        raise ArchiverError(f"unexpected snapshot id from pg_export_snapshot: {snapshot!r}")
    if job.reader is not None:
        import_snapshot(job.reader, snapshot)
    return snapshot


def lock_tables(job: JobContext, conn: BulkConnection) -> None:
    """Every table the job's chunks read locked ACCESS SHARE, first thing in `conn`'s
    transaction (as pg_dump locks its tables, in each of its workers too): a read then
    never waits for a table lock, nor queues behind one someone asks for meanwhile.
    LockBusy (rolled back) when one is held past the job's lock_timeout."""
    tables = [m.table for m in job.aggregate.members] if job.aggregate else [job.queries.table]
    milliseconds = max(1, int(job.limits.lock_timeout * 1000)) if job.limits.lock_timeout else 0
    with conn.cursor() as cur:
        cur.execute(f"SET LOCAL lock_timeout = {milliseconds}")  # takes no snapshot
        try:
            cur.execute(f"LOCK TABLE {', '.join(t.quoted for t in tables)} IN ACCESS SHARE MODE")
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            conn.rollback()
            busy = [h for h in (lock_holders(conn, t) for t in tables) if h]
            raise LockBusy(
                f"waited {job.limits.lock_timeout:g}s for a lock on "
                f"{', '.join(t.qualified for t in tables)} held by "
                f"{'; '.join(busy) or 'no holder left'}"
            ) from None


def import_snapshot(conn: BulkConnection, snapshot: str) -> None:
    """A read-only transaction on `conn` that sees what the exporting one sees."""
    with conn.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
