"""`archiver purge` and a policy's `retain`: a table's files wholly older than a
retention period, checked against what protects them, then the ledger operation
(archiver.lifecycle.purge) on a catalog connection in a thread, and the publications
that take the retired files out of their Delta tables."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from dataclasses import dataclass

from archiver.context import Context
from archiver.errors import InputError
from archiver.lifecycle.purge import PurgePlan, purge
from archiver.lifecycle.retention import Age, Expired, expired, protected
from archiver.operations.publish import make_visible
from archiver.operations.selection import (
    as_stored,
    chunk_groups,
    hold_tables,
    stored_table_files,
    table_files,
)
from archiver.outcome import Report


@dataclass(frozen=True)
class Purged:
    ledger: int | None  # None: a dry run, or nothing to purge
    rows: int
    files: int
    spanning: int  # files kept: their cutoff range spans the limit
    kept_until: str | None  # the newest row of those, as archived
    skipped: str | None  # with skip_protected: what was kept for its protection


async def purge_table(
    ctx: Context,
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
    with them): retired, out of the Delta table, deleted; the table held against
    compaction meanwhile (selection.hold_tables)."""
    try:
        name, _ = await table_files(ctx, table, "purge")
    except InputError:
        if missing_ok:  # a policy's purge before its table's first archive
            return Purged(None, 0, 0, 0, None, None)
        raise
    now = now or dt.datetime.now(dt.UTC)
    async with hold_tables(ctx, [name]):  # its files selected again: a merge may have committed
        name, files = await stored_table_files(ctx, name, "purge")
        rooted = [f for f in files if f.cutoff_column]
        if not rooted:
            raise InputError(
                f"purge: {name} is archived with its parents (its files have no cutoff column): "
                "purge the table they were archived with; its rows go with theirs"
            )
        before = age.before(now)
        split = expired(rooted, before)
        storage = ctx.storage()
        groups = await chunk_groups(ctx, split.going)
        # a chunk goes whole or stays whole: kept when any of its files is protected, as
        # the catalog recorded it or as the storage reports it now
        chunks = [[root, *groups.get(root.path, [])] for root in split.going]
        stored = await asyncio.to_thread(as_stored, storage, [f for c in chunks for f in c])
        by_path = {f.path: f for f in stored}
        kept = [c for c in chunks if protected([by_path[f.path] for f in c], now)]
        skipped = protected([by_path[f.path] for c in kept for f in c], now)
        if skipped and not skip_protected:
            raise InputError(
                f"purge refused, nothing purged: of the files older than {age}, {skipped} "
                "(--skip-protected purges the others)"
            )
        going = [c for c in chunks if c not in kept]
        split = Expired([c[0] for c in going], split.spanning)
        plan = PurgePlan(name, age, before, split, [f for c in going for f in c[1:]])
        files_going = split.going + plan.children
        rows = sum(f.row_count for f in files_going)
        result = Purged(
            None, rows, len(files_going), len(split.spanning), split.kept_until, skipped
        )
        if dry_run or not files_going:
            for f in files_going:
                span = f"{f.min_cutoff_value} .. {f.max_cutoff_value}" if f.cutoff_column else ""
                report(f"{f.path}: {f.row_count} rows, {span or 'with its chunk of ' + name}")
            return result
        ledger_id, _ = await ctx.in_thread(
            ctx.settings.database_url, lambda conn: purge(ctx, conn, plan, report)
        )
        tables = {f.source_table for f in files_going}
        await make_visible(ctx, tables, no_wait=no_wait, report=report)
        return dataclasses.replace(result, ledger=ledger_id)
