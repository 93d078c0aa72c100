"""Whole old partitions out by DETACH and DROP instead of row by row (move mode,
`--partitions drop|detach`, the default for a range-partitioned table whose partition key
is the cutoff column).

A partition whose upper bound is at or before the cutoff holds only rows older than it,
so it can leave whole. Its job is one source transaction:

1. `LOCK TABLE <partition> IN SHARE ROW EXCLUSIVE MODE` (under the lock timeout,
   retried with backoff without spending an attempt). It conflicts with every row-level
   write lock, so it blocks writes to that partition only -- reads of it and every other
   partition go on -- and it is held until COMMIT: that is the proof that the partition
   still holds exactly the rows read, since no INSERT, UPDATE or DELETE can touch it
   between the read and the DROP. (A late write waits for the lock and then fails,
   because its partition is gone: the application sees the error, no row is lost.)
2. read it in key order, chunk by chunk, each chunk a Parquet file uploaded and verified
   under the partitioned table's name (files carry the partition's name and bound);
3. DETACH it (an ACCESS EXCLUSIVE lock on the partitioned table for a moment, under the
   lock timeout), then DROP it, or rename it `<name>_archived` with `--partitions
   detach`. A DETACH that times out rolls the whole partition back and the retry reads
   it again: the ADBC driver refuses every statement after an error, savepoints too;
4. catalogue every file and the job's progress, COMMIT. Anything failing before COMMIT
   leaves the partition attached and whole, and its uploads uncatalogued (swept by the
   next attempt).

Partitions only partly older than the cutoff, a DEFAULT partition and sub-partitioned
partitions get a job of their own that moves their older rows by rows, straight from
that partition. List and hash partitioning, or a partition key other than the cutoff
column alone: the table moves by rows, as any table. DETACH and DROP are the owner's:
for a role that does not own the table, rows too.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from enum import StrEnum

from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.errors import InputError
from archiver.ident import TableName, quote_ident
from archiver.model import ArchiveRequest, Mode
from archiver.pgtypes.column import Column
from archiver.source.chunks import ChunkQueries
from archiver.source.tables import TableInfo


class PartitionAction(StrEnum):
    DROP = "drop"  # archive whole old partitions, then drop them
    DETACH = "detach"  # archive them, then keep each as a standalone <name>_archived table
    ROWS = "rows"  # move every row with DELETE, partitions or not


_PARTITIONS = """
SELECT n.nspname::text, c.relname::text, c.oid::bigint, c.relkind::text,
       pg_get_expr(c.relpartbound, c.oid),
       pg_total_relation_size(c.oid)::bigint, GREATEST(c.reltuples, 0)::bigint
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = $1::bigint::oid
ORDER BY 2
"""
_RANGE_KEY = """
SELECT p.partstrat = 'r' AND p.partnatts = 1 AND a.attname = $2
FROM pg_partitioned_table p
JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
WHERE p.partrelid = $1::bigint::oid
"""
_OWNER = """
SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = $1::bigint::oid
"""
_BOUNDS = re.compile(r"^FOR VALUES FROM \((.*)\) TO \((.*)\)$", re.S)


def bound_range(bound: str) -> tuple[str | None, str | None]:
    """A range partition's bound (`FOR VALUES FROM (…) TO (…)`, as PostgreSQL prints it)
    as a catalog cutoff range, UTC text: the range of a partition's file that holds no
    rows, so that a restore of any of its range finds it. None: MINVALUE or MAXVALUE
    (unbounded), or no range bound."""
    match = _BOUNDS.match(bound)
    if match is None:
        return None, None
    ends: list[str | None] = []
    for literal in match.groups():
        if not literal.startswith("'"):
            ends.append(None)
            continue
        try:
            value = dt.datetime.fromisoformat(literal[1:-1].replace("''", "'"))
        except ValueError:  # a year BC, or beyond Python's: unbounded, as a file's ends are
            ends.append(None)
            continue
        ends.append((value if value.tzinfo else value.replace(tzinfo=dt.UTC)).isoformat())
    return ends[0], ends[1]


@dataclass(frozen=True)
class WholePartition:
    """What a whole-partition job needs besides the partition's own chunk queries."""

    parent: TableInfo  # the partitioned table: files are named and catalogued under it
    name: str  # schema.partition
    action: PartitionAction

    @property
    def quoted(self) -> str:
        return TableName.stored(self.name).quoted

    def attached(self, conn: BulkConnection) -> str | None:
        """The partition's bound while it is still attached to the parent, else None."""
        rows = fetch_and_rollback(conn, _ATTACHED, (self.quoted, self.parent.oid))
        return str(rows[0][0]) if rows else None

    def statements(self) -> list[str]:
        """DETACH, then DROP or rename: run in the job's one transaction."""
        name = self.name.partition(".")[2]
        detach = f"ALTER TABLE {self.parent.quoted} DETACH PARTITION {self.quoted}"
        if self.action == PartitionAction.DETACH:
            return [
                detach,
                f"ALTER TABLE {self.quoted} RENAME TO {quote_ident(name + '_archived')}",
            ]
        return [detach, f"DROP TABLE {self.quoted}"]


_ATTACHED = """
SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c
JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = $2::bigint::oid
WHERE c.oid = to_regclass($1)
"""


@dataclass(frozen=True)
class Partition:
    schema: str
    name: str
    oid: int
    bound: str  # FOR VALUES FROM (...) TO (...), or DEFAULT
    bytes: int
    rows: int  # the planner's estimate
    whole: bool  # entirely older than the cutoff: leaves by DETACH and DROP
    older_rows: bool  # may hold rows older than the cutoff

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


def partitions(
    conn: BulkConnection, table: TableInfo, cutoff_column: Column, cutoff: str
) -> list[Partition] | None:
    """The table's partitions: whole when the upper bound is at or before the cutoff,
    with older rows when it may hold any row older than it; None when whole partitions
    cannot apply (not range-partitioned on the cutoff column alone)."""
    if not table.partitioned:
        return None
    fits = fetch_and_rollback(conn, _RANGE_KEY, (table.oid, cutoff_column.name))
    if not fits or not fits[0][0]:
        return None

    def compare(literal: str, op: str) -> bool:
        """A bound's literal as PostgreSQL prints it `op` the cutoff, in the column's type."""
        kind = cutoff_column.base_type
        value = literal[1:-1].replace("''", "'")
        query = f"SELECT $1::text::{kind} {op} $2::text::{kind}"
        return bool(fetch_and_rollback(conn, query, (value, cutoff))[0][0])

    found = []
    for schema, name, oid, kind, bound, size, rows in fetch_and_rollback(
        conn, _PARTITIONS, (table.oid,)
    ):
        match = _BOUNDS.match(str(bound))
        if match is None:  # DEFAULT: rows of any age
            whole, older = False, True
        else:  # MINVALUE / MAXVALUE are unquoted
            lower, upper = match.groups()
            whole = kind == "r" and upper.startswith("'") and compare(upper, "<=")
            older = whole or not lower.startswith("'") or compare(lower, "<")
        found.append(
            Partition(
                str(schema), str(name), int(oid), str(bound), int(size), int(rows), whole, older
            )
        )
    return found


def whole_partitions(
    conn: BulkConnection, request: ArchiveRequest, queries: ChunkQueries
) -> tuple[PartitionAction, list[str], list[str]]:
    """How a move treats the table's partitions ("drop", "detach" or "rows"; "auto": drop
    where it applies and this role owns the table), the partitions it takes whole and
    those whose older rows it moves row by row (partly old, DEFAULT, sub-partitioned)."""
    wanted = request.partitions
    if request.partition is not None:  # a job of one partition
        return PartitionAction(wanted), [], []
    if request.mode != Mode.MOVE or wanted == PartitionAction.ROWS:
        return PartitionAction.ROWS, [], []
    if request.with_children:
        if wanted != "auto":
            raise InputError("--partitions drop/detach and --with-children exclude each other")
        return PartitionAction.ROWS, [], []
    found = partitions(conn, queries.table, queries.cutoff_column, request.cutoff)
    if found is None:
        if wanted != "auto":
            raise InputError(
                f"--partitions {wanted}: {queries.table.qualified} is not range-partitioned "
                f"on {queries.cutoff_column.name!r} alone; --partitions rows moves its rows"
            )
        return PartitionAction.ROWS, [], []
    if not fetch_and_rollback(conn, _OWNER, (queries.table.oid,))[0][
        0
    ]:  # DETACH, DROP: the owner's
        if wanted != "auto":
            raise InputError(
                f"--partitions {wanted}: only the owner of {queries.table.qualified} may "
                "detach or drop its partitions, and this role is not (--partitions rows)"
            )
        return PartitionAction.ROWS, [], []
    action = PartitionAction.DROP if wanted == "auto" else PartitionAction(wanted)
    whole = [p.qualified for p in found if p.whole]
    return action, whole, [p.qualified for p in found if p.older_rows and not p.whole]
