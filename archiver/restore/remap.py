"""An archived file's columns onto its table as the table is today: what the file's
metadata says of them, and how each lands in an INSERT (restore)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import adbc_driver_manager

from archiver.bulk import BulkCursor
from archiver.errors import InputError, first_line
from archiver.ident import quote_ident
from archiver.parquet import read_metadata
from archiver.pgtypes import sql as pgtypes


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


def execute(cur: BulkCursor, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if params:
        cur.execute(sql, params)
    else:
        cur.execute(sql)
    if cur.description is None:  # no result set (DDL)
        return []
    rows: list[tuple[Any, ...]] = cur.fetchall()
    return rows


def check_types(cur: BulkCursor, columns: ArchivedColumns) -> None:
    """Type names come from a file: each must parse as one type name (no SQL)."""
    for name, type_sql in columns.types.items():
        try:
            ok = execute(cur, "SELECT to_regtype($1) IS NOT NULL", (type_sql,))[0][0]
        except Exception:
            ok = False
        if not ok:
            raise InputError(f"column {name!r}: archived type {type_sql!r} does not exist here")


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


def columns_today(cur: BulkCursor, target: str) -> dict[str, tuple[str, bool]]:
    """`target`'s columns as it is today: name -> (type, generated), in table order."""
    return {str(n): (str(t), bool(g)) for n, t, g in execute(cur, _TARGET_COLUMNS, (target,))}


def map_columns(
    cur: BulkCursor, target: str, archived: ArchivedColumns, staged: set[str], ignore_dropped: bool
) -> ColumnMap:
    today = columns_today(cur, target)
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
    if dropped and not ignore_dropped:
        raise InputError(
            f"archived columns {', '.join(dropped)} no longer exist in {target}; nothing "
            "restored (--ignore-dropped-columns restores the other columns)"
        )
    added = tuple(n for n, (_, g) in today.items() if n not in archived.types and not g)
    return ColumnMap(values, added, tuple(dropped), tuple(generated), tuple(retyped))


def check_casts(
    cur: BulkCursor, columns: ColumnMap, stage: str, where: str, params: tuple[Any, ...]
) -> None:
    """Assign each retyped column's values to today's type on its own, so a value that
    does not fit names its column. Any failure aborts the one restore transaction."""
    check = quote_ident("archiver_restore_cast")
    for name, old, new in columns.retyped:
        try:
            execute(cur, f"CREATE TEMPORARY TABLE {check} (v {new})")
            execute(
                cur,
                f"INSERT INTO {check} SELECT {columns.values[name]} FROM {stage} WHERE {where}",
                params,
            )
            execute(cur, f"DROP TABLE {check}")
        except adbc_driver_manager.Error as exc:
            raise InputError(
                f"column {name!r}: an archived {old} value does not fit today's type {new} "
                f"({first_line(exc)}); nothing restored"
            ) from None
