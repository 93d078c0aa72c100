"""One file's rows into its target, in the restore's transaction (archiver.restore):
staged (COPY BINARY through ADBC ingest into a temporary table) and inserted with casts
to the archived types, or by one COPY straight in (archiver.restore.direct); in a move
back, which of its rows stay archived."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import adbc_driver_manager
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from archiver.bulk import BulkCursor
from archiver.bulk_parameters import batch
from archiver.db import query
from archiver.errors import InputError
from archiver.files.rewrite import key_ends
from archiver.files.stats import in_arrow_order
from archiver.ident import quote_ident
from archiver.parquet import rows_at
from archiver.pgtypes.arrow import staging_table
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.restore.direct import copy_in, straight_in
from archiver.restore.plan import RestorePlan
from archiver.restore.remap import (
    ArchivedColumns,
    ColumnMap,
    check_casts,
    columns_today,
    execute,
    map_columns,
)
from archiver.restore.rows import in_range_sql, maybe_in_range
from archiver.source.references import ForeignKey

STAGE = "archiver_restore_stage"
INSERTED = "archiver_restore_inserted"  # the keys an INSERT under a rule returned
USE_COPY = "adbc.postgresql.use_copy"
ROW = "__archiver_row"  # a staged row's position in its file
UNIQUE_VIOLATION = "23505"


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


def restore_file(
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
    rows_of = _maybe_in_range(file, columns, plan)
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
        inserted = _insert(cur, insert, params, columns.key, values, returning, target)
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
    ordered = _kept_key_ends(cur, file, target, columns, values, kept) if len(kept) else None
    return FileRestore(len(inserted), mapped, kept, ordered)


def _maybe_in_range(file: pq.ParquetFile, columns: ArchivedColumns, plan: RestorePlan) -> pa.Array:
    """The positions of the file's rows that may be in the plan's range, read from its
    cutoff column alone (every row's without one)."""
    names_in_file = set(file.schema_arrow.names)
    cutoff = [c for c in (columns.cutoff, columns.cutoff + PG_TEXT_SUFFIX) if c in names_in_file]
    if cutoff:
        probe = file.read(columns=cutoff)
        positions = maybe_in_range(probe, columns.cutoff, plan.cutoff_from, plan.cutoff_to)
        if positions is not None:
            return positions
    return pa.array(range(file.metadata.num_rows), pa.int64())


def _kept_key_ends(
    cur: BulkCursor,
    file: pq.ParquetFile,
    target: str,
    columns: ArchivedColumns,
    values: dict[str, str],
    kept: pa.Array,
) -> tuple[list[Any], list[Any]] | None:
    """The smallest and largest key the file's kept rows have where Arrow orders its key
    otherwise than PostgreSQL: each key column as restored, under its collation in the
    table (the archive's order); a key's value may read its PostgreSQL-only companion
    (key__pg_text). None where Arrow's order is PostgreSQL's, or every row is kept."""
    schema = file.schema_arrow
    if len(kept) == file.metadata.num_rows or in_arrow_order(
        [schema.field(k).type for k in columns.key]
    ):
        return None
    collations = dict(execute(cur, query("key_collations"), (target,)))
    used = [n for n in schema.names if any(n == k or n.startswith(k + "__") for k in columns.key)]
    ends = [(values[k], collations.get(k)) for k in columns.key]
    return key_ends(cur, file.read(columns=used).take(kept), ends, STAGE)


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
    target: str,
) -> int | pa.Array:
    """Run the restore's INSERT: how many rows went in or, `returning`, the staged
    positions of those rows, found by key among what the INSERT returned: a hash join,
    linear in the rows staged (`= ANY (array)` of the rows was quadratic: twenty minutes
    for a month of 136k- and 545k-row files), fetched as Arrow, never row by row."""
    if not returning:  # executemany counts: execute's rowcount is -1 once parameters are bound
        cur.executemany(insert, batch(params) if params else None)
        return int(cur.rowcount)
    keys = [quote_ident(k) for k in key]
    if execute(cur, query("insert_rules"), (target,))[0][0]:
        return _inserted_by_rule(cur, insert, params, key, values, target)
    inserted_row = " AND ".join(f"i.{k} = {values[c]}" for k, c in zip(keys, key, strict=True))
    cur.execute(
        f"WITH ins AS ({insert} RETURNING {', '.join(keys)}) "
        f"SELECT s.{quote_ident(ROW)} FROM {quote_ident(STAGE)} s "
        f"WHERE EXISTS (SELECT FROM ins i WHERE {inserted_row})",
        params,
    )
    positions: pa.Array = cur.fetch_arrow_table().column(0).combine_chunks()
    return positions


def _inserted_by_rule(
    cur: BulkCursor,
    insert: str,
    params: tuple[str, ...],
    key: list[str],
    values: dict[str, str],
    target: str,
) -> pa.Array:
    """`_insert`'s positions where the target has a DO ALSO rule ON INSERT, which
    PostgreSQL runs for neither a data-modifying WITH nor a COPY (ADBC's way of reading
    a result): the INSERT alone, its keys returned as text (no COPY), kept in a second
    temporary table, then found among the staged rows as the WITH form finds them: each
    key read back in today's type, compared with the staged value (a key retyped since,
    numeric(10,1) to numeric(10,2), prints otherwise but compares equal)."""
    keys = [quote_ident(k) for k in key]
    today = columns_today(cur, target)
    with contextlib.ExitStack() as plain:
        plain.callback(cur.adbc_statement.set_options, **{USE_COPY: "true"})
        cur.adbc_statement.set_options(**{USE_COPY: "false"})
        cur.execute(f"{insert} RETURNING {', '.join(f'{k}::text AS {k}' for k in keys)}", params)
        returned = cur.fetch_arrow_table()
    cur.adbc_ingest(INSERTED, returned, mode="create", temporary=True)
    same = " AND ".join(
        f"(i.{k})::{today[c][0]} = {values[c]}" for k, c in zip(keys, key, strict=True)
    )
    cur.execute(
        f"SELECT s.{quote_ident(ROW)} FROM {quote_ident(STAGE)} s "
        f"WHERE EXISTS (SELECT FROM {quote_ident(INSERTED)} i WHERE {same})"
    )
    positions: pa.Array = cur.fetch_arrow_table().column(0).combine_chunks()
    execute(cur, f"DROP TABLE {quote_ident(INSERTED)}")
    return positions
