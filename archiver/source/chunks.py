"""The statements that take one chunk of a table.

Query text is built once per table from quoted identifiers; values (cutoff, last key,
chunk size) never enter it. They are bound as parameters to `set_config(..., true)` and
read back with `current_setting()`, because the ADBC driver streams a parameterless query
through COPY BINARY in batches, while a parameterized one is slower and returns a single
unbounded batch (adbc-driver-postgresql 1.13).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property

from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.errors import InputError
from archiver.ident import TableName, quote_ident
from archiver.model import KeyRange, Mode
from archiver.pgtypes import sql as pgtypes
from archiver.pgtypes.column import Column
from archiver.source.references import check_unreferenced
from archiver.source.tables import (
    TableInfo,
    check_cutoff_column,
    describe_table,
    estimate_rows,
)

SPLIT_SAMPLE_ROWS = 100_000  # rows sampled to place the boundaries of --parallel ranges
# Columns a move chunk of a PG-ordered key returns besides the row: its first and last
# key, in PostgreSQL's order, as JSON arrays of text (the same value on every row).
FIRST_KEY, LAST_KEY = "__archiver_first_key", "__archiver_last_key"


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
    name = table if isinstance(table, TableName) else TableName.stored(table)
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
        parsed and cast for every row. Only
        EXPLAINed for an estimate, it stays plain, because the planner folds it to the
        cutoff's real selectivity then."""
        value = _setting("archiver.cutoff", self.cutoff_column.base_type, once=not estimate)
        return f"{quote_ident(self.cutoff_column.name)} < {value}"

    def older(self) -> str:
        """The cutoff predicate, as a statement's Filter runs it."""
        return self._older_than_cutoff()

    def older_rows(self) -> str:
        """Every row older than the cutoff; only ever EXPLAINed, for the planner's count."""
        return f"SELECT 1 FROM {self.table.quoted} WHERE {self._older_than_cutoff(estimate=True)}"

    def newer_rows(self) -> str:
        """Whether any row is at or after the cutoff, and whether the table has a row at
        all: an index probe each where an index leads with the cutoff column. As the
        column's largest value against the cutoff (one step down the index, whatever the
        estimates), not EXISTS of a row at or after it: the planner takes a third of the
        rows to match a cutoff it cannot see and scans the table for the first, which
        finds none when every row is older: a read of the whole table."""
        column, table = quote_ident(self.cutoff_column.name), self.table.quoted
        cutoff = _setting("archiver.cutoff", self.cutoff_column.base_type, once=True)
        return (
            f"SELECT coalesce((SELECT max({column}) FROM {table}) >= {cutoff}, false), "
            f"EXISTS (SELECT FROM {table})"
        )

    def _in_range(self, key_range: KeyRange | None, *, once: bool = False) -> str:
        if key_range is None:
            return ""
        key = self.table.key[0]
        cond = ""
        for name, op, bound in (
            ("first", ">=", key_range.first),
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
        return pgtypes.plan_table(self.table.columns, self.table.key, self.table.numeric_as_text)

    @property
    def select_list(self) -> str:
        """Each column as the type table says (pgtypes), SQL-filled companions last."""
        return pgtypes.select_list(self.plans)

    def old_key_bounds(
        self, cutoff: str, key_range: KeyRange | None, *, walk: int | None = None
    ) -> tuple[str, tuple[str, ...]]:
        """The statement and parameters of the first key column's smallest and largest
        value among rows older than the cutoff (in the job's key range), as text.

        With `walk`, each end is looked for among the first `walk` keys from that end of
        the key's index (an index scan that stops at the first old row): where most rows
        are old, the ends are found at once, and at most `walk` newer rows are read on
        the way. A NULL end: none within `walk` keys (or none old), so ask again
        without. Reading every old row instead costs a first archive, where most rows
        are old, a second pass over them.

        Without `walk`, the old rows are read once for both ends (materialized), by the
        cutoff column's index where few are old (the cutoff is a parameter the planner
        sees): never a walk through every newer row until an old one, which cost a day's
        job on a 10M-row table 8,960,332 tuples. NULLs when no row is old. Ordered by
        the key column (`old.k`, `w.k`): a bare `k` would be the select list's text."""
        t, key = self.table, self.table.key[0]
        name, column = quote_ident(key.name), quote_ident(self.cutoff_column.name)
        old = f"{column} < $1::text::{self.cutoff_column.base_type}"
        params = [cutoff]
        in_range = []
        for op, bound in ((">", key_range.after), ("<=", key_range.through)) if key_range else ():
            if bound is not None:
                params.append(bound)
                in_range.append(f"{name} {key.op(op)} ${len(params)}::text::{key.cast_type}")
        if walk is not None:
            params.append(str(walk))
            where = f" WHERE {' AND '.join(in_range)}" if in_range else ""
            ends = ", ".join(
                f"(SELECT w.k::text FROM (SELECT {name} AS k, {old} "
                f"AS old FROM {t.quoted}{where} ORDER BY {name}{d} "
                f"LIMIT ${len(params)}::text::bigint) w WHERE w.old ORDER BY w.k{d} LIMIT 1)"
                for d in ("", " DESC")
            )
            return f"SELECT {ends}", tuple(params)
        where = " AND ".join([old, *in_range])
        rows = f"SELECT {name} AS k FROM {t.quoted} WHERE {where}"
        ends = ", ".join(
            f"(SELECT k::text FROM old ORDER BY old.k{d} LIMIT 1)" for d in ("", " DESC")
        )
        return f"WITH old AS MATERIALIZED ({rows}) SELECT {ends}", tuple(params)

    def chunk_end(self, *, after_key: bool, key_range: KeyRange | None = None) -> str:
        """Where a key-range chunk (`take(by_key_range=True)`) would end, if it should be
        one, as one row:
        - `old`: whether the first row after the last key (in the job's key range) is
          older than the cutoff: false for a NULL cutoff value, NULL when no row is left;
        - only where it is, `nth`: the key `limit` keys on, old rows or not (NULL when
          fewer keys are left), and only where that is NULL, `last`: the last key.
        Keys as text. Each is read from the key's index (`nth` by an index-only scan
        where the visibility map is set), once: the
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
        a sort of every row costs more than the rest of the statement's work on the
        client, and the key range is computed from the Arrow batches instead.

        `skip_locked=True`: the chunk's rows are locked as they are chosen, skipping rows
        others hold. `skip_locked=False` (plain tables whose key Arrow orders, see
        JobContext.waits_for_row_locks): they are chosen without locking them and the
        DELETE waits for a row another transaction holds, which the caller bounds with a
        short lock_timeout. Locking every row first costs a WAL record and a second write
        of each tuple (docs/performance.md). A row another transaction changes and commits while the DELETE
        waits for it is left in the table where PostgreSQL rechecks its newest version
        against the chosen ctids (TidRecheck; PostgreSQL 15.20 here does). Releases whose
        TID scan does not recheck take that newest version instead, so the DELETE repeats
        the chunk's conditions (cutoff, key range, after the last key) in its own WHERE,
        which every release rechecks: never a row that is no longer old or whose key moved
        back behind the chunk. (A key moved forward past the chunk is taken, and the job
        resumes after it: the rows between stay for the next archive.)

        A plain table deletes the chosen rows by ctid: a TID scan, where `pk IN (...)`
        made the planner hash-join a sequential scan of the whole table, for every chunk.
        Locked as they are chosen, the
        ctids cannot move before COMMIT because the same statement holds the rows (FOR
        UPDATE returns the version it locked); unlocked, see above. A partitioned table
        repeats ctids across partitions, so it keeps the key form.

        A key PostgreSQL orders its own way (PG_ORDERED_KEYS) is locked in a CTE, and the
        statement also returns the chunk's first and last key as PostgreSQL orders them
        (a top-1 sort of the chunk's keys each).

        `by_key_range=True` (with `skip_locked=False`, one-column keys): no rows chosen
        first; the DELETE takes every row older than the cutoff in the key range, whose
        end the caller finds with `chunk_end`. One pass over the rows instead of two (the
        chunk subquery's and the TID scan's; docs/performance.md). The range held `limit` keys when
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
        keys while the other streams them); none when
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

    def split(
        self, conn: BulkConnection, cutoff: str, parts: int, *, older: int | None = None
    ) -> list[KeyRange]:
        """`parts` key ranges holding about as many rows older than the cutoff each, from
        quantiles of their keys: of every old row where the planner expects (`older`)
        at most ~100k of them, read by the cutoff column's index; else of a sample of
        ~100k rows of the table (TABLESAMPLE SYSTEM). Either way it reads about
        min(old rows, 100k) rows, not the table. Fewer ranges when the table has fewer
        distinct keys."""
        if len(self.table.key) != 1:
            raise InputError(
                f"table {self.table.qualified} has a primary key of several columns; "
                "--parallel needs a one-column key"
            )
        key = quote_ident(self.table.key[0].name)
        params = ["{" + ",".join(str(i / parts) for i in range(1, parts)) + "}", cutoff]
        sample = ""
        if older is None or older > SPLIT_SAMPLE_ROWS:
            rows, _ = estimate_rows(conn, self.table)
            params.append(str(min(100.0, 100.0 * SPLIT_SAMPLE_ROWS / max(rows, 1))))
            sample = " TABLESAMPLE SYSTEM ($3::text::float8)"
        found = fetch_and_rollback(
            conn,
            f"SELECT (percentile_disc($1::text::float8[]) WITHIN GROUP (ORDER BY {key}))::text[] "
            f"FROM {self.table.quoted}{sample} "
            f"WHERE {quote_ident(self.cutoff_column.name)} < "
            f"$2::text::{self.cutoff_column.base_type}",
            tuple(params),
        )
        bounds = list(dict.fromkeys(b for b in (found[0][0] or []) if b is not None))
        edges: list[str | None] = [None, *bounds, None]
        parts = len(edges) - 1  # quantiles: each range holds about as many old rows
        return [KeyRange(lo, hi, parts) for lo, hi in itertools.pairwise(edges)]
