"""Archived rows back into PostgreSQL, and the files checked against the catalog.

Restore is ONE transaction over all its files: each file is downloaded, bulk-loaded
with COPY BINARY (ADBC ingest) into a temporary staging table, and inserted into the
target with casts to the exact archived types (pgtypes.restore_expression). Any failure
-- a conflict, a cast, a lost connection -- rolls everything back; a dry run is the same
work, rolled back at the end.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import adbc_driver_manager
import pyarrow.parquet as pq

from archiver.bulk import BulkConnection, BulkCursor, driver_round_trip, fetch_all
from archiver.errors import InputError, RestoreFailed, first_line
from archiver.ident import TableName, quote_ident
from archiver.model import CatalogFile
from archiver.parquet import read_metadata
from archiver.pgtypes import sql as pgtypes
from archiver.pgtypes.arrow import staging_table
from archiver.source.references import ForeignKey, foreign_keys_to, parents_first
from archiver.storage.seam import Storage

log = logging.getLogger(__name__)

STAGE = "archiver_restore_stage"
Report = Callable[[str], None]


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


@dataclass(frozen=True)
class ArchivedColumns:
    """What a file's metadata says of its columns."""

    types: dict[str, str]  # name -> exact PostgreSQL type, in table order
    key: list[str]
    cutoff: str
    partition: tuple[str, str] | None = None  # a partition taken whole: (name, bound)

    @classmethod
    def of(cls, path: Path) -> ArchivedColumns:
        _, meta = read_metadata(path)
        try:
            columns = json.loads(meta["columns"])
            return cls(
                {c["name"]: c["type"] for c in columns},
                list(json.loads(meta["key_columns"])),
                meta["cutoff_column"],
                (meta["partition"], meta["partition_bound"]) if "partition" in meta else None,
            )
        except (KeyError, ValueError, TypeError):
            raise InputError(f"{path.name} lacks archiver's column metadata") from None


def _execute(cur: BulkCursor, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if params:
        cur.execute(sql, params)
    else:
        cur.execute(sql)
    if cur.description is None:  # no result set (DDL)
        return []
    rows: list[tuple[Any, ...]] = cur.fetchall()
    return rows


def _check_types(cur: BulkCursor, columns: ArchivedColumns) -> None:
    """Type names come from a file: each must parse as one type name (no SQL)."""
    for name, type_sql in columns.types.items():
        try:
            ok = _execute(cur, "SELECT to_regtype($1) IS NOT NULL", (type_sql,))[0][0]
        except Exception:
            ok = False
        if not ok:
            raise InputError(f"column {name!r}: archived type {type_sql!r} does not exist here")


def _target(cur: BulkCursor, plan: RestorePlan, source_table: str, columns: ArchivedColumns) -> str:
    """The quoted target table; --into is created from the archived types when missing."""
    name = TableName.parse(plan.into or source_table)
    quoted = (
        f"{quote_ident(name.schema)}.{quote_ident(name.name)}"
        if name.schema
        else quote_ident(name.name)
    )
    if _execute(cur, "SELECT to_regclass($1) IS NOT NULL", (quoted,))[0][0]:
        return quoted
    if plan.into is None:
        raise InputError(f"table {source_table} does not exist; restore --into a new table")
    defs = [f"{quote_ident(n)} {t}" for n, t in columns.types.items()]
    defs.append(f"PRIMARY KEY ({', '.join(quote_ident(k) for k in columns.key)})")
    _execute(cur, f"CREATE TABLE {quoted} ({', '.join(defs)})")
    return quoted


_TARGET_COLUMNS = """
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attgenerated <> ''
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


@dataclass(frozen=True)
class ColumnMap:
    """How one file's columns land in the table as it is today, matched by name."""

    values: dict[str, str]  # column to insert -> SQL value from the staged row
    added: tuple[str, ...]  # in today's table only: they take their defaults
    dropped: tuple[str, ...]  # in the archive only: refused, or left out when asked
    generated: tuple[str, ...]  # generated today: PostgreSQL computes them again
    # (column, archived type, today's type): assigned as an INSERT assigns, so a value that
    # does not fit is an error (an explicit ::varchar(5) would truncate it silently)
    retyped: tuple[tuple[str, str, str], ...]

    def differences(self) -> str:
        parts = [f"added {c} (its default)" for c in self.added]
        parts += [f"dropped {c} (left out)" for c in self.dropped]
        parts += [f"generated {c} (computed again)" for c in self.generated]
        parts += [f"{c}: {old} -> {new} (cast)" for c, old, new in self.retyped]
        return "; ".join(parts)


def map_columns(
    cur: BulkCursor, target: str, archived: ArchivedColumns, staged: set[str], plan: RestorePlan
) -> ColumnMap:
    today = {str(n): (str(t), bool(g)) for n, t, g in _execute(cur, _TARGET_COLUMNS, (target,))}
    values: dict[str, str] = {}
    dropped, generated, retyped = [], [], []
    for name, type_sql in archived.types.items():
        if name not in today:
            dropped.append(name)
            continue
        current, is_generated = today[name]
        if is_generated:
            generated.append(name)
            continue
        value = pgtypes.restore_expression(
            name, type_sql, name + pgtypes.PG_TEXT_SUFFIX in staged, "s"
        )
        if current != type_sql:  # INSERT assigns it: never an explicit cast, which truncates
            retyped.append((name, type_sql, current))
        values[name] = value
    lost = [k for k in (*archived.key, archived.cutoff) if k and k not in values]
    if lost:
        raise InputError(
            f"{target} no longer has the archived key or cutoff column {', '.join(lost)} "
            "as an ordinary column; nothing restored"
        )
    if dropped and not plan.ignore_dropped_columns:
        raise InputError(
            f"archived columns {', '.join(dropped)} no longer exist in {target}; nothing "
            "restored (--ignore-dropped-columns restores the other columns)"
        )
    added = tuple(n for n, (_, g) in today.items() if n not in archived.types and not g)
    return ColumnMap(values, added, tuple(dropped), tuple(generated), tuple(retyped))


def _check_casts(
    cur: BulkCursor, columns: ColumnMap, stage: str, where: str, params: tuple[Any, ...]
) -> None:
    """Assign each retyped column's values to today's type on its own, so a value that
    does not fit names its column. Any failure aborts the one restore transaction."""
    check = quote_ident("archiver_restore_cast")
    for name, old, new in columns.retyped:
        try:
            _execute(cur, f"CREATE TEMPORARY TABLE {check} (v {new})")
            _execute(
                cur,
                f"INSERT INTO {check} SELECT {columns.values[name]} FROM {stage} WHERE {where}",
                params,
            )
            _execute(cur, f"DROP TABLE {check}")
        except adbc_driver_manager.Error as exc:
            raise InputError(
                f"column {name!r}: an archived {old} value does not fit today's type {new} "
                f"({first_line(exc)}); nothing restored"
            ) from None


def _restore_file(
    cur: BulkCursor,
    local: Path,
    name: str,
    target: str,
    plan: RestorePlan,
    columns: ArchivedColumns,
    parents: list[ForeignKey],
) -> tuple[int, ColumnMap]:
    """Stage one file (downloaded to `local`; `name` on storage) and insert its rows (in
    range) into target: (rows inserted, how its columns were matched)."""
    data = staging_table(pq.read_table(local))
    cur.adbc_ingest(STAGE, data, mode="create", temporary=True)
    mapped = map_columns(cur, target, columns, set(data.column_names), plan)
    values = mapped.values
    if columns.cutoff:
        cutoff = values[columns.cutoff]
        where = (
            f"($1::text IS NULL OR {cutoff} >= $1::timestamptz) "
            f"AND ($2::text IS NULL OR {cutoff} < $2::timestamptz)"
        )
    else:  # a table archived with its parents' rows: in a range restore, the rows
        # whose parents are (back) in place, the others stay archived
        retyped = {name for name, _, _ in mapped.retyped}
        present = " AND ".join(f"({_references_present(k, values, retyped)})" for k in parents)
        where = f"(($1::text IS NULL AND $2::text IS NULL) OR ({present or 'false'}))"
    params = (plan.cutoff_from, plan.cutoff_to)
    stage = f"{quote_ident(STAGE)} s"
    _check_casts(cur, mapped, stage, where, params)
    if not plan.skip_conflicts:
        match = " AND ".join(f"t.{quote_ident(k)} = {values[k]}" for k in columns.key)
        taken = _execute(
            cur,
            f"SELECT count(*) FROM {stage} WHERE {where} "
            f"AND EXISTS (SELECT FROM {target} t WHERE {match})",
            params,
        )[0][0]
        if taken:
            raise InputError(
                f"{taken} archived rows of {name} have keys already in {target}; "
                "nothing restored (--on-conflict skip restores the others)"
            )
    names = ", ".join(quote_ident(n) for n in values)
    exprs = ", ".join(values.values())
    conflict = " ON CONFLICT DO NOTHING" if plan.skip_conflicts else ""
    inserted = _execute(
        cur,
        f"WITH ins AS (INSERT INTO {target} ({names}) OVERRIDING SYSTEM VALUE "
        f"SELECT {exprs} FROM {stage} WHERE {where}{conflict} RETURNING 1) "
        "SELECT count(*) FROM ins",
        params,
    )[0][0]
    _execute(cur, f"DROP TABLE {quote_ident(STAGE)}")
    return int(inserted), mapped


def restore(
    conn: BulkConnection, storage: Storage, plan: RestorePlan, workdir: Path, report: Report
) -> int:
    """Restore the plan's files in one transaction; returns the rows restored (or, in a
    dry run, that would be)."""
    tables = list(dict.fromkeys(f.source_table for f in plan.files))
    if len(tables) > 1 and plan.into is not None:
        raise InputError(f"files of several tables match ({', '.join(tables)}); --into takes one")
    changed = driver_round_trip(conn)
    if changed:
        raise RestoreFailed(
            "restore refused, nothing changed: the ADBC driver does not write back what it "
            f"reads ({'; '.join(changed)}); see `archiver doctor`"
        )
    ordered, keys = parents_first_today(conn, tables)
    order = {t: i for i, t in enumerate(ordered)}
    # a stable sort: within a table the catalog's order (oldest file first) stands
    files = sorted(plan.files, key=lambda f: order[f.source_table])
    total = 0
    targets: dict[str, str] = {}
    target = ""
    said = ""  # the column differences last reported
    try:
        with conn.cursor() as cur, tempfile.TemporaryDirectory(dir=workdir) as tmp:
            for i, f in enumerate(files, 1):
                local = Path(tmp) / "restore.parquet"
                storage.download(f.path, local)
                columns = ArchivedColumns.of(local)
                _check_types(cur, columns)  # files may come from different schema versions
                if f.source_table not in targets:
                    targets[f.source_table] = _target(cur, plan, f.source_table, columns)
                target = targets[f.source_table]
                if columns.partition and plan.into is None:
                    _recreate_partition(cur, target, *columns.partition)
                parents = [k for k in keys if k.child == f.source_table]
                rows, mapped = _restore_file(cur, local, f.path, target, plan, columns, parents)
                total += rows
                if mapped.differences() != said:
                    said = mapped.differences()
                    report(f"{f.path}: columns: {said or 'as archived'}")
                report(
                    f"{f.path}: {rows} of {f.row_count} rows "
                    f"{'would be ' if plan.dry_run else ''}restored ({i}/{len(files)} files)"
                )
        if plan.dry_run:
            conn.rollback()
        else:
            conn.commit()
    except adbc_driver_manager.Error as exc:
        conn.rollback()
        raise RestoreFailed(
            f"restore into {target or tables[0]} failed, nothing changed: {first_line(exc)}"
        ) from exc
    except BaseException:
        conn.rollback()
        raise
    return total


_BOUND = re.compile(r"FOR VALUES FROM \((?:'[^']*'|MINVALUE)\) TO \((?:'[^']*'|MAXVALUE)\)")


def _recreate_partition(cur: BulkCursor, parent: str, name: str, bound: str) -> None:
    """A partition archived whole and dropped comes back with its recorded bound (its
    indexes from the parent's) before its rows are inserted; an existing one is kept."""
    if not _BOUND.fullmatch(bound):  # from a file: only literals, never SQL
        raise InputError(f"partition {name}: unexpected bound {bound!r} in the file's metadata")
    partition = TableName.parse(name)
    quoted = f"{quote_ident(partition.schema or 'public')}.{quote_ident(partition.name)}"
    _execute(cur, f"CREATE TABLE IF NOT EXISTS {quoted} PARTITION OF {parent} {bound}")


def parents_first_today(
    conn: BulkConnection, tables: list[str]
) -> tuple[list[str], list[ForeignKey]]:
    """The tables of a restore, each after every table it references today (an
    aggregate's parents before its children), so foreign keys hold row by row; and the
    keys between them. Read (and rolled back) before the restore writes anything."""
    if len(tables) == 1:
        return tables, []
    keys = []
    for table in tables:
        found = fetch_all(conn, "SELECT to_regclass($1)::oid::bigint", (table,))
        if found and found[0][0] is not None:
            keys += [k for k in foreign_keys_to(conn, table, int(found[0][0])) if k.child in tables]
    return parents_first(tables[0], tables, keys), keys


def _references_present(key: ForeignKey, values: dict[str, str], retyped: set[str]) -> str:
    """SQL: the staged row's `key` references nothing (a NULL) or a row now in its parent,
    compared with the constraint's own equality, unless the column's type changed since
    it was archived (the operator is today's types')."""
    parent = TableName.parse(key.parent)
    archived = [values.get(c, "NULL") for c in key.columns]  # a column added since: NULL
    match = " AND ".join(
        f"p.{quote_ident(r)} {'=' if c in retyped else eq} {v}"
        for c, v, r, eq in zip(key.columns, archived, key.referenced, key.equals, strict=True)
    )
    nulls = " OR ".join(f"{v} IS NULL" for v in archived)
    return (
        f"{nulls} OR EXISTS (SELECT FROM {quote_ident(parent.schema or 'public')}."
        f"{quote_ident(parent.name)} p WHERE {match})"
    )
