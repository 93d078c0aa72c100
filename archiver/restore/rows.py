"""Which archived rows a restore's range takes: first in Arrow, the rows of a file that
may lie in the range (restore stages only those, so a day out of a file of a million
rows costs about a day's rows in the database), then in SQL over the staged rows,
exactly: by the cutoff column, or, for a table archived with its parents, by whether
each row's parents are (back) in place."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from archiver.arrow_values import scalar
from archiver.ident import TableName, quote_ident
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.restore.remap import ArchivedColumns, ColumnMap
from archiver.source.references import ForeignKey


def maybe_in_range(
    data: pa.Table, cutoff: str, lower: str | None, upper: str | None
) -> pa.Array | None:
    """The positions of the rows of `data` (an archived file as read) whose `cutoff`
    may lie in [lower, upper) (ISO 8601; None: unbounded): a superset
    (a day's margin either side, whatever the time zones; NULLs and PostgreSQL-only
    values kept). None: every row (no range, or a cutoff type Arrow cannot compare)."""
    unbounded = lower is None and upper is None
    if unbounded or not cutoff or cutoff not in data.column_names:
        return None
    column = data.column(cutoff)
    kind = column.type
    if not (pa.types.is_timestamp(kind) or pa.types.is_date(kind)):
        return None
    margin = timedelta(days=1)
    maybe = pc.is_null(column)
    within = scalar(True)
    for bound, compare, shift in (
        (lower, pc.greater_equal, -margin),
        (upper, pc.less, margin),
    ):
        if bound is None:
            continue
        edge = datetime.fromisoformat(bound) + shift
        if edge.tzinfo is not None:
            edge = edge.astimezone(UTC)
        if pa.types.is_date(kind):
            value = scalar(edge.date(), kind)
        elif kind.tz is None:
            value = scalar(edge.replace(tzinfo=None), kind)
        else:
            value = scalar(edge if edge.tzinfo else edge.replace(tzinfo=UTC), kind)
        within = pc.and_(within, compare(column, value))
    maybe = pc.or_(maybe, pc.fill_null(within, scalar(False)))
    special = cutoff + PG_TEXT_SUFFIX  # ±infinity and the like, beyond Arrow's range
    if special in data.column_names:
        maybe = pc.or_(maybe, pc.is_valid(data.column(special)))
    return pc.indices_nonzero(maybe)


def in_range_sql(
    lower: str | None,
    upper: str | None,
    columns: ArchivedColumns,
    mapped: ColumnMap,
    parents: list[ForeignKey],
) -> tuple[str, tuple[str, ...]]:
    """SQL over a staged row `s`: whether it is in the restore's range [lower, upper),
    and its parameters; "true" for every row. A bound is cast once (a scalar subquery): a
    stable cast in a filter runs per row."""
    bounds = [(b, op) for b, op in ((lower, ">="), (upper, "<")) if b]
    if not bounds:
        return "true", ()
    if not columns.cutoff:  # a table archived with its parents' rows: in a range
        # restore, the rows whose parents are (back) in place, the others stay archived
        retyped = {name for name, _, _ in mapped.retyped}
        present = " AND ".join(
            f"({references_present(k, mapped.values, retyped)})" for k in parents
        )
        return f"({present or 'false'})", ()
    cutoff = mapped.values[columns.cutoff]
    where = " AND ".join(
        f"{cutoff} {op} (SELECT ${i}::text::timestamptz)" for i, (_, op) in enumerate(bounds, 1)
    )
    return where, tuple(b for b, _ in bounds)


def references_present(key: ForeignKey, values: dict[str, str], retyped: set[str]) -> str:
    """SQL: the staged row's `key` references nothing (a NULL) or a row now in its parent,
    compared with the constraint's own equality, unless the column's type changed since
    it was archived (the operator is today's types')."""
    parent = TableName.stored(key.parent)
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
