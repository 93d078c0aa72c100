"""What an archive would do, from the planner's statistics, before it does anything: what
`enqueue --dry-run` prints and what a new job's progress starts from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archiver.bulk import BulkConnection
from archiver.config import Settings
from archiver.model import ArchiveRequest, Mode
from archiver.source.aggregates import AggregateQueries, describe_aggregate
from archiver.source.chunks import ChunkQueries, describe_archive
from archiver.source.explain import explain_archive
from archiver.source.partitions import PartitionAction, partitions, whole_partitions
from archiver.source.tables import TableInfo, cutoff_indexed, estimate_rows
from archiver.source.triggers import DeleteTrigger, delete_triggers

TARGET_CHUNK_BYTES = 160 * 1024 * 1024  # of table data; Arrow is about the same size
DEFAULT_CHUNK_ROWS = 100_000  # when the table has no statistics yet
MIN_CHUNK_ROWS, MAX_CHUNK_ROWS = 1_000, 2_000_000
# Parquet bytes per byte of PostgreSQL table (heap + TOAST) on the tests' reference orders
# table, as parquet.writer_options writes them (docs/operations.md). A rough guide only.
PARQUET_RATIO = 0.12


KEY, BACKLOG = "key", "backlog"  # the plans: chunks in key order, or pages in parallel
# The backlog plan where at least this share of a table's rows is older than the cutoff:
# there a job reads most of the table anyway, so reading all of it by pages costs little
# more than its old rows by key, and every core decodes and encodes.
BACKLOG_SHARE = 0.5


@dataclass(frozen=True)
class BacklogRule:
    """When a job takes the backlog plan (archive.backlog): ARCHIVER_BACKLOG_CONNECTIONS
    (below 2: never) and ARCHIVER_BACKLOG_MIN_ROWS."""

    connections: int = 0
    min_rows: int = 100_000

    @classmethod
    def of(cls, settings: Settings) -> BacklogRule:
        return cls(settings.backlog_connections, settings.backlog_min_rows)


NO_BACKLOG = BacklogRule()  # the key plan always


def choose_plan(
    rule: BacklogRule,
    request: ArchiveRequest,
    table: TableInfo,
    older: int,
    total: int,
    *,
    throttled: bool = False,
) -> tuple[str, str]:
    """The plan of a job (KEY or BACKLOG) from the planner's estimates of its old rows
    (`older`) and of the table's (`total`), and why: what `--dry-run` prints."""
    share = f"~{older:,} of ~{total:,} rows older than the cutoff"
    if request.pages is not None:  # a share of a backlog split by enqueue (split_pages)
        first, end, parts = request.pages.first, request.pages.end, request.pages.parts
        lanes = max(1, rule.connections)
        return BACKLOG, (
            f"pages {first}-{'end' if end is None else end - 1}, one of {parts} shares of a "
            f"--parallel backlog, on {lanes} connection{'s' if lanes > 1 else ''} ({share})"
        )
    refusals = (
        (rule.connections < 2, "ARCHIVER_BACKLOG_CONNECTIONS is below 2"),
        (request.with_children, "with its children"),
        (table.partitioned or request.partition is not None, "a partitioned table"),
        (request.key_range is not None, "one key range of a --parallel archive"),
        (not table.key_in_arrow_order, "a key whose order PostgreSQL decides (collation)"),
        (throttled, "a rate limit paces it"),
        (
            older < rule.min_rows,
            f"{share}: fewer than ARCHIVER_BACKLOG_MIN_ROWS ({rule.min_rows:,})",
        ),
        (older < BACKLOG_SHARE * total, f"{share}: under half the table"),
    )
    for refused, why in refusals:
        if refused:
            return KEY, f"chunks in key order ({why})"
    return BACKLOG, f"pages in parallel on {rule.connections} connections ({share})"


def unindexed_warning(table: str, column: str) -> str:
    """What enqueue and its dry run say of a cutoff column no index leads with."""
    return (
        f"no index on {table} leads with {column}: every job reads the whole table to "
        f"find the rows older than the cutoff (an index on ({column}) makes it read "
        "only those)"
    )


MOST = 0.5  # a cutoff taking this share of a table's rows or more is said so in words


def share_warning(
    table: str, cutoff: str, older: int, total: int, newer: tuple[bool, bool] | None
) -> str | None:
    """What enqueue and its dry run say of a cutoff that takes all or most of a table:
    `older` and `total` the planner's estimates, `newer` (a row is at or after the
    cutoff, the table holds a row) where an index could tell."""
    if newer is not None and newer[1] and not newer[0]:
        return (
            f"every row of {table} is older than the cutoff ({cutoff}): the archive takes "
            "the whole table"
        )
    if total > 0 and older >= MOST * total:
        return (
            f"the cutoff ({cutoff}) takes most of {table}: ~{older:,} of its ~{total:,} rows "
            f"(~{min(100, round(100 * older / total))}%, planner estimates)"
        )
    return None


def chunk_rows_for_width(width: int) -> int:
    """Rows per chunk for rows of `width` table bytes: chunks of about TARGET_CHUNK_BYTES."""
    if width <= 0:
        return DEFAULT_CHUNK_ROWS
    return max(MIN_CHUNK_ROWS, min(MAX_CHUNK_ROWS, TARGET_CHUNK_BYTES // width))


@dataclass(frozen=True)
class ChildPlan:
    """A referencing table of an aggregate, as the planner's statistics see it."""

    table: str
    rows: int  # its rows referencing the archived rows, assuming an even spread
    unindexed: tuple[str, ...]  # its foreign keys no index leads with: a scan per chunk

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "rows": self.rows, "unindexed_keys": list(self.unindexed)}


@dataclass(frozen=True)
class ArchivePlan:
    table: str
    rows: int  # rows older than the cutoff, as the planner estimates them
    chunk_rows: int
    chunks: int
    parquet_bytes: int | None  # rough: table bytes per row x PARQUET_RATIO; None without stats
    indexes: tuple[str, ...]  # indexes the chunk statement uses
    sequential_scan: bool  # the chunk statement scans the whole table
    children: tuple[ChildPlan, ...] = ()  # --with-children: the aggregate's other tables
    # move mode on a range-partitioned table: (partition, bytes, rows, taken whole), and
    # what becomes of those taken whole (drop or detach)
    partitions: tuple[tuple[str, int, int, bool], ...] = ()
    partition_action: PartitionAction = PartitionAction.ROWS
    triggers: tuple[DeleteTrigger, ...] = ()  # move mode: fire once per moved row
    cutoff_column: str = ""
    cutoff_indexed: bool = True  # an index leads with it (else a job scans the table)
    plan: str = KEY  # KEY or BACKLOG (choose_plan), and why
    plan_reason: str = ""

    @property
    def rows_archived(self) -> int:
        """The rows of every table the job archives: what its progress counts."""
        return self.rows + sum(c.rows for c in self.children)

    @property
    def files(self) -> int:
        """The files the job writes, one a chunk per table with rows: what its progress
        counts as chunks (an aggregate's chunk writes several)."""
        return self.chunks * (1 + sum(1 for c in self.children if c.rows))

    def to_json(self) -> dict[str, Any]:
        return {
            "children": [c.to_json() for c in self.children],
            "partitions": [
                {"partition": n, "bytes": b, "rows": r, "whole": w}
                for n, b, r, w in self.partitions
            ],
            "partition_action": str(self.partition_action),
            "table": self.table,
            "rows": self.rows,
            "plan": self.plan,
            "plan_reason": self.plan_reason,
            "chunk_rows": self.chunk_rows,
            "chunks": self.chunks,
            "parquet_bytes": self.parquet_bytes,
            "uses_index": bool(self.indexes),
            "indexes": list(self.indexes),
            "sequential_scan": self.sequential_scan,
            "cutoff_indexed": self.cutoff_indexed,
            "delete_triggers": [
                {"table": t.table, "name": t.name, "timing": t.timing} for t in self.triggers
            ],
        }


def plan_archive(
    conn: BulkConnection,
    request: ArchiveRequest,
    queries: ChunkQueries | None = None,
    *,
    list_triggers: bool = False,
    aggregate: AggregateQueries | None = None,
    backlog: BacklogRule = NO_BACKLOG,
    throttled: bool = False,
) -> ArchivePlan:
    """EXPLAIN the archive on the source connection; writes nothing. `list_triggers`: list a
    move's row-level DELETE triggers too (a dry run's; a job's start does not need them).
    `aggregate`: a --with-children job's, as the job described it (else described here).
    `backlog`, `throttled`: what choose_plan weighs beside the estimates."""
    if queries is None:
        queries = describe_archive(
            conn, request.table, request.column, request.mode, request.with_children
        )
    total, width = estimate_rows(conn, queries.table)
    # With children, a root row weighs its own width plus its share of each child's rows
    # (children per root row, from the statistics): chunks stay ~TARGET_CHUNK_BYTES.
    shares: list[tuple[str, float, tuple[str, ...]]] = []
    aggregate_width = width
    deleted_from = [queries.table]
    if request.with_children:
        agg = aggregate or describe_aggregate(conn, queries)
        deleted_from = [m.table for m in agg.members]
        for m in agg.members[1:]:
            rows, child_width = estimate_rows(conn, m.table)
            share = rows / total if total > 0 else 0.0
            aggregate_width += int(share * child_width)
            unindexed = tuple(k.name for k in m.parents if not k.indexed)
            shares.append((m.table.qualified, share, unindexed))
    chunk_rows = request.chunk_rows or chunk_rows_for_width(aggregate_width)
    plan = explain_archive(
        conn, queries, request.cutoff, chunk_rows, move=request.mode == Mode.MOVE
    )
    older = plan.rows_older
    # One of a split archive's ranges holds its share of them (split makes them even).
    # Not EXPLAINed with the range: the planner takes the key range and the cutoff as
    # independent, and keys and dates mostly rise together (9,124 estimated that way for
    # a range of 4,240 of the reference table's old rows).
    if request.key_range is not None and request.key_range.parts:
        older = -(-older // request.key_range.parts)
    if request.pages is not None:
        older = -(-older // request.pages.parts)
    action, parts = _partitions(conn, request, queries)
    chosen, why = choose_plan(backlog, request, queries.table, older, total, throttled=throttled)
    return ArchivePlan(
        table=queries.table.qualified,
        rows=older,
        chunk_rows=chunk_rows,
        # the backlog plan reads at least a range per connection
        chunks=max(-(-older // chunk_rows), backlog.connections if chosen == BACKLOG else 0),
        parquet_bytes=int(older * aggregate_width * PARQUET_RATIO) if aggregate_width > 0 else None,
        indexes=plan.indexes,
        sequential_scan=plan.sequential_scan,
        children=tuple(
            ChildPlan(table, int(older * share), unindexed) for table, share, unindexed in shares
        ),
        partitions=parts,
        partition_action=action,
        triggers=tuple(delete_triggers(conn, deleted_from))
        if list_triggers and request.mode == Mode.MOVE
        else (),
        cutoff_column=queries.cutoff_column.name,
        cutoff_indexed=cutoff_indexed(conn, queries.table, queries.cutoff_column),
        plan=chosen,
        plan_reason=why,
    )


def _partitions(
    conn: BulkConnection, request: ArchiveRequest, queries: ChunkQueries
) -> tuple[PartitionAction, tuple[tuple[str, int, int, bool], ...]]:
    action, _, _ = whole_partitions(conn, request, queries)
    if action == PartitionAction.ROWS or request.partition is not None:
        return action, ()
    found = partitions(conn, queries.table, queries.cutoff_column, request.cutoff) or []
    return action, tuple((p.qualified, p.bytes, p.rows, p.whole) for p in found if p.older_rows)
