"""A table archived with every row that references it (`--with-children`).

The foreign-key graph (references.aggregate) orders the tables parents first. A chunk is
one source transaction in two phases:

1. collect, parents first: the root's chunk (its usual statement: older than the cutoff,
   after the last key, in key order, FOR UPDATE SKIP LOCKED in move mode) into a
   temporary table; then each referencing table's rows that reference any collected row
   of any of its parents in the aggregate (a row reached by two paths is one row),
   locked FOR UPDATE: a child row an application holds is waited for, under the lock
   timeout, never skipped, since its parent is about to go. Holding the parents locked
   keeps new children from appearing (an INSERT of a child locks its parent FOR KEY
   SHARE) until the chunk commits.
2. take, leaves first, the root last: each table's collected rows, deleted by ctid and
   returned (or read, in copy mode), into a Parquet file of its own. By the time a
   parent row is deleted no row references it, so no ON DELETE action fires.

Each temporary table keeps the row's (tableoid, ctid), its key and the columns its
children reference, and is dropped at COMMIT (move) or before the next chunk (copy, one
snapshot for the whole job).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from archiver.bulk import BulkConnection
from archiver.errors import InputError
from archiver.ident import TableName, quote_ident
from archiver.model import KeyRange
from archiver.pgtypes import sql as pgtypes
from archiver.source.chunks import FIRST_KEY, LAST_KEY, ChunkQueries
from archiver.source.references import Aggregate, ForeignKey, aggregate
from archiver.source.tables import TableInfo, describe_table


@dataclass(frozen=True)
class Member:
    """One table of an aggregate: the root (index 0) or a referencing table."""

    table: TableInfo
    index: int  # parents first: every table after those it references
    parents: tuple[ForeignKey, ...]  # its keys pointing at other members
    keep: tuple[str, ...]  # its key and the columns its children reference

    @property
    def temp(self) -> str:
        return f"archiver_chunk_{self.index}"

    @cached_property
    def plans(self) -> list[pgtypes.ColumnPlan]:
        return pgtypes.plan_table(self.table.columns, self.table.key, self.table.numeric_as_text)

    @property
    def rows(self) -> str:
        """The member's rows collected for this chunk, as a WHERE condition."""
        if self.table.partitioned:  # ctids repeat across partitions
            return f"(tableoid, ctid) IN (SELECT archiver_tableoid, archiver_ctid FROM {self.temp})"
        return f"ctid = ANY (ARRAY (SELECT archiver_ctid FROM {self.temp}))"


@dataclass(frozen=True)
class AggregateQueries:
    """The statements of one aggregate chunk (see the module's docstring)."""

    root: ChunkQueries
    members: tuple[Member, ...]  # parents first; members[0] is the root
    graph: Aggregate

    def collect(self, *, after_key: bool, key_range: KeyRange | None, move: bool) -> list[str]:
        """Phase 1, parents first: fill each member's temporary table."""
        statements = []
        for m in self.members:
            kept = ", ".join(quote_ident(c) for c in m.keep)
            row = "tableoid AS archiver_tableoid, ctid AS archiver_ctid"
            if m.index == 0:
                select = self.root.select_chunk(
                    f"{row}, {kept}", after_key=after_key, lock=move, key_range=key_range
                )
            else:
                refs = " OR ".join(
                    f"EXISTS (SELECT FROM {self.member(k.parent).temp} p WHERE "
                    + " AND ".join(
                        f"p.{quote_ident(r)} {eq} c.{quote_ident(c)}"
                        for c, r, eq in zip(k.columns, k.referenced, k.equals, strict=True)
                    )
                    + ")"
                    for k in m.parents
                )
                select = (
                    "SELECT c.tableoid AS archiver_tableoid, c.ctid AS archiver_ctid, "
                    + ", ".join(f"c.{quote_ident(c)}" for c in m.keep)
                    + f" FROM {m.table.quoted} c WHERE {refs}"
                    + (" FOR UPDATE OF c" if move else "")
                )
            statements += [
                f"DROP TABLE IF EXISTS pg_temp.{m.temp}",
                f"CREATE TEMPORARY TABLE {m.temp} ON COMMIT DROP AS {select}",
                f"ANALYZE {m.temp}",  # so joins against it are planned on its real size
            ]
        return statements

    def take(self, m: Member, *, move: bool) -> str:
        """Phase 2, one member: its collected rows, deleted and returned or read; with
        the first and last key in PostgreSQL's order when Arrow's would differ."""
        columns = pgtypes.select_list(m.plans)
        if not m.table.key_in_arrow_order:
            texts = ", ".join(f"format('%s', {quote_ident(c.name)})" for c in m.table.key)
            columns += "".join(
                f", (SELECT json_build_array({texts})::text FROM {m.temp} ORDER BY "
                + ", ".join(f"{quote_ident(c.name)}{order}" for c in m.table.key)
                + f" LIMIT 1) AS {quote_ident(alias)}"
                for alias, order in ((FIRST_KEY, ""), (LAST_KEY, " DESC"))
            )
        if move:
            return f"DELETE FROM {m.table.quoted} WHERE {m.rows} RETURNING {columns}"
        return f"SELECT {columns} FROM {m.table.quoted} WHERE {m.rows}"

    def count_root(self) -> str:
        return f"SELECT count(*) FROM {self.members[0].temp}"

    def member(self, table: str) -> Member:
        return next(m for m in self.members if m.table.qualified == table)


def children_of(conn: BulkConnection, table: TableInfo) -> tuple[list[TableInfo], Aggregate]:
    """The tables `--with-children` moves with `table`, parents first, `table` left out
    (none when no foreign key points at it), and the foreign keys between them; a cycle or
    a child without a usable key is refused with one line, as describe_aggregate refuses
    it."""
    graph = aggregate(conn, table.qualified, table.oid)
    return [describe_table(conn, TableName.stored(name)) for name in graph.tables[1:]], graph


def describe_aggregate(conn: BulkConnection, root: ChunkQueries) -> AggregateQueries:
    """The root's aggregate, each member described and keyed; refused with one line when
    a member has no usable key or the keys form a cycle."""
    graph = aggregate(conn, root.table.qualified, root.table.oid)
    members = []
    for index, name in enumerate(graph.tables):
        info = root.table if index == 0 else describe_table(conn, TableName.stored(name))
        keep = [c.name for c in info.key] + graph.referenced_columns(name)
        members.append(
            Member(info, index, tuple(graph.parents_of(name)), tuple(dict.fromkeys(keep)))
        )
    if len(members) == 1:
        raise InputError(
            f"table {root.table.qualified} is referenced by no foreign key; "
            "--with-children is not needed"
        )
    return AggregateQueries(root, tuple(members), graph)
