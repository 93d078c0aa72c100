"""The catalogued files a command acts on (`FileSelection`), and the commands over them:
restore the selected files, verify them against the catalog and storage."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from archiver import db, failpoints, jobqueue
from archiver.bulk import BulkConnection, on_source
from archiver.config import Settings
from archiver.errors import InputError, JobStateError, OfflineError
from archiver.ident import TableName
from archiver.model import ArchiveRequest, CatalogFile, FileState
from archiver.operations.inspect import aggregate_children

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from archiver.restore import Restored
    from archiver.storage.seam import Storage


@dataclass(frozen=True)
class FileSelection:
    job_id: uuid.UUID | None = None
    table: str | None = None
    cutoff_from: str | None = None  # ISO 8601, inclusive
    cutoff_to: str | None = None  # ISO 8601, exclusive

    async def files(self, settings: Settings, state: str | None = None) -> list[CatalogFile]:
        async with db.connection(settings.database_url) as conn:
            return await jobqueue.archived_files(
                conn,
                job_id=self.job_id,
                table=self.table,
                cutoff_from=dt.datetime.fromisoformat(self.cutoff_from)
                if self.cutoff_from
                else None,
                cutoff_to=dt.datetime.fromisoformat(self.cutoff_to) if self.cutoff_to else None,
                state=state,
            )


async def restore(
    settings: Settings,
    selection: FileSelection,
    *,
    into: str | None,
    keep_archive: bool,
    skip_conflicts: bool,
    dry_run: bool,
    ignore_dropped_columns: bool,
    report: Callable[[str], None],
    no_wait: bool = False,
) -> tuple[Restored, list[CatalogFile]]:
    """Restore the selected committed files in one transaction: what it did, and the
    files. Into the archived table (not --into, not --keep-archive) the rows move back:
    out of the archive in the same transaction (archiver.ledger)."""
    from archiver import ledger
    from archiver.restore import RestorePlan, restore
    from archiver.storage import open_storage

    if into is not None:
        TableName.parse(into)
    moves_back = into is None and not keep_archive
    if moves_back and not settings.same_database:
        raise InputError(
            "restore: the catalog is in another database than the source, so rows cannot "
            "leave the archive in the restore's transaction; --keep-archive copies them back"
        )
    files = await selection.files(settings, state="committed")
    if not files:
        raise InputError("no archived files match")
    if selection.job_id is None:
        files += await chunk_children(settings, files)
    refuse_offline("restore", files)
    storage = open_storage(settings)
    if moves_back:
        from archiver.lifecycle.retention import protected

        why = protected(await asyncio.to_thread(as_stored, storage, files), dt.datetime.now(dt.UTC))
        if why:
            raise InputError(
                f"restore refused, nothing changed: of these files, {why}: they cannot leave "
                "the archive (--keep-archive copies the rows back)"
            )
    plan = RestorePlan(
        files,
        into,
        skip_conflicts,
        selection.cutoff_from,
        selection.cutoff_to,
        dry_run,
        ignore_dropped_columns,
        moves_back=moves_back,
    )
    tables = list(dict.fromkeys(f.source_table for f in files))
    request = {
        "job": str(selection.job_id) if selection.job_id else None,
        "table": selection.table,
        "from": selection.cutoff_from,
        "to": selection.cutoff_to,
        "on_conflict": "skip" if skip_conflicts else "refuse",
    }

    def run(conn: BulkConnection) -> Restored:
        workdir = Path(tempfile.gettempdir())
        if not moves_back or dry_run:
            return restore(conn, storage, plan, workdir, report)
        operation = ledger.begin(conn, "restore", str(storage.location), tables, request)
        try:
            done = restore(conn, storage, replace(plan, operation=operation), workdir, report)
        except BaseException:
            ledger.abandon(conn, storage, operation, tables)
            raise
        finally:
            ledger.end(conn, operation)
        failpoints.reach("restore_committed")
        if no_wait:  # files never published go now; the others after their removal
            try:  # from the Delta log (the publications queued below)
                for table in tables:
                    ledger.reap_now(conn, storage, table)
            except Exception as exc:  # the rows have moved back: the rest, a sweep does
                log.warning("restore committed; retired files left for the sweep: %s", exc)
        return done

    try:
        done: Restored = await on_source(settings.effective_source_url, run)
    except OfflineError as exc:  # moved by a lifecycle rule: the catalog learns it
        await mark_offline(settings, [exc.name])
        raise InputError(f"restore refused, nothing changed: {exc}") from None
    if moves_back and not dry_run and done.retired:
        from archiver.operations.publish import make_visible

        await make_visible(settings, tables, no_wait=no_wait, report=report)
    return done, files


def refuse_offline(verb: str, files: list[CatalogFile]) -> None:
    """One line when some of `files` are in the Archive tier (unreadable)."""
    offline = [f for f in files if f.offline]
    if offline:
        table = offline[0].source_table
        raise InputError(
            f"{verb}: {len(offline)} of {len(files)} files of {table} are in the Archive "
            f"tier and cannot be read until rehydrated: `archiver rehydrate --table {table}` "
            "(up to 15 hours; run it again to follow)"
            + ("; `verify --skip-offline` checks the others" if verb == "verify" else "")
        )


async def chunk_children(settings: Settings, files: list[CatalogFile]) -> list[CatalogFile]:
    """The files of referencing tables archived in the same chunks as `files`
    (`--with-children`)."""
    chosen = {f.path for f in files}
    groups = await chunk_groups(settings, files)
    return [c for children in groups.values() for c in children if c.path not in chosen]


async def chunk_groups(
    settings: Settings, files: list[CatalogFile]
) -> dict[str, list[CatalogFile]]:
    """Each root file of `files` (one with a cutoff column) with the files of
    referencing tables archived in its chunk: a chunk's files are consecutive parts,
    the root's last, and only the root's has a cutoff column."""
    chosen = {f.path for f in files}
    groups: dict[str, list[CatalogFile]] = {}
    for job_id in dict.fromkeys(f.job_id for f in files):
        pending: list[CatalogFile] = []
        job_files = await FileSelection(job_id=uuid.UUID(job_id)).files(settings, "committed")
        for f in sorted(job_files, key=lambda f: f.part):
            if f.cutoff_column:  # a chunk's root file closes it
                if f.path in chosen:
                    groups[f.path] = pending
                pending = []
            else:
                pending.append(f)
    return groups


def as_stored(storage: Storage, files: list[CatalogFile]) -> list[CatalogFile]:
    """`files` with the protection the storage reports for each now (a policy or hold
    set outside archiver too), beside what the catalog recorded."""
    found = []
    for f in files:
        stored = storage.stat(f.path)
        if stored is not None and (stored.legal_hold or stored.immutable_until):
            until = max((d for d in (f.immutable_until, stored.immutable_until) if d), default=None)
            f = replace(f, legal_hold=f.legal_hold or stored.legal_hold, immutable_until=until)
        found.append(f)
    return found


async def verify(
    settings: Settings, selection: FileSelection, *, skip_offline: bool = False
) -> tuple[int, list[str]]:
    """Check the selected files against the catalog, and look for objects the catalog
    does not know where those files live: (files checked, problems). Archive-tier
    files cannot be read: refused in one line, or with `skip_offline` checked by what
    the service reports of them (size and MD5). Each file found sound is marked so
    (`archiver tier --tier Archive` takes only those)."""
    from archiver import ledger
    from archiver.files import names
    from archiver.storage import open_storage

    files = await selection.files(settings)
    storage = open_storage(settings)
    table = selection.table
    if table and not files and "." not in table:
        raise InputError(f"no archived files of table {table!r}; give schema.table")
    if not skip_offline:
        refuse_offline("verify", [f for f in files if f.state != FileState.RETIRED])
    # the catalogued names where objects are listed: of the tables listed, not of the
    # whole catalog (100,000 files read for one table's 10, before)
    if selection.job_id:
        job = str(selection.job_id)
        tables = await job_tables(settings, selection.job_id, files)
        prefixes = [names.job_prefix(t, job) for t in tables]
        known = [f for t in tables for f in await FileSelection(table=t).files(settings)]
    elif table:
        listed = files[0].source_table if files else table
        prefixes = [names.job_prefix(listed)]
        known = await FileSelection(table=listed).files(settings)
    else:
        prefixes = [""]
        known = await FileSelection().files(settings)
    prefixes = [storage.object_name(p) for p in prefixes]
    problems, sound, offline = await asyncio.to_thread(_verify, storage, files, known, prefixes)
    if offline:  # moved to the Archive tier outside archiver (a lifecycle rule)
        await mark_offline(settings, offline)
        if not skip_offline:
            refuse_offline("verify", [replace(f, offline=True) for f in files if f.path in offline])
    if settings.delta and not selection.job_id:
        problems += await delta_problems(settings, storage, {f.source_table for f in files})
    if selection.job_id:
        scope, checked = f"job {selection.job_id}", tables
    elif table:
        scope, checked = f"table {listed}", [listed]
    else:
        scope, checked = "all", []
    async with db.connection(settings.database_url) as conn:  # the console shows it
        await conn.execute(db.query("files_verified"), sound)
        await conn.execute(
            db.query("record_verification"), ledger.actor(), scope, json.dumps(checked),
            len(files), len(problems), json.dumps(problems[:10]),
        )  # fmt: skip
    return len(files), problems


# In the Delta log: added by a published publication, not yet removed by one.
PUBLISHED = """
SELECT f.path FROM archive_files f JOIN delta_tables d USING (storage_url, source_table)
WHERE f.storage_url = $1 AND f.source_table = $2 AND f.publication <= d.published
  AND (f.unpublication IS NULL OR f.unpublication > d.published)
"""


async def delta_problems(settings: Settings, storage: Storage, tables: set[str]) -> list[str]:
    """Each published table's Delta log against the catalog (archiver.delta.check)."""
    from archiver.delta.check import delta_problems as check
    from archiver.delta.location import storage_options

    here = str(storage.location)
    problems: list[str] = []
    async with db.connection(settings.database_url) as conn:
        published = {
            t: {r[0] for r in await conn.fetch(PUBLISHED, here, t)} for t in sorted(tables)
        }
    options = storage_options(settings, storage.location)
    for table, paths in published.items():
        if paths:
            problems += await asyncio.to_thread(check, storage, options, table, paths)
    return problems


async def job_tables(settings: Settings, job_id: uuid.UUID, files: list[CatalogFile]) -> list[str]:
    """Every table a job may have uploaded files of: those of its catalogued files, its
    table (or partition) and, with --with-children, its children as the source has them
    now. A failed job may have catalogued nothing, and an attempt's uploads of a child
    come before its root's."""
    tables = {f.source_table: None for f in files}
    try:
        async with db.connection(settings.database_url) as conn:
            job = await jobqueue.get_job(conn, job_id)
    except JobStateError:  # pruned (retention): its files are what is left
        if not files:
            raise InputError(f"no job {job_id} and no archived files of it") from None
        return list(tables)
    if job.task_name != jobqueue.ARCHIVE_TASK:  # a publish job's files are its table's
        return list(tables)
    request = ArchiveRequest.from_payload(job.payload)
    tables[request.partition or request.table] = None
    if request.with_children:
        try:
            children = await aggregate_children(settings, [request.table])
        except InputError:  # the table is gone or changed: its catalogued files still count
            children = {}
        tables.update(dict.fromkeys(children.get(request.table, [])))
    return list(tables)


def _verify(
    storage: Storage, files: list[CatalogFile], known: list[CatalogFile], prefixes: list[str]
) -> tuple[list[str], list[int], list[str]]:
    """(problems, ids of the files found sound, names found in the Archive tier)."""
    from archiver.delta.check import is_delta_log
    from archiver.verify import verify_file, verify_offline

    here = str(storage.location)
    problems: list[str] = []
    sound: list[int] = []
    offline: list[str] = []
    workdir = Path(tempfile.gettempdir())
    for f in files:  # a retired file is known, and about to be deleted: not checked
        if f.storage_url != here or f.state == FileState.RETIRED:
            continue
        try:
            found = verify_offline(storage, f) if f.offline else verify_file(storage, f, workdir)
        except OfflineError:
            offline.append(f.path)
            found = verify_offline(storage, f)
        problems += found
        if not found and not f.offline and f.path not in offline:
            sound.append(f.id)
    paths = {f.path for f in known if f.storage_url == here}
    problems += [
        f"{o.name}: not in the catalog"
        for prefix in prefixes
        for o in storage.list(prefix)
        if o.name not in paths and not is_delta_log(o.name)
    ]
    return problems, sound, offline


async def mark_offline(settings: Settings, paths: list[str]) -> None:
    """Files a read found in the Archive tier (moved by a lifecycle rule, say): offline
    in the catalog, so their Delta tables leave them out until they are rehydrated."""
    here = str(settings.storage_location())
    async with db.connection(settings.database_url) as conn:
        ids = [
            r[0]
            for r in await conn.fetch(
                "SELECT id FROM archive_files WHERE storage_url = $1 AND path = ANY ($2::text[])",
                here,
                paths,
            )
        ]
        await conn.execute(db.query("files_going_offline"), ids)
        await conn.execute(db.query("files_tier"), ids, "Archive")
        await jobqueue.enqueue_publications(conn, here, delta=settings.delta)
