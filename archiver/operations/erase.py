"""`archiver erase`: the archived rows matching a predicate, found in the files where
they are stored, checked against what protects them and against a running archive of the
table, then the ledger operation (archiver.lifecycle.erase) and the publications that
take the rewritten files' originals out of their Delta tables."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass

from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.errors import InputError, first_line
from archiver.ident import as_typed
from archiver.lifecycle.predicate import Predicate
from archiver.lifecycle.retention import protected
from archiver.model import CatalogFile
from archiver.operations.inspect import aggregate_children
from archiver.operations.publish import make_visible
from archiver.operations.selection import (
    FileSelection,
    as_stored,
    chunk_children,
    hold_tables,
    refuse_offline,
    stored_table_files,
    table_files,
)
from archiver.outcome import Report
from archiver.query import statement
from archiver.query.catalog import integer_columns
from archiver.query.engine import engine
from archiver.source.references import ForeignKey
from archiver.store import jobs


@dataclass(frozen=True)
class Erased:
    ledger: int | None  # None: a dry run
    rows: dict[str, int]  # per table
    files: dict[str, tuple[int, int]]  # per table: files holding erased rows, of all files


async def erase_rows(
    ctx: Context,
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
    of its aggregate's tables referencing them) from every file holding them; the tables
    held against compaction meanwhile (selection.hold_tables)."""
    from archiver.lifecycle import erase as eraser

    name, _ = await table_files(ctx, table, "erase")
    held = [name]
    if with_children:  # theirs too: a compaction of one of them retires their files
        held += (await aggregate_children(ctx, [name])).get(name, [])
    async with hold_tables(ctx, held):  # its files selected again: a merge may have committed
        name, every = await stored_table_files(ctx, name, "erase")
        integer_keys = await ctx.in_thread(
            ctx.settings.effective_source_url, lambda c: _integers(c, name)
        )
        # one file at least: the predicate is checked on it
        files = _may_match(every, where, integer_keys) or every[:1]
        per_table, keys = await _with_children(ctx, name, files, every, with_children)
        await _refuse_running(ctx, name)
        refuse_offline("erase", [f for fs in per_table.values() for f in fs])
        storage = ctx.storage()
        location = ctx.settings.storage_location()

        def find() -> tuple[eraser.ErasePlan, eraser.Found]:
            import duckdb

            with engine(ctx.settings, location) as con:
                try:
                    eraser.open_view(con, storage, files)
                    predicate = Predicate.check(con, where, eraser.VIEW, name)
                    plan = eraser.ErasePlan(name, predicate, per_table, keys, reason)
                    return plan, eraser.find(con, storage, plan)
                except duckdb.IOException as exc:  # a catalogued file not stored (the soak)
                    raise InputError(
                        f"erase refused, nothing erased: an archived file of {name} cannot be "
                        f"read ({first_line(exc)}); `archiver verify --table {as_typed(name)}` "
                        "checks them all"
                    ) from None

        plan, found = await asyncio.to_thread(find)
        counts = {t: (len(found.positions.get(t, {})), len(fs)) for t, fs in per_table.items()}
        rows = {t: found.rows(t) for t in per_table}
        holding = [f for t, fs in per_table.items() for f in fs if f.path in found.positions[t]]
        stored = await asyncio.to_thread(as_stored, storage, holding)
        why = protected(stored, dt.datetime.now(dt.UTC))
        if why:
            raise InputError(f"erase refused, nothing erased: files holding matching rows: {why}")
        if dry_run:
            for t, (holding_rows, of) in counts.items():
                report(f"{t}: {rows[t]} rows would be erased from {holding_rows} of {of} files")
            return Erased(None, rows, counts)
        ledger_id = await ctx.in_thread(
            ctx.settings.database_url, lambda conn: eraser.erase(ctx, conn, plan, found, report)
        )
        if found.total:
            tables = [t for t in per_table if found.positions.get(t)]
            await make_visible(ctx, tables, no_wait=no_wait, report=report)
        return Erased(ledger_id, rows, counts)


async def _with_children(
    ctx: Context,
    name: str,
    files: list[CatalogFile],
    every: list[CatalogFile],
    with_children: bool,
) -> tuple[dict[str, list[CatalogFile]], list[ForeignKey]]:
    """The files to read per table (`files` of `name`; with_children, every stored file
    of each table of its aggregate), and the aggregate's foreign keys."""
    from archiver.restore.target import parents_first_today

    per_table = {name: files}
    keys: list[ForeignKey] = []
    if with_children:
        children = (await aggregate_children(ctx, [name])).get(name, [])
        if not children:
            raise InputError(f"erase: --with-children: no table references {name} today")
        ordered, keys = await ctx.in_thread(
            ctx.settings.effective_source_url,
            lambda conn: parents_first_today(conn, [name, *children]),
        )
        here = str(ctx.settings.storage_location())
        for child in ordered[1:]:
            stored = await FileSelection(table=as_typed(child)).files(ctx, "committed")
            per_table[child] = [f for f in stored if f.storage_url == here]
    elif await chunk_children(ctx, every):
        raise InputError(
            f"erase: {name} was archived with the rows that reference it (--with-children): "
            "give --with-children, or those rows would stay archived without their parents"
        )
    return per_table, keys


async def _refuse_running(ctx: Context, name: str) -> None:
    async with ctx.catalog() as conn:
        running = await jobs.running_archive(conn, name)
    if running:
        raise InputError(
            f"erase: job {running} is archiving {name} now, and rows it moves after the "
            "erasure read the archive would escape it: wait for it to finish (or "
            f"`archiver pause --table {as_typed(name)}`), then erase"
        )


def _integers(conn: BulkConnection, table: str) -> set[str]:

    with conn.cursor() as cur:
        return {column for _, column in integer_columns(cur, [table])}


def _may_match(files: list[CatalogFile], where: str, integer_keys: set[str]) -> list[CatalogFile]:
    """The files whose catalogued key and cutoff ranges a predicate's constraints on
    them can meet (archiver.query.statement): the others hold no row it matches, and are not
    read (`customer_id = 42` constrains neither: every file is). A key's range only
    where the key is of an integer type in the source (`integer_keys`)."""

    refs = statement.references(f"SELECT 1 FROM archived WHERE {where}")
    if refs is None:  # not a predicate DuckDB's parse can be walked for: every file
        return files

    def instant(text: str | None) -> dt.datetime | None:
        return None if text is None else statement.as_instant(text, 0)

    def integer(key: list[str]) -> int | None:  # a key's first column: its ends' first
        return statement.as_integer(key[0], 0) if key else None

    return [
        f for f in files
        if statement.admits(refs, f.cutoff_column, instant(f.min_cutoff_value),
                            instant(f.max_cutoff_value), statement.as_instant)
        and (f.key_columns[0] not in integer_keys
             or statement.admits(refs, f.key_columns[0], integer(f.min_key),
                                 integer(f.max_key), statement.as_integer))
    ]  # fmt: skip
