"""`archiver verify`: the selected files against the catalog and the storage, objects
the catalog does not know, and each published table's Delta log against the catalog."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from archiver.context import Context
from archiver.delta.check import delta_problems as check
from archiver.delta.location import storage_options
from archiver.errors import InputError, JobStateError, OfflineError
from archiver.files import names
from archiver.ident import TableName, as_typed
from archiver.model import ArchiveRequest, CatalogFile, FileState
from archiver.operations.inspect import aggregate_children
from archiver.operations.selection import FileSelection, mark_offline, refuse_offline
from archiver.store import archive_files, audit, jobs

if TYPE_CHECKING:
    from archiver.storage.seam import Storage


async def verify(
    ctx: Context, selection: FileSelection, *, skip_offline: bool = False
) -> tuple[int, list[str]]:
    """Check the selected files against the catalog, and look for objects the catalog
    does not know where those files live: (files checked, problems). Archive-tier
    files cannot be read: refused in one line, or with `skip_offline` checked by what
    the service reports of them (size and MD5). Each file found sound is marked so
    (`archiver tier --tier Archive` takes only those)."""
    files = await selection.files(ctx)
    storage = ctx.storage()
    table = selection.table
    if table and not files and "." not in table:
        raise InputError(f"no archived files of table {table!r}; give schema.table")
    if not skip_offline:
        refuse_offline("verify", [f for f in files if f.state != FileState.RETIRED])
    # the catalogued names where objects are listed: of the tables listed, not of the
    # whole catalog (100,000 files read for one table's 10, before)
    if selection.job_id:
        job = str(selection.job_id)
        tables = await job_tables(ctx, selection.job_id, files)
        prefixes = [names.job_prefix(t, job) for t in tables]
        known = [f for t in tables for f in await FileSelection(table=as_typed(t)).files(ctx)]
    elif table:
        listed = files[0].source_table if files else str(TableName.parse(table))
        prefixes = [names.job_prefix(listed)]
        known = await FileSelection(table=as_typed(listed) if files else table).files(ctx)
    else:
        prefixes = [""]
        known = await FileSelection().files(ctx)
    prefixes = [storage.object_name(p) for p in prefixes]
    problems, sound, offline, unknown = await asyncio.to_thread(
        _verify, storage, files, known, prefixes
    )
    problems += [f"{name}: not in the catalog" for name in await _strays(ctx, storage, unknown)]
    if offline:  # moved to the Archive tier outside archiver (a lifecycle rule)
        await mark_offline(ctx, offline)
        if not skip_offline:
            refuse_offline("verify", [replace(f, offline=True) for f in files if f.path in offline])
    if ctx.settings.delta and not selection.job_id:
        problems += await delta_problems(ctx, storage, {f.source_table for f in files})
    if ctx.settings.iceberg and not selection.job_id:
        from archiver.iceberg.check import iceberg_problems  # pyiceberg: only where it is on

        named = {f.source_table for f in files}
        problems += await ctx.in_thread(
            ctx.settings.database_url, lambda conn: iceberg_problems(ctx, conn, named)
        )
    if selection.job_id:
        scope, checked = f"job {selection.job_id}", tables
    elif table:
        scope, checked = f"table {listed}", [listed]
    else:
        scope, checked = "all", []
    async with ctx.catalog() as conn:  # the console shows it
        await archive_files.verified(
            conn, sound, actor=audit.actor(), scope=scope, checked=checked, files=len(files),
            problems=problems,
        )  # fmt: skip
    return len(files), problems


async def delta_problems(ctx: Context, storage: Storage, tables: set[str]) -> list[str]:
    """Each published table's Delta log against the catalog (archiver.delta.check)."""

    here = str(storage.location)
    problems: list[str] = []
    async with ctx.catalog() as conn:
        published = {t: await archive_files.published_paths(conn, here, t) for t in sorted(tables)}
    options = storage_options(ctx.settings, storage.location)
    for table, paths in published.items():
        if paths:
            problems += await asyncio.to_thread(check, storage, options, table, paths)
    return problems


async def job_tables(ctx: Context, job_id: uuid.UUID, files: list[CatalogFile]) -> list[str]:
    """Every table a job may have uploaded files of: those of its catalogued files, its
    table (or partition) and, with --with-children, its children as the source has them
    now. A failed job may have catalogued nothing, and an attempt's uploads of a child
    come before its root's."""
    tables = {f.source_table: None for f in files}
    try:
        async with ctx.catalog() as conn:
            job = await jobs.get_job(conn, job_id)
    except JobStateError:  # pruned (retention): its files are what is left
        if not files:
            raise InputError(f"no job {job_id} and no archived files of it") from None
        return list(tables)
    if job.task_name != ArchiveRequest.KIND:  # a publish job's files are its table's
        return list(tables)
    request = ArchiveRequest.from_payload(job.payload)
    tables[request.partition or request.table] = None
    if request.with_children:
        try:
            children = await aggregate_children(ctx, [request.table])
        except InputError:  # the table is gone or changed: its catalogued files still count
            children = {}
        tables.update(dict.fromkeys(children.get(request.table, [])))
    return list(tables)


async def _strays(ctx: Context, storage: Storage, unknown: list[str]) -> list[str]:
    """Of the objects the catalog did not hold when read, those nobody will catalogue:
    not a running job's upload or a running operation's rewrite or merge (their writer
    catalogues or deletes them; `archiver verify` while the nightly jobs run said "not
    in the catalog" of each upload in flight), nor one a writer catalogued since (the
    writers are asked first, the catalog then, as the orphan sweep asks them)."""
    if not unknown:
        return []
    writers = {n: names.writer_of(n) for n in unknown}
    async with ctx.catalog() as conn:
        known = [w for w in writers.values() if w is not None]
        working = await jobs.writers_at_work(conn, *names.split_writers(known))
        rest = [n for n in unknown if writers[n] not in working]
        since = await archive_files.catalogued_among(conn, str(storage.location), rest)
    return [n for n in rest if n not in since]


def _verify(
    storage: Storage, files: list[CatalogFile], known: list[CatalogFile], prefixes: list[str]
) -> tuple[list[str], list[int], list[str], list[str]]:
    """(problems, ids of the files found sound, names found in the Archive tier, names
    of objects the catalog does not hold)."""
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
    root = storage.object_name("")  # a table's folder is the first name under it
    unknown = [
        o.name
        for prefix in prefixes
        for o in storage.list(prefix)
        if o.name not in paths and not names.is_format_object(o.name[len(root) :].partition("/")[2])
    ]
    return problems, sound, offline, unknown
