"""`archiver restore`: the selected committed files back into PostgreSQL in one
transaction (archiver.restore); moved back, they leave the archive in that transaction,
or bridged to it when the catalog is another database (archiver.ledger), and then their
Delta tables."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import tempfile
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from archiver import failpoints, ledger
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.errors import InputError, OfflineError
from archiver.ident import TableName
from archiver.lifecycle.retention import protected
from archiver.model import CatalogFile
from archiver.operations.publish import make_visible
from archiver.operations.selection import (
    FileSelection,
    as_stored,
    chunk_children,
    hold_tables,
    mark_offline,
    refuse_offline,
)
from archiver.outcome import Report
from archiver.text import counted

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from archiver.restore import Restored, RestorePlan
    from archiver.storage.seam import Storage


async def restore(
    ctx: Context,
    selection: FileSelection,
    *,
    into: str | None,
    keep_archive: bool,
    skip_conflicts: bool,
    dry_run: bool,
    ignore_dropped_columns: bool,
    report: Report,
    no_wait: bool = False,
) -> tuple[Restored, list[CatalogFile]]:
    """Restore the selected committed files in one transaction: what it did, and the
    files. Into the archived table (not --into, not --keep-archive) the rows move back:
    out of the archive in the same transaction (archiver.ledger), or, with the catalog in
    another database, through the ledger's recorded intent. Its tables are held against
    compaction meanwhile (selection.hold_tables)."""
    if into is not None:  # as a user wrote it: archiver's record of it from here on
        into = str(TableName.parse(into))
    from archiver.restore import RestorePlan
    from archiver.restore import restore as restore_rows

    files = await _selected(ctx, selection)
    async with hold_tables(ctx, {f.source_table for f in files}):
        files = await _selected(ctx, selection)  # again: a merge may have committed
        moves_back = into is None and not keep_archive
        refuse_offline("restore", files)
        storage = ctx.storage()
        if moves_back:
            why = protected(
                await asyncio.to_thread(as_stored, storage, files), dt.datetime.now(dt.UTC)
            )
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
            keep=ctx.settings.reader_retention,
        )
        tables = list(dict.fromkeys(f.source_table for f in files))
        request = _request(selection, skip_conflicts)

        def run(conn: BulkConnection) -> Restored:
            workdir = Path(tempfile.gettempdir())
            if not moves_back:
                done = restore_rows(conn, storage, plan, workdir, report)
                if not dry_run:
                    ctx.committed(f"{counted(done.rows, 'row')} restored into {into or tables[0]}")
                return done
            return _move_back(ctx, conn, storage, plan, tables, request, workdir, report, no_wait)

        try:
            done: Restored = await ctx.in_thread(ctx.settings.effective_source_url, run)
        except OfflineError as exc:  # moved by a lifecycle rule: the catalog learns it
            await mark_offline(ctx, [exc.name])
            raise InputError(f"restore refused, nothing changed: {exc}") from None
        if moves_back and not dry_run and done.retired:
            await make_visible(ctx, tables, no_wait=no_wait, report=report)
        return done, files


async def _selected(ctx: Context, selection: FileSelection) -> list[CatalogFile]:
    files = await selection.files(ctx, state="committed")
    if not files:
        raise InputError("no archived files match")
    if selection.job_id is None:
        files += await chunk_children(ctx, files)
    return files


def _move_back(
    ctx: Context,
    conn: BulkConnection,
    storage: Storage,
    plan: RestorePlan,
    tables: list[str],
    request: dict[str, str | None],
    workdir: Path,
    report: Report,
    no_wait: bool,
) -> Restored:
    """A restore that moves the rows back, under a ledger operation; the catalog in
    another database (ARCHIVER_SOURCE_URL) on its own connection, the ledger's intent
    bridging the two transactions (archiver.ledger)."""
    from archiver.restore import restore

    apart = not ctx.settings.same_database
    with ctx.bulk(ctx.settings.database_url) if apart else nullcontext(conn) as catalog:
        if plan.dry_run:
            return restore(conn, storage, plan, workdir, report, catalog if apart else None)
        operation = ledger.begin(catalog, "restore", str(storage.location), tables, request)
        try:
            done = restore(conn, storage, replace(plan, operation=operation), workdir,
                           report, catalog if apart else None)  # fmt: skip
        except BaseException:  # abandoned (not if the source decides), or left to the sweep
            ledger.give_up(catalog, storage, operation, tables)
            raise
        ctx.committed(
            f"{counted(done.rows, 'row')} moved back out of the archive (ledger {operation})",
            "the workers' next publication and sweep finish it",
        )
        failpoints.reach("restore_committed")
        try:  # the lock also goes with the session
            ledger.end(catalog, operation)
            if no_wait:  # files never published go now; the others after their removal
                for table in tables:  # from the Delta log (the publications queued below)
                    ledger.reap_now(catalog, storage, table)
        except Exception as exc:  # the rows have moved back: the rest, a sweep does
            log.warning("restore committed; retired files left for the sweep: %s", exc)
    return done


def _request(selection: FileSelection, skip_conflicts: bool) -> dict[str, str | None]:
    """What the ledger records of the restore asked for."""
    return {
        "job": str(selection.job_id) if selection.job_id else None,
        # as archiver records tables (the erase's and purge's requests name it so too)
        "table": str(TableName.parse(selection.table)) if selection.table else None,
        "from": selection.cutoff_from,
        "to": selection.cutoff_to,
        "on_conflict": "skip" if skip_conflicts else "refuse",
    }
