"""Archived rows back into PostgreSQL.

Restore is ONE transaction over all its files: each file is downloaded, bulk-loaded
with COPY BINARY (ADBC ingest) into a temporary staging table, and inserted into the
target with casts to the exact archived types (pgtypes.restore_expression) -- or, a whole
file whose every column COPY writes as archived, by one COPY straight into the target
(archiver.restore.direct). Any failure -- a conflict, a cast, a lost connection -- rolls
everything back; a dry run is the same work, rolled back at the end.

Into the archived table, restore moves rows back (archiver.ledger): the same
transaction retires each file whose rows all went back and catalogues, in place of
each file that keeps some (rows outside the range, or skipped as conflicts), its
rewrite without the restored ones. `--into` another table and `--keep-archive` copy.
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import adbc_driver_manager
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from archiver import driver_check, failpoints, ledger
from archiver.bulk import BulkConnection, BulkCursor
from archiver.bulk_parameters import batch
from archiver.db import query
from archiver.errors import InputError, RestoreFailed, first_line
from archiver.files import names
from archiver.files.rewrite import key_ends, rewrite
from archiver.files.stats import in_arrow_order
from archiver.ident import quote_ident
from archiver.model import ArchivedFile, CatalogFile
from archiver.outcome import Report
from archiver.parquet import rows_at
from archiver.pgtypes.arrow import staging_table
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.restore.direct import copy_in, straight_in
from archiver.restore.remap import (
    ArchivedColumns,
    ColumnMap,
    check_casts,
    check_types,
    execute,
    map_columns,
)
from archiver.restore.rows import in_range_sql, maybe_in_range
from archiver.restore.target import parents_first_today, recreate_partition, target_of
from archiver.source.guardrails import transaction_id
from archiver.source.references import ForeignKey
from archiver.storage.seam import Storage

log = logging.getLogger(__name__)

STAGE = "archiver_restore_stage"
ROW = "__archiver_row"  # a staged row's position in its file
UNIQUE_VIOLATION = "23505"


@dataclass(frozen=True)
class RestorePlan:
    """Which catalogued files to restore, where, and how."""

    files: list[CatalogFile]
    into: str | None  # table name; None: the archived table
    skip_conflicts: bool
    cutoff_from: str | None  # ISO 8601, inclusive
    cutoff_to: str | None  # ISO 8601, exclusive
    dry_run: bool
    ignore_dropped_columns: bool = False
    # Rows go back: out of the archive in the same transaction (archiver.ledger: operation
    # `operation`, None in a dry run; its files kept `keep` s). False: --into, --keep-archive.
    moves_back: bool = False
    operation: int | None = None
    keep: float = 0.0


@dataclass
class Restored:
    """What a restore did (or, in a dry run, would do)."""

    rows: int = 0
    retired: list[int] = field(default_factory=list)  # files whose rows all went back
    written: list[ArchivedFile] = field(default_factory=list)  # rewrites of the others
    per_table: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, table: str, key: str, n: int = 1) -> None:
        counts = self.per_table.setdefault(table, {"rows": 0, "retired": 0, "rewritten": 0})
        counts[key] += n


@dataclass(frozen=True)
class FileRestore:
    """What restoring one file did: rows inserted, how its columns were matched, and in
    a move back the positions of the rows it keeps (None: a copy) with, where Arrow
    does not order its key as PostgreSQL does, their smallest and largest key."""

    rows: int
    mapped: ColumnMap
    kept: pa.Array | None = None  # int64 positions, ascending
    ordered_keys: tuple[list[Any], list[Any]] | None = None
    straight: bool = False  # by one COPY into the table (archiver.restore.direct)


def _restore_file(
    cur: BulkCursor,
    file: pq.ParquetFile,
    name: str,
    target: str,
    plan: RestorePlan,
    columns: ArchivedColumns,
    parents: list[ForeignKey],
) -> FileRestore:
    """Stage one file (read from `name` on storage) and insert its rows (in range) into
    target. Only the rows that may be in range are staged (found in Arrow, a day's
    margin either side; PostgreSQL decides exactly), so restoring a day out of a file
    of a million rows stages about a day's rows. A whole file whose every column COPY
    takes as it is goes straight in instead, read as COPY takes it."""
    # the staged table has the file's columns (and ROW): matched once, for either path
    names_in_file = set(file.schema_arrow.names)
    mapped = map_columns(cur, target, columns, names_in_file, plan.ignore_dropped_columns)
    if not (plan.cutoff_from or plan.cutoff_to or plan.skip_conflicts):
        straight = straight_in(cur, file, target, columns.types, mapped)
        if straight is not None:  # every row goes in, by COPY alone (archiver.restore.direct)
            with _conflicts(name, target, plan):
                inserted = copy_in(cur, target, file, straight)
            kept = pa.array([], pa.int64()) if plan.moves_back else None
            return FileRestore(inserted, mapped, kept, straight=True)
    total = file.metadata.num_rows
    cutoff = [c for c in (columns.cutoff, columns.cutoff + PG_TEXT_SUFFIX) if c in names_in_file]
    probe = file.read(columns=cutoff) if cutoff else None  # the cutoff alone, not the file
    positions = None
    if probe is not None:
        positions = maybe_in_range(probe, columns.cutoff, plan.cutoff_from, plan.cutoff_to)
    rows_of = pa.array(range(total), pa.int64()) if positions is None else positions
    staged = _stage(cur, file, rows_of)
    values = mapped.values
    where, params = in_range_sql(plan.cutoff_from, plan.cutoff_to, columns, mapped, parents)
    stage = f"{quote_ident(STAGE)} s"
    check_casts(cur, mapped, stage, where, params)
    names_ = ", ".join(quote_ident(n) for n in values)
    exprs = ", ".join(values.values())
    conflict = " ON CONFLICT DO NOTHING" if plan.skip_conflicts else ""
    insert = (
        f"INSERT INTO {target} ({names_}) OVERRIDING SYSTEM VALUE "
        f"SELECT {exprs} FROM {stage} WHERE {where}{conflict}"
    )
    # Without --on-conflict skip, every staged row in range goes in or a key already in
    # the table fails the INSERT (and the restore's transaction): no statement reads the
    # staged rows just to look for conflicts first (a second pass). Without a range
    # too, every staged row went in when as many did.
    every_row = not plan.skip_conflicts and where == "true"
    returning = plan.moves_back and not every_row
    with _conflicts(name, target, plan):
        inserted = _insert(cur, insert, params, columns.key, values, returning)
    if not plan.moves_back:
        execute(cur, f"DROP TABLE {quote_ident(STAGE)}")
        assert isinstance(inserted, int)
        return FileRestore(inserted, mapped)
    # A move back: the rows the file keeps are those not inserted (not staged, outside
    # the range, skipped as a conflict or by a trigger).
    if isinstance(inserted, int):
        if inserted == staged:
            inserted = rows_of  # every staged row went in
        else:  # a trigger skipped some: the inserted are those whose key is there now
            in_target = " AND ".join(f"t.{quote_ident(k)} = {values[k]}" for k in columns.key)
            cur.execute(
                f"SELECT s.{quote_ident(ROW)} FROM {stage} "
                f"WHERE EXISTS (SELECT FROM {target} t WHERE {in_target})"
            )
            inserted = cur.fetch_arrow_table().column(0).combine_chunks()
    kept_mask = pc.invert(pc.is_in(pa.array(range(total), pa.int64()), value_set=inserted))
    kept = pc.indices_nonzero(kept_mask).cast(pa.int64())
    execute(cur, f"DROP TABLE {quote_ident(STAGE)}")
    ordered = None
    schema = file.schema_arrow
    if 0 < len(kept) < total and not in_arrow_order([schema.field(k).type for k in columns.key]):
        # each key column as restored, under its collation in the table (the archive's
        # order); a key's value may read its PostgreSQL-only companion (key__pg_text)
        collations = dict(execute(cur, query("key_collations"), (target,)))
        used = [
            n for n in schema.names if any(n == k or n.startswith(k + "__") for k in columns.key)
        ]
        ends = [(values[k], collations.get(k)) for k in columns.key]
        ordered = key_ends(cur, file.read(columns=used).take(kept), ends, STAGE)
    return FileRestore(len(inserted), mapped, kept, ordered)


def _stage(cur: BulkCursor, file: pq.ParquetFile, positions: pa.Array) -> int:
    """The file's rows at `positions` into the staging table (created here, with the
    file's columns and ROW, their position), a row group at a time: how many."""
    staged = 0
    for piece, rows in rows_at(file, positions):
        table = staging_table(piece).append_column(ROW, rows)
        cur.adbc_ingest(STAGE, table, mode="append" if staged else "create", temporary=True)
        staged += piece.num_rows
    if not staged:  # no row may be in range: the table, empty, for the statements after
        empty = staging_table(file.schema_arrow.empty_table()).append_column(
            ROW, pa.array([], pa.int64())
        )
        cur.adbc_ingest(STAGE, empty, mode="create", temporary=True)
    return staged


@contextlib.contextmanager
def _conflicts(name: str, target: str, plan: RestorePlan) -> Iterator[None]:
    """A key already in the table, in one line naming the constraint."""
    try:
        yield
    except adbc_driver_manager.Error as exc:
        if plan.skip_conflicts or getattr(exc, "sqlstate", None) != UNIQUE_VIOLATION:
            raise
        constraint = re.search(r'unique constraint "([^"]+)"', str(exc))
        raise InputError(
            f"archived rows of {name} have keys already in {target}"
            f"{f' (constraint {constraint[1]})' if constraint else ''}; nothing restored "
            "(--on-conflict skip restores the others)"
        ) from None


def _insert(
    cur: BulkCursor,
    insert: str,
    params: tuple[str, ...],
    key: list[str],
    values: dict[str, str],
    returning: bool,
) -> int | pa.Array:
    """Run the restore's INSERT: how many rows went in or, `returning`, the staged
    positions of those rows, found by key among what the INSERT returned: a hash join,
    linear in the rows staged (`= ANY (array)` of the rows was quadratic: twenty minutes
    for a month of 136k- and 545k-row files), fetched as Arrow, never row by row."""
    if not returning:  # executemany counts: execute's rowcount is -1 once parameters are bound
        cur.executemany(insert, batch(params) if params else None)
        return int(cur.rowcount)
    keys = [quote_ident(k) for k in key]
    inserted_row = " AND ".join(f"i.{k} = {values[c]}" for k, c in zip(keys, key, strict=True))
    cur.execute(
        f"WITH ins AS ({insert} RETURNING {', '.join(keys)}) "
        f"SELECT s.{quote_ident(ROW)} FROM {quote_ident(STAGE)} s "
        f"WHERE EXISTS (SELECT FROM ins i WHERE {inserted_row})",
        params,
    )
    positions: pa.Array = cur.fetch_arrow_table().column(0).combine_chunks()
    return positions


def restore(
    conn: BulkConnection,
    storage: Storage,
    plan: RestorePlan,
    workdir: Path,
    report: Report,
    catalog: BulkConnection | None = None,
) -> Restored:
    """Restore the plan's files in one transaction: what it did (or, in a dry run,
    would do). A move back also takes the rows out of the archive: in that transaction,
    or, with the catalog on `catalog` (another database), through the ledger's intent
    (archiver.ledger.record_intent, then settle once the source committed)."""
    tables = list(dict.fromkeys(f.source_table for f in plan.files))
    if len(tables) > 1 and plan.into is not None:
        raise InputError(f"files of several tables match ({', '.join(tables)}); --into takes one")
    changed = driver_check.driver_round_trip(conn)
    if changed:
        raise RestoreFailed(
            "restore refused, nothing changed: the ADBC driver does not write back what it "
            f"reads ({'; '.join(changed)}); see `archiver doctor`"
        )
    ordered, keys = parents_first_today(conn, tables)
    order = {t: i for i, t in enumerate(ordered)}
    # a stable sort: within a table the catalog's order (oldest file first) stands
    files = sorted(plan.files, key=lambda f: order[f.source_table])
    done = Restored()
    targets: dict[str, str] = {}
    target = ""
    said = ""  # the column differences last reported
    intent = False  # recorded in the other catalog database: the sweep may settle it
    verb = "would be restored" if plan.dry_run else "restored"
    try:
        if (
            plan.moves_back
            and catalog is None
            and not ledger.lock_files(conn, [f.id for f in files])
        ):
            raise InputError(
                "some of these files left the archive meanwhile (another restore?); "
                "nothing restored, run it again"
            )
        with conn.cursor() as cur, tempfile.TemporaryDirectory(dir=workdir) as tmp:
            for i, f in enumerate(files, 1):
                local = Path(tmp) / "restore.parquet"
                storage.download(f.path, local)
                columns = ArchivedColumns.of(local)
                check_types(cur, columns)  # files may come from different schema versions
                if f.source_table not in targets:
                    targets[f.source_table] = target_of(cur, plan.into, f.source_table, columns)
                target = targets[f.source_table]
                if columns.partition and plan.into is None:
                    recreate_partition(cur, target, *columns.partition, columns.key)
                parents = [k for k in keys if k.child == f.source_table]
                with pq.ParquetFile(local) as file:
                    one = _restore_file(cur, file, f.path, target, plan, columns, parents)
                    left = _take_out(storage, f, file, one, plan, Path(tmp), done, catalog or conn)
                done.rows += one.rows
                done.count(f.source_table, "rows", one.rows)
                if one.mapped.differences() != said:
                    said = one.mapped.differences()
                    report(f"{f.path}: columns: {said or 'as archived'}")
                report(
                    f"{f.path}: {one.rows} of {f.row_count} rows {verb}{left}"
                    f"{' by COPY straight in' if one.straight else ''} ({i}/{len(files)} files)"
                )
        if plan.dry_run:
            conn.rollback()
            return done
        if plan.moves_back:
            assert plan.operation is not None
            failpoints.reach("restore_before_commit")
            changes = (plan.operation, done.retired, done.written, done.rows, done.per_table)
            if catalog is None:
                ledger.commit_changes(conn, *changes, keep=plan.keep)
            else:
                xid = transaction_id(conn)  # the open one's: fetch_and_rollback ends it
                ledger.record_intent(catalog, changes[0], xid, *changes[1:])
                intent = True
                failpoints.reach("restore_intent_recorded")
        conn.commit()
    except adbc_driver_manager.Error as exc:
        with contextlib.suppress(adbc_driver_manager.Error):
            conn.rollback()
        if intent:  # a COMMIT that errored may have committed: the source will say
            raise ledger.Unsettled(
                f"the source's COMMIT failed ({first_line(exc)}); whether the rows went in "
                "is settled by the next sweep of the ledger"
            ) from exc
        raise RestoreFailed(
            f"restore into {target or tables[0]} failed, nothing changed: {first_line(exc)}"
        ) from exc
    except BaseException:
        conn.rollback()
        raise
    if plan.moves_back and catalog is not None:
        assert plan.operation is not None
        failpoints.reach("restore_source_committed")
        try:
            ledger.settle(catalog, plan.operation, plan.keep)
        except Exception as exc:  # the rows are back: the sweep finishes the catalog
            raise ledger.Unsettled(
                f"the rows are back, but their files' leaving the archive failed "
                f"({first_line(exc)}): the next sweep of the ledger finishes it"
            ) from exc
    return done


def _take_out(
    storage: Storage,
    f: CatalogFile,
    file: pq.ParquetFile,
    one: FileRestore,
    plan: RestorePlan,
    tmp: Path,
    done: Restored,
    holder: BulkConnection,
) -> str:
    """A move back: the file retired when all its rows went back, rewritten without them
    when some did (not in a dry run; `holder` holds the operation's lock). Says what
    happened to the file."""
    rows = file.metadata.num_rows
    if one.kept is None or 0 < rows == len(one.kept):
        return ""  # a copy, or every row kept (none in range); an empty partition's file goes
    done.retired.append(f.id)
    done.count(f.source_table, "retired")
    if len(one.kept) == 0:
        return ", the file leaves the archive"
    done.count(f.source_table, "rewritten")
    if plan.operation is None:  # a dry run
        return f", the file would be rewritten with the other {len(one.kept)}"
    name = names.rewritten_name(f.path, plan.operation)
    guard = ledger.guard(holder, plan.operation)
    written = rewrite(
        storage,
        f,
        file,
        one.kept,
        name,
        tmp / "rewrite.parquet",
        one.ordered_keys,
        guard,
        plan.operation,
    )
    done.written.append(written)
    return f", the other {len(one.kept)} kept in {name}"
