"""`archiver compact` and the compaction job: a table's small chunks merged
(archiver.lifecycle.compact says which, archiver.lifecycle.merge how), a group at a time,
each group its own ledger operation and commit, then the Delta publication that shows
readers the merged files (one commit, dataChange false).

It never makes another command fail. A command that takes files of the table out of
the archive or moves them (restore, erase, purge, tier, rehydrate, protect) holds the
table (selection.hold_tables) for its duration; a merge commits only where none does
(ledger's `table_merge`, in its commit's transaction), else it yields: its group is
abandoned (what it uploaded deleted) and the run ends, to go on at the workers' next
compaction. A command asking for the table while a merge commits waits for that commit,
milliseconds. Archive jobs add files and never conflict."""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from archiver import db, ledger
from archiver.bulk import BulkConnection, fetch_in_transaction
from archiver.config import ConfigFile, Settings
from archiver.context import Context
from archiver.errors import ArchiverError, InputError
from archiver.ident import TableName
from archiver.lifecycle.compact import PERIODS, Chunk, Plan, chunks_of, plan
from archiver.model import CatalogFile
from archiver.operations.publish import make_visible
from archiver.outcome import Report
from archiver.store import archive_files
from archiver.text import counted

__all__ = ["Compacted", "Options", "Plan", "compact_table", "options_for", "resolve"]

log = logging.getLogger(__name__)


class Yielded(ArchiverError):
    """A command holds the table: the merge in hand is abandoned, the run ends."""


@dataclass(frozen=True)
class Options:
    """How a table is compacted: into files of `target` bytes, each within one `period`
    (month, year, none); `budget`: bytes of input one run merges at most (0: all)."""

    target: int
    period: str
    budget: int = 0


def options_for(
    settings: Settings,
    config: ConfigFile | None,
    table: str,
    *,
    target: int | None = None,
    period: str | None = None,
    budget: int = 0,
    asked: bool = False,
) -> Options | None:
    """The options of `table` (schema.table): `target` and `period` as given (the
    CLI's), else its policy's keys, else the settings'; None when its policy says
    `compact = false`, unless compaction was `asked` for (`archiver compact`). A policy
    naming the table with its schema is its own; else one naming it bare (the
    search_path's table, which this cannot ask: a bare name is taken as any schema's)."""
    from archiver.policy import parse_policies

    policies = parse_policies(config.policies) if config is not None else []
    named = TableName.stored(table)
    mine = next((p for p in policies if p.table == named), None) or next(
        (p for p in policies if p.table.schema is None and p.table.name == named.name), None
    )
    if mine is not None and not mine.compact and not asked:
        return None
    target = target or (mine.compact_target if mine else None) or settings.compact_target
    period = period or (mine.compact_period if mine else None) or settings.compact_period
    if period == "auto":
        period = "month" if mine is not None and mine.retain is not None else "none"
    if period not in PERIODS:
        raise InputError(f"compact: period {period!r}: expected one of {', '.join(PERIODS)}")
    return Options(target, period, budget)


@dataclass
class Compacted:
    """What a compaction of a table did (or, in a dry run, would do)."""

    table: str
    plan: Plan
    merged: list[int] = field(default_factory=list)  # ledger operations committed
    files_in: int = 0
    files_out: int = 0
    bytes_in: int = 0
    yielded: str | None = None
    apart: int = 0  # groups left: their files' columns were archived differently


async def resolve(ctx: Context, table: str) -> str:
    """`table` as the catalog names it (schema.table); one line if none or several."""

    async with ctx.catalog() as conn:
        named = await archive_files.catalogued_tables(conn, table)
    if len(named) > 1:
        raise InputError(f"compact: {table!r} is ambiguous ({', '.join(named)}): name the schema")
    if not named:
        raise InputError(f"compact: no archived files of table {table!r}")
    return named[0]


async def compact_table(
    ctx: Context,
    table: str,
    options: Options,
    *,
    dry_run: bool = False,
    report: Report = lambda line: None,
    publish: bool = True,
) -> Compacted:
    """Compact `table` (schema.table, or a bare name one schema has): its plan, then its
    groups, each committed on its own, until the budget is spent or a command holds the
    table; then (`publish`) its Delta tables published, so readers see the merge when
    this returns."""
    name = await resolve(ctx, table)
    done = await ctx.in_thread(
        ctx.settings.database_url,
        lambda conn: _compact(ctx, conn, name, options, dry_run, report),
    )
    if done.merged and publish:
        tables = {name} | {f.source_table for g in done.plan.groups for c in g for f in c.children}
        await make_visible(ctx, tables, no_wait=False, report=report)
    return done


def _compact(
    ctx: Context, conn: BulkConnection, table: str, options: Options, dry_run: bool, report: Report
) -> Compacted:
    storage, publishing = ctx.storage(), ctx.settings.delta
    here = str(storage.location)
    rows = archive_files.compactable(conn, here, table)
    files = [CatalogFile.from_row(r) for r in rows]
    logged = {int(r["id"]) for r in rows if r["in_log"]}
    chunks = chunks_of(table, files)
    if files and not chunks:
        raise InputError(
            f"compact: {table} is archived with its parents (its files have no cutoff "
            "column): compact the table they were archived with; its files go with theirs"
        )
    now = dt.datetime.now(dt.UTC)
    layout = plan(
        chunks, logged, target=options.target, period=options.period, now=now, in_log=publishing
    )
    done = Compacted(table, layout)
    if dry_run:
        return done
    for group in layout.groups:
        if options.budget and done.bytes_in >= options.budget:
            break
        try:
            _merge_group(ctx, conn, table, group, done, report)
        except Yielded as exc:
            done.yielded = str(exc)
            report(f"{table}: {exc}")
            break
        # a failure from here on leaves the merges so far standing, the rest undone
        ctx.committed(
            f"{counted(len(done.merged), 'merge')} committed (ledger "
            f"{', '.join(map(str, done.merged))})",
            "the workers' next compaction merges the rest",
            partial=True,
        )
    if done.merged:
        ctx.committed(
            f"{counted(len(done.merged), 'merge')} committed",
            "the workers' next publication shows readers the merged files",
        )
    return done


def _merge_group(
    ctx: Context,
    conn: BulkConnection,
    table: str,
    group: list[Chunk],
    done: Compacted,
    report: Report,
) -> None:
    """One group merged as one ledger operation ('compact'): the children's files, then
    the roots' into one, committed together (or yielded, or left apart)."""
    from archiver.lifecycle.merge import Apart, fetch, merge

    storage = ctx.storage()
    here = str(storage.location)
    tables = sorted({f.source_table for chunk in group for f in chunk.files})

    def free() -> None:  # in the commit's transaction: no command holds any of them
        for t in tables:
            if not fetch_in_transaction(conn, db.query("table_merge"), (here, t))[0][0]:
                raise Yielded(f"yielded to a command on {t}; the next compaction goes on")

    with tempfile.TemporaryDirectory() as tmp:
        try:
            children, roots = fetch(storage, group, Path(tmp))
        except Apart as exc:
            done.apart += 1
            report(f"{table}: a group left as it is: {exc}")
            return
        free()  # before the work too: a command that holds the table now wins at once
        conn.rollback()
        parts = [*children, *roots]
        inputs = [f for part in parts for f in part.files]  # a root alone of its kind: left

        def write(operation: int) -> ledger.TakenOut:
            guard = ledger.guard(conn, operation)
            written = [
                merge(conn, storage, part_inputs, operation, part, Path(tmp) / f"out-{part}", guard)
                for part, part_inputs in enumerate(parts)
            ]
            detail = {
                t: {"merged": sum(f.source_table == t for f in inputs),
                    "into": sum(w.source_table == t for w in written)}
                for t in tables
            }  # fmt: skip
            rows = sum(f.row_count for f in inputs)
            return ledger.TakenOut([f.id for f in inputs], written, rows, detail)

        request = {"table": table, "files": len(inputs)}
        try:
            operation, taken = ledger.take_out(ctx, conn, "compact", tables, request, write, free)
        except ledger.FilesGone:  # a command took some out while this merged: it wins
            raise Yielded(
                "some of its files left the archive meanwhile (a restore, erase or purge); "
                "the next compaction goes on"
            ) from None
    done.merged.append(operation)
    done.files_in += len(inputs)
    done.files_out += len(taken.written)
    done.bytes_in += sum(f.byte_size for f in inputs)
    chunks = sum(f.source_table == table for f in inputs)
    report(
        f"{table}: {chunks} chunks ({len(inputs)} files, {taken.rows:,} rows) merged "
        f"into {len(taken.written)} (ledger {operation})"
    )
