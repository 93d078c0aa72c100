"""Rows out of the application's PostgreSQL tables, as Arrow.

Query text is built once per table from quoted identifiers; values (cutoff, last key,
chunk size) never enter it. They are bound as parameters to `set_config(..., true)` and
read back with `current_setting()`, because the ADBC driver streams a parameterless query
through COPY BINARY in batches, while a parameterized one is ~2.3x slower and returns a
single unbounded batch (measured here, adbc-driver-postgresql 1.13).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from archiver import pgtypes
from archiver.db import BulkConnection, BulkCursor, fetch_all
from archiver.errors import InputError
from archiver.ident import TableName, quote_ident
from archiver.model import KeyRange, Mode
from archiver.references import check_unreferenced

CUTOFF_TYPES = ("date", "timestamp", "timestamptz")
SPLIT_SAMPLE_ROWS = 100_000  # rows sampled to place the boundaries of --parallel ranges
# Key types whose Arrow order equals PostgreSQL's (no collation) and whose text form
# PostgreSQL reads back exactly.
ARROW_ORDERED_KEYS = ("int2", "int4", "int8", "uuid", "date", "timestamp", "timestamptz")
# Key types PostgreSQL orders its own way -- text in the column's collation, char(n)
# without its padding, citext case-insensitively, numeric with NaN above all -- so a
# chunk's first and last key (the resume point and the catalog's key range) come from
# PostgreSQL, never from Arrow.
PG_ORDERED_KEYS = ("text", "varchar", "bpchar", "citext", "numeric")
KEY_TYPES = ARROW_ORDERED_KEYS + PG_ORDERED_KEYS
# Columns a move chunk of a PG-ordered key returns besides the row: its first and last
# key, in PostgreSQL's order, as JSON arrays of text (the same value on every row).
FIRST_KEY, LAST_KEY = "__archiver_first_key", "__archiver_last_key"

_FIND_TABLE = """
SELECT n.nspname::text, c.relname::text, c.oid::bigint, c.relkind = 'p'
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = $2 AND c.relkind IN ('r', 'p')
  AND (n.nspname = $1 OR ($1 = '' AND n.nspname = ANY (current_schemas(false))))
ORDER BY array_position(current_schemas(false), n.nspname::text) NULLS LAST
LIMIT 1
"""

_COLUMNS = """
SELECT a.attname::text,
       format_type(a.atttypid, a.atttypmod),
       COALESCE(base.typname, t.typname)::text,
       a.attnum,
       COALESCE(base.typcategory, t.typcategory)::text,
       COALESCE(NULLIF(a.atttypmod, -1), t.typtypmod),
       COALESCE(elem_base.typname, elem.typname, '')::text,
       COALESCE(elem_base.typcategory, elem.typcategory, '')::text,
       (SELECT NULLIF(n.nspname::text, 'pg_catalog') FROM pg_namespace n
        WHERE n.oid = COALESCE(base.typnamespace, t.typnamespace))
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type base ON t.typtype = 'd' AND base.oid = t.typbasetype
LEFT JOIN pg_type elem ON elem.oid = COALESCE(base.typelem, t.typelem) AND elem.oid <> 0
  AND COALESCE(base.typcategory, t.typcategory) = 'A'
LEFT JOIN pg_type elem_base ON elem.typtype = 'd' AND elem_base.oid = elem.typbasetype
WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


# The key archiver walks: the primary key, else the narrowest unique index over NOT NULL
# columns (no expression, no predicate), which identifies rows just as well.
_KEY_INDEX_OF = """
SELECT (i.indkey::int2[])[0:i.indnkeyatts - 1] AS cols
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = {table} AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL
  AND NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = i.indrelid
                  AND a.attnum = ANY (i.indkey::int2[]) AND NOT a.attnotnull)
ORDER BY i.indisprimary DESC, i.indnkeyatts, c.relname
LIMIT 1
"""
_KEY_INDEX = _KEY_INDEX_OF.format(table="$1::bigint::oid")

# A partitioned table with no key of its own: each leaf partition's key, by column name
# (NULL for a leaf without one), and the columns partitioning it at every level (NULL
# for an expression).
_LEAF_KEYS = f"""
SELECT (SELECT array_agg(a.attname::text ORDER BY k.n)
        FROM unnest(x.cols) WITH ORDINALITY k(attnum, n)
        JOIN pg_attribute a ON a.attrelid = l.relid AND a.attnum = k.attnum)
FROM pg_partition_tree($1::bigint::oid) l
LEFT JOIN LATERAL ({_KEY_INDEX_OF.format(table="l.relid")}) x ON true
WHERE l.isleaf
"""
_PARTITION_COLUMNS = """
SELECT DISTINCT a.attname::text
FROM pg_partition_tree($1::bigint::oid) l
JOIN pg_partitioned_table p ON p.partrelid = l.relid
CROSS JOIN unnest(p.partattrs::int2[]) n
LEFT JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = n
"""


@dataclass(frozen=True)
class Column:
    name: str
    type_sql: str  # format_type(): exact, e.g. numeric(12,2), "my schema".mood[]
    base_type: str  # pg_type name of the type, or of a domain's base type
    category: str = ""  # pg_type.typcategory of the (base) type: A array, E enum, ...
    typmod: int = -1
    element: str = ""  # arrays: the element's (base) type name
    element_category: str = ""
    base_schema: str | None = None  # the (base) type's schema; None: built in (pg_catalog)

    @property
    def cast_type(self) -> str:
        """The (base) type a value is cast to in SQL, by its schema unless built in: an
        extension's type need not be on the worker's search_path."""
        if self.base_schema is None:
            return self.base_type
        return f"{quote_ident(self.base_schema)}.{quote_ident(self.base_type)}"

    def op(self, symbol: str) -> str:
        """The comparison `symbol` (=, <, >, ...) of this type, by its type's schema unless
        built in. With an extension off the worker's search_path, a bare `>` between two
        citext values resolves to text's, through citext's implicit cast: byte order,
        case-sensitive, where the key's index and ORDER BY use citext's."""
        if self.base_schema is None:
            return symbol
        return f"OPERATOR({quote_ident(self.base_schema)}.{symbol})"


@dataclass(frozen=True)
class TableInfo:
    """What archiving needs to know of a table, read from the catalog."""

    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[Column, ...]  # primary key (or unique index, see _KEY_INDEX), in index order
    partitioned: bool = False
    oid: int = 0

    @property
    def key_in_arrow_order(self) -> bool:
        """Arrow orders the key as PostgreSQL does (see PG_ORDERED_KEYS)."""
        return all(c.base_type in ARROW_ORDERED_KEYS for c in self.key)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def quoted_key(self) -> str:
        """The key's columns, quoted, comma-separated: `"a", "b"`."""
        return ", ".join(quote_ident(c.name) for c in self.key)

    @property
    def quoted(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.name)}"

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise InputError(f"column {name!r} not found in table {self.qualified}")


def find_table(conn: BulkConnection, table: TableName) -> tuple[str, str, int, bool]:
    """(schema, name, oid, partitioned) of a table, by name (search_path when unqualified)."""
    found = fetch_all(conn, _FIND_TABLE, (table.schema or "", table.name))
    if not found:
        raise InputError(f"table {str(table)!r} not found")
    schema, name, oid, partitioned = found[0]
    return str(schema), str(name), int(oid), bool(partitioned)


def describe_table(conn: BulkConnection, table: TableName) -> TableInfo:
    """Look a table up by name and read its columns and key."""
    schema, name, oid, partitioned = find_table(conn, table)
    rows = fetch_all(conn, _COLUMNS, (oid,))
    columns = {int(r[3]): Column(r[0], r[1], r[2], *r[4:]) for r in rows}
    index = fetch_all(conn, _KEY_INDEX, (oid,))
    key = tuple(columns[int(n)] for n in index[0][0]) if index else ()
    if not key and partitioned:
        by_name = {c.name: c for c in columns.values()}
        key = tuple(by_name[n] for n in _partitions_key(conn, oid, f"{schema}.{name}"))
    info = TableInfo(schema, name, tuple(columns.values()), key, partitioned, oid)
    if not info.key:
        raise InputError(
            f"table {info.qualified} has no primary key and no unique index on NOT NULL "
            "columns; archiver walks tables by key: add a primary key"
        )
    for column in info.key:
        if column.base_type not in KEY_TYPES:
            raise InputError(
                f"key column {column.name!r} of {info.qualified} is {column.type_sql}; "
                "supported key types: smallint, integer, bigint, numeric, text, varchar, "
                "char, citext, uuid, date, timestamp, timestamptz"
            )
    return info


def _partitions_key(conn: BulkConnection, oid: int, table: str) -> list[str]:
    """The key a partitioned table without one of its own is walked by: the one every
    leaf partition declares (same columns, by name), if it holds every partitioning
    column; rows in different partitions differ in those, so it is unique across the
    table, as PostgreSQL requires of a key declared on the parent. [] when no partition
    has a key; partitions' keys that do not qualify are refused naming why."""
    keys = {tuple(r[0]) if r[0] else () for r in fetch_all(conn, _LEAF_KEYS, (oid,))}
    if keys <= {()}:  # no partitions, or none with a key: no key at all
        return []
    if len(keys) > 1 or () in keys:
        raise InputError(
            f"table {table} has no key of its own and its partitions do not all declare the "
            "same one; archiver walks tables by key: add a primary key to each partition "
            "(the same columns) or to the table"
        )
    key = list(keys.pop())
    partitioning = [r[0] for r in fetch_all(conn, _PARTITION_COLUMNS, (oid,))]
    if None in partitioning or not set(partitioning) <= set(key):
        raise InputError(
            f"table {table} has no key of its own and its partitions' key ({', '.join(key)}) "
            "does not hold every partitioning column, so it is not unique across partitions; "
            "add those columns to it, or a primary key to the table"
        )
    return key


def check_cutoff_column(info: TableInfo, name: str) -> Column:
    column = info.column(name)
    if column.base_type not in CUTOFF_TYPES:
        raise InputError(
            f"column {name!r} of {info.qualified} is {column.type_sql}, "
            "not a date, timestamp or timestamptz"
        )
    return column


def describe_archive(
    conn: BulkConnection,
    table: TableName | str,
    column: str,
    mode: Mode,
    with_children: bool = False,
) -> ChunkQueries:
    """The table looked up (with its key checked), its cutoff column checked and, to move
    rows without their children, no foreign key pointing at it: what every command and
    job starts from (aggregates.describe_aggregate adds the children)."""
    name = table if isinstance(table, TableName) else TableName.parse(table)
    info = describe_table(conn, name)
    queries = ChunkQueries(info, check_cutoff_column(info, column))
    if mode == Mode.MOVE and not with_children:
        check_unreferenced(conn, info.qualified, info.oid)
    return queries


def follows(key: tuple[Column, ...], values: list[str], row: str | None = None) -> str:
    """SQL: the row's key comes after `values` (or the `row` subquery holding them) in key
    order. A row comparison, which the key's index takes as its bound, when every key
    column's type is built in; otherwise one column at a time, each with its own type's
    operators (a row comparison would resolve each by the search_path, see Column.op),
    led by the first column's bound."""
    names = [quote_ident(c.name) for c in key]
    if all(c.base_schema is None for c in key):
        return f"({', '.join(names)}) > ({row or ', '.join(values)})"
    if len(key) == 1:
        return f"{names[0]} {key[0].op('>')} {values[0]}"
    ties = [
        " AND ".join(
            [f"{names[j]} {key[j].op('=')} {values[j]}" for j in range(i)]
            + [f"{names[i]} {key[i].op('>')} {values[i]}"]
        )
        for i in range(len(key))
    ]
    first = f"{names[0]} {key[0].op('>=')} {values[0]}"
    return f"{first} AND ({' OR '.join(f'({t})' for t in ties)})"


def _setting(name: str, base_type: str, *, once: bool) -> str:
    value = f"current_setting('{name}')::{base_type}"
    return f"(SELECT {value})" if once else value


@dataclass(frozen=True)
class ChunkQueries:
    """The statements that take one chunk of a table, for one cutoff column."""

    table: TableInfo
    cutoff_column: Column

    def _older_than_cutoff(self, *, estimate: bool = False) -> str:
        """The cutoff predicate. Run, the cutoff is a scalar subquery (an InitPlan,
        computed once): as a plain current_setting() it sits in the scan's Filter and is
        parsed and cast for every row, ~0.45 s per 1M rows measured here. Only
        EXPLAINed for an estimate, it stays plain, because the planner folds it to the
        cutoff's real selectivity then."""
        value = _setting("archiver.cutoff", self.cutoff_column.base_type, once=not estimate)
        return f"{quote_ident(self.cutoff_column.name)} < {value}"

    def older_rows(self) -> str:
        """Every row older than the cutoff; only ever EXPLAINed, for the planner's count."""
        return f"SELECT 1 FROM {self.table.quoted} WHERE {self._older_than_cutoff(estimate=True)}"

    def _in_range(self, key_range: KeyRange | None, *, once: bool = False) -> str:
        if key_range is None:
            return ""
        key = self.table.key[0]
        cond = ""
        for name, op, bound in (
            ("after", ">", key_range.after),
            ("through", "<=", key_range.through),
        ):
            if bound is not None:
                value = _setting(f"archiver.range_{name}", key.cast_type, once=once)
                cond += f" AND {quote_ident(key.name)} {key.op(op)} {value}"
        return cond

    def select_chunk(
        self,
        cols: str,
        *,
        after_key: bool,
        lock: bool,
        key_range: KeyRange | None = None,
        limit: str = "current_setting('archiver.limit')::bigint",
        after: str | None = None,
    ) -> str:
        """`cols` of the chunk's rows: older than the cutoff, after the last key (and in the
        key range), in key order, up to the limit; locked, skipping rows others hold.
        `after`: a row subquery the keys follow instead of the last key."""
        t = self.table
        where = self._chunk_rows(after_key=after_key, key_range=key_range, after=after)
        # the key's columns by their table: a bare name in ORDER BY is the select list's
        # column of that name first, and a key selected as its text (TEXT_KEYS) would
        # then be sorted as text
        order = ", ".join(f"{t.quoted}.{quote_ident(c.name)}" for c in t.key)
        sql = f"SELECT {cols} FROM {t.quoted} WHERE {where} ORDER BY {order} LIMIT {limit}"
        return sql + (" FOR UPDATE SKIP LOCKED" if lock else "")

    def _chunk_rows(
        self,
        *,
        after_key: bool,
        key_range: KeyRange | None,
        after: str | None = None,
        once: bool = False,
        cutoff: bool = True,
    ) -> str:
        """The conditions a chunk's rows meet, but its limit: older than the cutoff, in the
        key range, after the last key (or the `after` row subquery). `once`: the settings
        as scalar subqueries, for a Filter (see _older_than_cutoff); an index condition
        computes a bare one once by itself. `cutoff=False`: the key's conditions alone."""
        where = (self._older_than_cutoff() if cutoff else "true") + self._in_range(
            key_range, once=once
        )
        key = self.table.key
        if after_key:
            values = [
                _setting(f"archiver.key_{i}", c.cast_type, once=once) for i, c in enumerate(key)
            ]
            where += " AND " + follows(key, values)
        elif after is not None:
            values = [f"(SELECT a.{quote_ident(c.name)} FROM ({after}) a)" for c in key]
            where += " AND " + follows(key, values, row=after)
        return where

    @cached_property
    def plans(self) -> list[pgtypes.ColumnPlan]:
        """How each column travels (pgtypes), the one place that decides it."""
        return pgtypes.plan_table(self.table.columns, self.table.key)

    @property
    def select_list(self) -> str:
        """Each column as the type table says (pgtypes), SQL-filled companions last."""
        return pgtypes.select_list(self.plans)

    def chunk_end(self, *, after_key: bool, key_range: KeyRange | None = None) -> str:
        """Where a key-range chunk (`take(by_key_range=True)`) would end, if it should be
        one, as one row:
        - `old`: whether the first row after the last key (in the job's key range) is
          older than the cutoff: false for a NULL cutoff value, NULL when no row is left;
        - only where it is, `nth`: the key `limit` keys on, old rows or not (NULL when
          fewer keys are left), and only where that is NULL, `last`: the last key.
        Keys as text. Each is read from the key's index (`nth` by an index-only scan,
        ~0.1 s per 1M keys where the visibility map is set, measured here), once: the
        subqueries are fenced (OFFSET 0) so that the planner does not copy one into two
        InitPlans. A range always has an end: without one, the DELETE's plan may read
        the cutoff column's index, every entry older than the cutoff, this job's deleted
        rows included. One-column keys."""
        t = self.table
        key = f"{t.quoted}.{quote_ident(t.key[0].name)}"
        where = self._chunk_rows(after_key=after_key, key_range=key_range, cutoff=False)
        keys = f"FROM {t.quoted} WHERE {where} ORDER BY {key}"
        first = f"SELECT coalesce({self._older_than_cutoff()}, false) {keys} LIMIT 1"
        nth = f"SELECT {key}::text {keys} OFFSET current_setting('archiver.limit')::bigint - 1 LIMIT 1"
        last = f"SELECT {key}::text {keys} DESC LIMIT 1"
        return (
            f"SELECT old, nth, CASE WHEN old AND nth IS NULL THEN ({last}) END "
            f"FROM (SELECT old, CASE WHEN old THEN ({nth}) END AS nth "
            f"FROM (SELECT ({first}) AS old OFFSET 0) f OFFSET 0) n"
        )

    def take(
        self,
        *,
        after_key: bool,
        key_range: KeyRange | None = None,
        skip_locked: bool = True,
        by_key_range: bool = False,
    ) -> str:
        """Move mode: delete the chunk's rows and return them. No ORDER BY on the result:
        sorting costs ~1 s per 500k rows and the key range is computed from the Arrow
        batches instead.

        `skip_locked=True`: the chunk's rows are locked as they are chosen, skipping rows
        others hold. `skip_locked=False` (plain tables whose key Arrow orders, see
        JobContext.waits_for_row_locks): they are chosen without locking them and the
        DELETE waits for a row another transaction holds, which the caller bounds with a
        short lock_timeout. Locking every row first costs a WAL record and a second write
        of each tuple: 0.35-0.5 s per 1M reference rows, 12-17% of the statement
        (measured here). A row another transaction changes and commits while the DELETE
        waits for it is left in the table where PostgreSQL rechecks its newest version
        against the chosen ctids (TidRecheck; PostgreSQL 15.20 here does). Releases whose
        TID scan does not recheck take that newest version instead, so the DELETE repeats
        the chunk's conditions (cutoff, key range, after the last key) in its own WHERE,
        which every release rechecks: never a row that is no longer old or whose key moved
        back behind the chunk. (A key moved forward past the chunk is taken, and the job
        resumes after it: the rows between stay for the next archive.)

        A plain table deletes the chosen rows by ctid: a TID scan, where `pk IN (...)`
        made the planner hash-join a sequential scan of the whole table, for every chunk
        (6.6 s against 2.6 s for 1M rows, measured here). Locked as they are chosen, the
        ctids cannot move before COMMIT because the same statement holds the rows (FOR
        UPDATE returns the version it locked); unlocked, see above. A partitioned table
        repeats ctids across partitions, so it keeps the key form.

        A key PostgreSQL orders its own way (PG_ORDERED_KEYS) is locked in a CTE, and the
        statement also returns the chunk's first and last key as PostgreSQL orders them
        (a top-1 sort of the chunk's keys each).

        `by_key_range=True` (with `skip_locked=False`, one-column keys): no rows chosen
        first; the DELETE takes every row older than the cutoff in the key range, whose
        end the caller finds with `chunk_end`. One pass over the rows instead of two (the
        chunk subquery's and the TID scan's): 2.17-2.51 CPU-s of the backend against
        2.49-2.74 for 1M reference rows (nine runs each, measured here). The range held `limit` keys when
        its end was found, so about as many rows at most: fewer where old rows are
        sparse in key order, more only by rows inserted into it meanwhile. A row changed
        while the DELETE waits for it is rechecked against this WHERE, the key's bounds
        included: a key moved out of the range is not taken."""
        t = self.table
        keys = t.quoted_key
        if by_key_range:
            assert not skip_locked and t.key_in_arrow_order and not t.partitioned
            assert len(t.key) == 1
            where = self._chunk_rows(after_key=after_key, key_range=key_range, once=True)
            return f"DELETE FROM {t.quoted} WHERE {where} RETURNING {self.select_list}"
        row = keys if t.partitioned else "ctid"
        if t.key_in_arrow_order:
            inner = self.select_chunk(
                row, after_key=after_key, lock=skip_locked, key_range=key_range
            )
            bounds = ""
        else:  # the chunk's first and last key in PostgreSQL's order, from the locked keys
            cols = keys if t.partitioned else f"ctid, {keys}"
            locked = self.select_chunk(cols, after_key=after_key, lock=True, key_range=key_range)
            inner = f"SELECT {row} FROM locked"
            # each key as its output function writes it, as the row travels (char(n) padded)
            texts = ", ".join(f"format('%s', {quote_ident(c.name)})" for c in t.key)
            bounds = "".join(
                f", (SELECT json_build_array({texts})::text FROM locked ORDER BY "
                + ", ".join(f"{quote_ident(c.name)}{order}" for c in t.key)
                + f" LIMIT 1) AS {quote_ident(alias)}"
                for alias, order in ((FIRST_KEY, ""), (LAST_KEY, " DESC"))
            )
        where = f"({keys}) IN ({inner})" if t.partitioned else f"ctid = ANY (ARRAY ({inner}))"
        if not skip_locked:
            assert t.key_in_arrow_order and not t.partitioned
            where += " AND " + self._chunk_rows(after_key=after_key, key_range=key_range, once=True)
        sql = f"DELETE FROM {t.quoted} WHERE {where} RETURNING {self.select_list}{bounds}"
        return sql if t.key_in_arrow_order else f"WITH locked AS ({locked}) {sql}"

    def read(self, *, after_key: bool, key_range: KeyRange | None = None) -> str:
        """Copy mode: read the chunk's rows in key order from the job's snapshot."""
        return self.select_chunk(
            self.select_list, after_key=after_key, lock=False, key_range=key_range
        )

    def read_next(self, *, after_key: bool, key_range: KeyRange | None = None) -> str:
        """Copy mode: the chunk after the one `read` returns, from the same settings, so
        two connections on one snapshot read both side by side. It starts after the key
        of the first chunk's last row (an InitPlan: its backend walks the first chunk's
        keys, ~0.15 s per 500k reference rows, while the other streams them); none when
        the first chunk is the last."""
        keys = self.table.quoted_key
        last = self.select_chunk(
            keys,
            after_key=after_key,
            lock=False,
            key_range=key_range,
            limit="1 OFFSET current_setting('archiver.limit')::bigint - 1",
        )
        return self.select_chunk(
            self.select_list, after_key=False, lock=False, key_range=key_range, after=last
        )

    def split(self, conn: BulkConnection, cutoff: str, parts: int) -> list[KeyRange]:
        """`parts` key ranges holding about as many rows older than the cutoff each, from
        quantiles of the key over a sample of ~100k rows (TABLESAMPLE SYSTEM). Fewer
        ranges when the table has fewer distinct keys."""
        if len(self.table.key) != 1:
            raise InputError(
                f"table {self.table.qualified} has a primary key of several columns; "
                "--parallel needs a one-column key"
            )
        key = quote_ident(self.table.key[0].name)
        rows, _ = estimate_rows(conn, self.table)
        percent = min(100.0, 100.0 * SPLIT_SAMPLE_ROWS / max(rows, 1))
        fractions = [i / parts for i in range(1, parts)]
        found = fetch_all(
            conn,
            f"SELECT (percentile_disc($1::text::float8[]) WITHIN GROUP (ORDER BY {key}))::text[] "
            f"FROM {self.table.quoted} TABLESAMPLE SYSTEM ($2::text::float8) "
            f"WHERE {quote_ident(self.cutoff_column.name)} < "
            f"$3::text::{self.cutoff_column.base_type}",
            ("{" + ",".join(map(str, fractions)) + "}", str(percent), cutoff),
        )
        bounds = list(dict.fromkeys(b for b in (found[0][0] or []) if b is not None))
        edges: list[str | None] = [None, *bounds, None]
        parts = len(edges) - 1  # quantiles: each range holds about as many old rows
        return [KeyRange(lo, hi, parts) for lo, hi in itertools.pairwise(edges)]


def bind_chunk(
    cur: BulkCursor,
    cutoff: str,
    after: list[str] | None,
    limit: int,
    key_range: KeyRange | None = None,
    timeouts: tuple[float, float] = (0.0, 0.0),
) -> None:
    """Hand the chunk's values to the next statement as transaction-local settings, with
    its (lock_timeout, statement_timeout) in seconds (0: none)."""
    # jit off: compiling the chunk's expressions costs ~0.1 s per chunk and gains nothing
    # on a statement that only streams rows (measured on the reference orders table).
    lock_timeout, statement_timeout = timeouts
    names = ["archiver.cutoff", "archiver.limit", "jit", "lock_timeout", "statement_timeout"]
    values = [
        cutoff,
        str(limit),
        "off",
        _milliseconds(lock_timeout),
        _milliseconds(statement_timeout),
    ]
    for i, value in enumerate(after or []):
        names.append(f"archiver.key_{i}")
        values.append(value)
    if key_range is not None:
        for name, bound in (("after", key_range.after), ("through", key_range.through)):
            if bound is not None:
                names.append(f"archiver.range_{name}")
                values.append(bound)
    calls = ", ".join(f"set_config(${2 * i + 1}, ${2 * i + 2}, true)" for i in range(len(names)))
    params: list[str] = []
    for name, value in zip(names, values, strict=True):
        params += [name, value]
    cur.execute(f"SELECT {calls}", tuple(params))
    cur.fetchall()


def set_lock_timeout(cur: BulkCursor, seconds: float) -> None:
    """The lock_timeout of the rest of the transaction."""
    cur.execute("SELECT set_config('lock_timeout', $1, true)", (_milliseconds(seconds),))
    cur.fetchall()


def _milliseconds(seconds: float) -> str:
    """A timeout setting's value: whole milliseconds, 0 for none."""
    return str(round(seconds * 1000))


def estimate_rows(conn: BulkConnection, table: TableInfo) -> tuple[int, int]:
    """(estimated rows, estimated bytes per row) from the planner's statistics; of a
    partitioned table, from its leaf partitions (the parent itself holds no rows)."""
    rows = fetch_all(
        conn,
        "SELECT sum(c.reltuples) FILTER (WHERE c.reltuples > 0)::bigint, "
        "(sum(pg_table_size(c.oid)) FILTER (WHERE c.reltuples > 0)"
        " / NULLIF(sum(c.reltuples) FILTER (WHERE c.reltuples > 0), 0))::bigint "
        "FROM pg_class c WHERE c.oid IN "  # pg_partition_tree of a plain table is empty
        "(SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf) "
        "OR (c.oid = $1::regclass AND c.relkind <> 'p')",
        (table.quoted,),
    )
    return int(rows[0][0] or 0), int(rows[0][1] or 0)


@dataclass(frozen=True)
class DeleteTrigger:
    """A row-level trigger that fires for every row a move deletes."""

    table: str  # schema.name of the table or partition it is declared on
    name: str
    timing: str  # BEFORE or AFTER
    function: str  # as regprocedure prints it: schema-qualified unless on the search path
    definer: bool  # SECURITY DEFINER: runs as its owner, not as the deleting role


# The enabled row-level DELETE triggers on some tables (oids, comma-separated) and their
# partitions. A partition's copy of its parent's trigger is left out where that trigger
# is listed. Foreign keys' triggers are left out by their constraint, not by
# tgisinternal: PostgreSQL 13 and 14 mark the partitions' copies internal too.
_DELETE_TRIGGERS = """
WITH rels AS (
    SELECT p.relid FROM unnest(string_to_array($1, ',')::oid[]) t(oid),
    LATERAL (SELECT relid FROM pg_partition_tree(t.oid::regclass)
             UNION SELECT t.oid::regclass) p),
found AS (
    SELECT t.oid, t.tgrelid, t.tgparentid, t.tgname, t.tgtype, t.tgfoid FROM pg_trigger t
    WHERE t.tgrelid IN (SELECT relid FROM rels)
      AND t.tgenabled IN ('A', CASE current_setting('session_replication_role')
                               WHEN 'replica' THEN 'R' ELSE 'O' END)
      AND t.tgtype::int & 1 <> 0 AND t.tgtype::int & 8 <> 0  -- FOR EACH ROW, ON DELETE
      AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.oid = t.tgconstraint AND k.contype = 'f'))
SELECT DISTINCT n.nspname || '.' || c.relname, f.tgname,
       CASE WHEN f.tgtype::int & 2 <> 0 THEN 'BEFORE' ELSE 'AFTER' END,
       f.tgfoid::regprocedure::text, p.prosecdef
FROM found f JOIN pg_class c ON c.oid = f.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = f.tgfoid
WHERE f.tgparentid NOT IN (SELECT oid FROM found)
"""


def delete_triggers(conn: BulkConnection, tables: Iterable[TableInfo]) -> list[DeleteTrigger]:
    """The row-level DELETE triggers that fire for each row deleted from the tables (see
    _DELETE_TRIGGERS), under the connection's `session_replication_role`: archiver never
    sets it, but a role's or a database's default can."""
    oids = ",".join(str(t.oid) for t in tables)
    rows = fetch_all(conn, _DELETE_TRIGGERS, (oids,))
    found = [DeleteTrigger(str(t), str(n), str(w), str(f), bool(d)) for t, n, w, f, d in rows]
    return sorted(found, key=lambda t: (t.table, t.name))  # by code point, whatever the collation


@dataclass(frozen=True)
class QueryPlan:
    """What EXPLAIN says of the rows older than the cutoff and of the first chunk's statement."""

    rows_older: int  # the planner's estimate, from the table's statistics
    indexes: tuple[str, ...]  # indexes the chunk statement reads
    sequential_scan: bool  # the chunk statement scans the whole table


_USE_COPY = "adbc.postgresql.use_copy"  # EXPLAIN cannot run inside COPY (...) TO STDOUT


def explain_archive(
    conn: BulkConnection, queries: ChunkQueries, cutoff: str, chunk_rows: int, move: bool
) -> QueryPlan:
    """EXPLAIN (never run) the count of rows older than the cutoff and the first chunk's
    statement, with the chunk's values bound exactly as a real chunk binds them. The
    planner folds current_setting() when it estimates, so the count uses the cutoff's
    real selectivity. Nothing is written: the transaction is rolled back."""
    try:
        with conn.cursor() as cur:
            cur.adbc_statement.set_options(**{_USE_COPY: "false"})
            bind_chunk(cur, cutoff, None, chunk_rows)
            count = _explain(cur, queries.older_rows())
            chunk = _explain(
                cur, queries.take(after_key=False) if move else queries.read(after_key=False)
            )
    finally:
        conn.rollback()
    nodes = list(_plan_nodes(chunk))
    return QueryPlan(
        rows_older=int(count.get("Plan Rows", 0)),
        indexes=tuple(dict.fromkeys(str(n["Index Name"]) for n in nodes if "Index Name" in n)),
        sequential_scan=any(
            n.get("Node Type") == "Seq Scan" and n.get("Relation Name") == queries.table.name
            for n in nodes
        ),
    )


def _explain(cur: BulkCursor, sql: str) -> dict[str, Any]:
    cur.execute(f"EXPLAIN (FORMAT JSON) {sql}")
    plan: dict[str, Any] = json.loads(cur.fetchall()[0][0])[0]["Plan"]
    return plan


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)
