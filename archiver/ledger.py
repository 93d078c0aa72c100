"""Operations that take rows out of the archive, and the files they leave behind.

Each row lives in exactly one place. An operation that takes rows out of the archive (a
restore that moves them back, a purge, an erasure) works in four steps:

 1 begin    a ledger row (archive_ledger, status running) is committed, its session
            advisory lock taken with it and held until the operation ends;
 2 rewrite  each file that keeps some of its rows is rewritten without the others,
            under a new name (`rewrite-<operation>-…`, names.rewritten_name), uploaded
            and checked; nothing is catalogued yet;
 3 commit   ONE transaction -- the restore's own, with its inserted rows -- retires the
            emptied and rewritten files (state 'retired'), catalogues the rewritten ones
            in their place (same job and part) and marks the ledger row done;
 4 reap     a retired file leaves its Delta table in a numbered publication (the
            publisher's `unpublication`, in the same Delta commit that adds its
            rewrite), then its blob and its catalog row are deleted.

With the catalog in another database than the source (ARCHIVER_SOURCE_URL), a
restore's step 3 is two transactions, crossing as an archive chunk's do
(archiver.source.crossing): `record_intent` claims the files and records what the
catalog commit will do with the source transaction's id, the source commits, then
`settle` applies it; a crash in between is settled by the sweep, which asks the source
(pg_xact_status) whether it committed.

A crash before 3 leaves the catalog as it was and rewritten blobs nobody catalogued;
the ledger row stays `running` with its lock free, and the next sweep (`sweep`: every
worker's ledger sweep, and `archiver remove-orphans` before it looks) deletes those blobs
and marks it abandoned. A session that ends while its process lives on frees the lock too: so each
rewrite's upload is guarded (`guard`: the lock checked before and after it), and what a
process killed between the two leaves, the orphan sweep deletes (lifecycle.orphans). A crash after 3 leaves retired files, which the sweep takes out of the Delta
log and deletes. So at every moment each row is catalogued once: in the old file or in
its rewrite and the database, never both, never neither.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import adbc_driver_manager

from archiver import failpoints, outcome
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.errors import ArchiverError, InputError, StorageError, first_line
from archiver.files import names
from archiver.model import ArchivedFile, FileState
from archiver.source.guardrails import transaction_status
from archiver.storage.seam import Storage
from archiver.store import archive_files, publisher_lock
from archiver.store import ledger as ledger_rows
from archiver.store.audit import actor

log = logging.getLogger(__name__)

OPERATIONS = {
    "erase": "the erasure",
    "purge": "the purge",
    "convert": "a file's rewrite",
    "compact": "a merge",
}


def begin(
    conn: BulkConnection,
    operation: str,
    storage_url: str,
    tables: list[str],
    request: dict[str, Any],
) -> int:
    """Step 1: the ledger row, committed, and its lock held by this session."""
    operation_id = ledger_rows.begin(conn, operation, actor(), storage_url, tables, request)
    conn.commit()
    return operation_id


class FilesGone(InputError):
    """Some files an operation was to retire were retired by another meanwhile."""


class OperationLost(ArchiverError):
    """An operation's session ended (killed, or its connection lost) while its process
    went on: the sweep may already have taken it for dead, so it writes nothing more."""


def guard(conn: BulkConnection, operation: int) -> Callable[[], None]:
    """A check, run before and after each upload of a rewrite, that `conn`'s session
    still holds `operation`'s lock; OperationLost when not. (A soak found a process
    whose session had been terminated upload 23 rewrites after the sweep had abandoned
    its operation: catalogued nowhere, never swept again.)"""

    def check() -> None:
        try:
            held = ledger_rows.lock_held(conn, operation)
        except adbc_driver_manager.Error as exc:
            raise OperationLost(
                f"operation {operation}: its database session ended ({first_line(exc)})"
            ) from None
        if not held:
            raise OperationLost(f"operation {operation}: its session no longer holds its lock")

    return check


def end(conn: BulkConnection, operation: int) -> None:
    """Give the operation's lock back (it also goes with the session)."""
    ledger_rows.unlock(conn, operation)
    conn.commit()


def lock_files(conn: BulkConnection, ids: list[int]) -> bool:
    """In the operation's transaction: lock the files it will retire. False when some
    were retired meanwhile (another operation took their rows)."""
    return archive_files.lock_unretired(conn, ids) == len(set(ids))


def commit_changes(
    conn: BulkConnection,
    operation: int,
    retired: list[int],
    written: list[ArchivedFile],
    rows: int,
    detail: dict[str, Any],
    *,
    keep: float,
) -> None:
    """Step 3, in the operation's open transaction (the caller commits): the files
    retired (kept `keep` seconds for readers but an erasure's), their rewrites
    catalogued, the ledger row done."""
    archive_files.retire(conn, retired, operation, keep)
    for f in written:
        archive_files.insert(conn, f, FileState.COMMITTED)
    archive_files.stop_keeping(conn, operation)
    ledger_rows.done(conn, operation, rows, detail)


@dataclass
class TakenOut:
    """What an operation takes out of the archive (step 2's result): the files it
    retires, the rewrites that replace some of them, rows, and per-table counts."""

    retired: list[int] = field(default_factory=list)
    written: list[ArchivedFile] = field(default_factory=list)
    rows: int = 0
    detail: dict[str, Any] = field(default_factory=dict)


def take_out(
    ctx: Context,
    conn: BulkConnection,
    operation: str,
    tables: list[str],
    request: dict[str, Any],
    rewrite: Callable[[int], TakenOut],
    before_commit: Callable[[], None] | None = None,
) -> tuple[int, TakenOut]:
    """Steps 1-4 for an operation of the catalog alone (purge, erase, compact): the
    ledger row; `rewrite(ledger id)` uploads what replaces the files it retires (step
    2); one transaction retires them, catalogues the rewrites and closes the row
    (refused if another operation retired any meanwhile; `before_commit` may refuse
    too, in that transaction); then what is out of the Delta log goes. The ledger id,
    and what was taken out."""
    storage = ctx.storage()
    ledger_id = begin(conn, operation, str(storage.location), tables, request)
    try:
        done = rewrite(ledger_id)
        if not lock_files(conn, done.retired):
            raise FilesGone(
                f"{operation}: some of these files left the archive meanwhile (another "
                "restore, purge or erase); nothing changed, run it again"
            )
        if before_commit is not None:
            before_commit()
        failpoints.reach(f"{operation}_before_commit")
        commit_changes(
            conn, ledger_id, done.retired, done.written, done.rows, done.detail,
            keep=ctx.settings.reader_retention,
        )  # fmt: skip
        try:
            conn.commit()
        except Exception as exc:  # the COMMIT may have landed: not "nothing changed"
            raise outcome.Said(
                f"{operation}: {outcome.describe(exc)} as it committed: whether it did, "
                f"archive_ledger row {ledger_id} says (done: it stands); the workers' sweep "
                "settles what it left either way",
                1,
            ) from exc
        ctx.committed(
            f"{OPERATIONS.get(operation, operation)} is committed (ledger {ledger_id})",
            "the workers' next publication and sweep finish it",
        )
    except BaseException:
        give_up(conn, storage, ledger_id, tables)
        raise
    failpoints.reach(f"{operation}_committed")
    try:  # files never published go now; the others once out of the Delta log
        end(conn, ledger_id)  # its lock also goes with the session
        for table in tables:
            reap_now(conn, storage, table)
    except Exception as exc:  # committed: what is left, the sweep deletes
        log.warning("%s committed; retired files left for the sweep: %s", operation, exc)
    return ledger_id, done


def give_up(conn: BulkConnection, storage: Storage, operation: int, tables: list[str]) -> None:
    """An operation failing before its commit: abandoned now (its rewrites deleted, its
    lock given back) where its session still works; otherwise -- the session is what
    failed -- left to the sweep, which abandons it once its lock is free. Never raises:
    the failure the caller is raising says what happened."""
    try:
        conn.rollback()
        abandon(conn, storage, operation, tables)
        end(conn, operation)
    except Exception as exc:
        log.warning(
            "operation %s did not commit; what it wrote is left to the sweep: %s",
            operation,
            first_line(exc),
        )


def abandon(
    conn: BulkConnection,
    storage: Storage,
    operation: int,
    tables: list[str],
    *,
    source_aborted: bool = False,
) -> int:
    """An operation that did not commit: delete the rewritten blobs it left (none is
    catalogued, since its step 3 never committed), release the files it claimed and
    mark its row abandoned. Returns how many blobs went. An operation that recorded an
    intent is left to the sweep (its source transaction may have committed) unless
    `source_aborted`; -1 then."""
    if not source_aborted and ledger_rows.intent_of(conn, operation) is not None:
        conn.rollback()
        return -1
    here = str(storage.location)
    deleted = 0
    for table in tables:
        for prefix in names.operation_prefixes(table, operation):
            for stored in list(storage.list(storage.object_name(prefix))):
                if not archive_files.is_catalogued(conn, here, stored.name):
                    storage.delete(stored.name)
                    deleted += 1
    archive_files.unclaim(conn, operation)
    ledger_rows.abandon(conn, operation)
    conn.commit()
    return deleted


class Unsettled(outcome.Said):
    """A restore with the catalog in another database whose source COMMIT succeeded, or
    may have, while its catalog change did not: the next sweep settles it (its message
    says which side it is on)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 1)


def record_intent(
    catalog: BulkConnection,
    operation: int,
    source_xid: str,
    retired: list[int],
    written: list[ArchivedFile],
    rows: int,
    detail: dict[str, Any],
) -> None:
    """Step 3's first half when the catalog is another database, before the source
    commits: claim the files to retire (refused if some left or were claimed meanwhile)
    and record what `settle` will do and the source transaction that decides it."""
    claimed = archive_files.claim(catalog, retired, operation)
    if len(claimed) != len(set(retired)):
        catalog.rollback()
        raise InputError(
            "some of these files left the archive meanwhile (another restore, purge or "
            "erase); nothing restored, run it again"
        )
    intent = {
        "retired": retired,
        "written": [dataclasses.asdict(f) for f in written],
        "rows": rows,
        "detail": detail,
    }
    ledger_rows.record_intent(catalog, operation, source_xid, intent)
    catalog.commit()


def settle(catalog: BulkConnection, operation: int, keep: float) -> None:
    """Step 3's second half, once the source committed: the recorded intent applied in
    one catalog transaction (files retired, rewrites catalogued, the row done)."""
    text = ledger_rows.intent_of(catalog, operation)
    if text is None:
        raise ArchiverError(f"ledger operation {operation} recorded no intent to settle")
    intent = json.loads(text)
    written = [ArchivedFile(**f) for f in intent["written"]]
    commit_changes(
        catalog, operation, intent["retired"], written, intent["rows"], intent["detail"], keep=keep
    )
    catalog.commit()


def sweep(ctx: Context, conn: BulkConnection) -> None:
    """What dead operations left on this storage, settled: by the workers' ledger sweep
    (archiver.maintenance.settle), which then reaps the retired files, and by
    `remove-orphans` before it looks. A dead restore into another database than the
    catalog's (only such a restore records an intent) is settled by its source
    transaction's fate (pg_xact_status in the source database): committed, its intent
    is applied; aborted, it is abandoned; in progress or forgotten, it is left, and said."""
    storage = ctx.storage()
    for operation, tables, xid, intent in ledger_rows.take_dead(conn, str(storage.location)):
        conn.commit()
        try:
            if intent is not None:
                status = _source_status(ctx, str(xid))
                if status == "committed":
                    settle(conn, int(operation), ctx.settings.reader_retention)
                    log.warning(
                        "restore %s: its rows had moved back before its process died; "
                        "their files have now left the archive",
                        operation,
                    )
                    continue
                if status != "aborted":
                    log.warning(
                        "restore %s: its source transaction %s is %s: left as it is (its "
                        "files stay in the archive, claimed, until it is known)",
                        operation, xid, status or "unknown to the source",
                    )  # fmt: skip
                    continue
            gone = abandon(conn, storage, int(operation), json.loads(tables), source_aborted=True)
            log.warning(
                "archive operation %s did not finish (its process died): abandoned, "
                "%d rewritten files deleted, the archive is as it was",
                operation,
                gone,
            )
        finally:
            end(conn, int(operation))
    conn.commit()


def reap_now(conn: BulkConnection, storage: Storage, table: str) -> int:
    """`reap` if no publisher holds `table` now (else its publish job reaps after it)."""
    here = str(storage.location)
    if not publisher_lock.try_take(conn, here, table):
        return 0
    try:
        return reap(conn, storage, table)
    finally:
        publisher_lock.release(conn, here, table)


def reap(conn: BulkConnection, storage: Storage, table: str) -> int:
    """Step 4's end, holding the table's publisher lock (delta_lock: no publication can
    add a file while it goes): delete the blobs of `table`'s retired files that are out
    of its Delta log, then their catalog rows (a crash between the two deletes the blob
    again, which is no error). A blob the storage refuses to delete (under a policy set
    outside archiver) stays retired, for the next sweep. Returns how many went."""
    here = str(storage.location)
    total = after = 0
    while batch := archive_files.reapable(conn, here, table, after):
        after = int(batch[-1][0])
        try:  # a blob batch per 256 (a compaction's inputs go by the thousand)
            refused = storage.delete_many([str(path) for _, path in batch])
        except StorageError as exc:  # unreachable: the next sweep goes on
            log.warning("%s: retired files not deleted: %s", table, exc)
            break
        for path, why in refused.items():  # a hold set outside archiver: kept
            log.warning("%s: retired file %s not deleted: %s", table, path, why)
        gone = [int(file_id) for file_id, path in batch if str(path) not in refused]
        archive_files.delete_retired(conn, gone)
        conn.commit()
        total += len(gone)
    conn.commit()
    if total:
        log.info("%s: %d retired files deleted", table, total)
    return total


def _source_status(ctx: Context, xid: str) -> str | None:
    """pg_xact_status of a transaction of the source database (None: too old for it to
    remember), on a connection taken when asked: how the sweep learns the fate of a dead
    restore into another database."""
    with ctx.bulk(ctx.settings.effective_source_url) as conn:
        return transaction_status(conn, xid)
