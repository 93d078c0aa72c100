"""`archiver purge` (and a policy's `retain`) and `archiver erase`: which files, checked
against what protects them, then the ledger operation (archiver.lifecycle) on a catalog
connection in a thread, and the publications that take the retired files out of their
Delta tables."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from archiver import db, jobqueue
from archiver.bulk import on_source
from archiver.config import Settings
from archiver.errors import InputError
from archiver.lifecycle.retention import Age, Expired, expired, protected
from archiver.model import CatalogFile
from archiver.operations.files import (
    FileSelection,
    as_stored,
    chunk_children,
    chunk_groups,
    refuse_offline,
)
from archiver.operations.publish import make_visible
from archiver.source.references import ForeignKey
from archiver.text import counted

log = logging.getLogger(__name__)
Report = Callable[[str], None]
# An archive job of the table running now (its rows would reach the archive after an
# erasure read it).
RUNNING_ARCHIVE = """
SELECT id FROM background_jobs
WHERE status = 'running' AND task_name = 'archive' AND payload->>'table' = $1 LIMIT 1
"""


async def table_files(settings: Settings, table: str, verb: str) -> tuple[str, list[CatalogFile]]:
    """`table` as the catalog names it, and its committed files; one line if none or
    if the bare name is in several schemas."""
    async with db.connection(settings.database_url) as conn:
        named = await jobqueue.catalogued_tables(conn, table)
    found = {
        t: fs for t in named if (fs := await FileSelection(table=t).files(settings, "committed"))
    }
    if not found:
        raise InputError(f"{verb}: no archived files of table {table!r}")
    if len(found) > 1:
        raise InputError(f"{verb}: {table!r} is ambiguous ({', '.join(found)}): name the schema")
    [(name, files)] = found.items()
    here = str(settings.storage_location())
    elsewhere = sorted({f.storage_url for f in files if f.storage_url != here})
    if elsewhere:  # written before ARCHIVER_STORAGE_URL changed: acted on where they are
        log.warning(
            "%s: %s of %s on %s, not %s: run it with ARCHIVER_STORAGE_URL set to each "
            "storage in turn",
            verb, counted(sum(f.storage_url != here for f in files), "file"), name,
            ", ".join(elsewhere), here,
        )  # fmt: skip
        files = [f for f in files if f.storage_url == here]
        if not files:
            raise InputError(f"{verb}: no archived files of table {name} on {here}")
    return name, files


@dataclass(frozen=True)
class Purged:
    ledger: int | None  # None: a dry run, or nothing to purge
    rows: int
    files: int
    spanning: int  # files kept: their cutoff range spans the limit
    kept_until: str | None  # the newest row of those, as archived
    skipped: str | None  # with skip_protected: what was kept for its protection


async def purge_table(
    settings: Settings,
    table: str,
    age: Age,
    *,
    dry_run: bool = False,
    skip_protected: bool = False,
    report: Report,
    now: dt.datetime | None = None,
    missing_ok: bool = False,
    no_wait: bool = False,
) -> Purged:
    """Purge `table`'s archived files wholly older than `age` (with the files archived
    with them): retired, out of the Delta table, deleted."""
    from archiver.lifecycle.purge import PurgePlan, purge
    from archiver.storage import open_storage

    now = now or dt.datetime.now(dt.UTC)
    try:
        name, files = await table_files(settings, table, "purge")
    except InputError:
        if missing_ok:  # a policy's purge before its table's first archive
            return Purged(None, 0, 0, 0, None, None)
        raise
    rooted = [f for f in files if f.cutoff_column]
    if not rooted:
        raise InputError(
            f"purge: {name} is archived with its parents (its files have no cutoff column): "
            "purge the table they were archived with; its rows go with theirs"
        )
    before = age.before(now)
    split = expired(rooted, before)
    storage = open_storage(settings)
    groups = await chunk_groups(settings, split.going)
    # a chunk goes whole or stays whole: kept when any of its files is protected, as
    # the catalog recorded it or as the storage reports it now
    chunks = [[root, *groups.get(root.path, [])] for root in split.going]
    stored = await asyncio.to_thread(as_stored, storage, [f for c in chunks for f in c])
    by_path = {f.path: f for f in stored}
    held = [c for c in chunks if protected([by_path[f.path] for f in c], now)]
    skipped = protected([by_path[f.path] for c in held for f in c], now)
    if skipped and not skip_protected:
        raise InputError(
            f"purge refused, nothing purged: of the files older than {age}, {skipped} "
            "(--skip-protected purges the others)"
        )
    going = [c for c in chunks if c not in held]
    split = Expired([c[0] for c in going], split.spanning)
    plan = PurgePlan(name, age, before, split, [f for c in going for f in c[1:]])
    files_going = split.going + plan.children
    rows = sum(f.row_count for f in files_going)
    result = Purged(None, rows, len(files_going), len(split.spanning), split.kept_until, skipped)
    if dry_run or not files_going:
        for f in files_going:
            span = f"{f.min_cutoff_value} .. {f.max_cutoff_value}" if f.cutoff_column else ""
            report(f"{f.path}: {f.row_count} rows, {span or 'with its chunk of ' + name}")
        return result
    ledger_id, _ = await on_source(
        settings.database_url, lambda conn: purge(conn, storage, plan, report)
    )
    tables = {f.source_table for f in files_going}
    await make_visible(settings, tables, no_wait=no_wait, report=report)
    return Purged(ledger_id, rows, len(files_going), result.spanning, result.kept_until, skipped)


@dataclass(frozen=True)
class Erased:
    ledger: int | None  # None: a dry run
    rows: dict[str, int]  # per table
    files: dict[str, tuple[int, int]]  # per table: files holding erased rows, of all files


async def erase_rows(
    settings: Settings,
    table: str,
    where: str,
    *,
    with_children: bool,
    dry_run: bool,
    reason: str,
    report: Report,
    no_wait: bool = False,
) -> Erased:
    """Erase the archived rows of `table` matching `where` (and, with_children, the rows
    of its aggregate's tables referencing them) from every file holding them."""
    from archiver.lifecycle import erase as eraser
    from archiver.lifecycle.predicate import Predicate
    from archiver.query import engine
    from archiver.restore import parents_first_today
    from archiver.storage import open_storage

    name, files = await table_files(settings, table, "erase")
    per_table = {name: files}
    keys: list[ForeignKey] = []
    if with_children:
        from archiver.operations.inspect import aggregate_children

        children = (await aggregate_children(settings, [name])).get(name, [])
        if not children:
            raise InputError(f"erase: --with-children: no table references {name} today")
        ordered, keys = await on_source(
            settings.effective_source_url,
            lambda conn: parents_first_today(conn, [name, *children]),
        )
        here = str(settings.storage_location())
        for child in ordered[1:]:
            stored = await FileSelection(table=child).files(settings, "committed")
            per_table[child] = [f for f in stored if f.storage_url == here]
    elif await chunk_children(settings, files):
        raise InputError(
            f"erase: {name} was archived with the rows that reference it (--with-children): "
            "give --with-children, or those rows would stay archived without their parents"
        )
    async with db.connection(settings.database_url) as conn:
        running = await conn.fetchval(RUNNING_ARCHIVE, name)
    if running:
        raise InputError(
            f"erase: job {running} is archiving {name} now, and rows it moves after the "
            "erasure read the archive would escape it: wait for it to finish (or "
            f"`archiver pause --table {name}`), then erase"
        )
    refuse_offline("erase", [f for fs in per_table.values() for f in fs])
    storage = open_storage(settings)
    location = settings.storage_location()

    def find() -> tuple[eraser.ErasePlan, eraser.Found]:
        with engine(settings, location) as con:
            eraser.open_view(con, storage, files)
            predicate = Predicate.check(con, where, eraser.VIEW, name)
            plan = eraser.ErasePlan(name, predicate, per_table, keys, reason)
            return plan, eraser.find(con, storage, plan)

    plan, found = await asyncio.to_thread(find)
    counts = {t: (len(found.positions.get(t, {})), len(fs)) for t, fs in per_table.items()}
    rows = {t: found.rows(t) for t in per_table}
    holding = [f for t, fs in per_table.items() for f in fs if f.path in found.positions[t]]
    why = protected(await asyncio.to_thread(as_stored, storage, holding), dt.datetime.now(dt.UTC))
    if why:
        raise InputError(f"erase refused, nothing erased: files holding matching rows: {why}")
    if dry_run:
        for t in per_table:
            report(
                f"{t}: {rows[t]} rows would be erased from {counts[t][0]} of {counts[t][1]} files"
            )
        return Erased(None, rows, counts)
    ledger_id = await on_source(
        settings.database_url, lambda conn: eraser.erase(conn, storage, plan, found, report)
    )
    if found.total:
        tables = [t for t in per_table if found.positions.get(t)]
        await make_visible(settings, tables, no_wait=no_wait, report=report)
    return Erased(ledger_id, rows, counts)
