"""What the planner says of an archive before it runs: the dry run's and enqueue's
estimates and the chunk statement's plan."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from archiver.bulk import BulkConnection, BulkCursor
from archiver.source.binding import bind_chunk
from archiver.source.chunks import ChunkQueries


@dataclass(frozen=True)
class QueryPlan:
    """What EXPLAIN says of the rows older than the cutoff and of the first chunk's statement."""

    rows_older: int  # the planner's estimate, from the table's statistics
    indexes: tuple[str, ...]  # indexes the chunk statement reads
    sequential_scan: bool  # the chunk statement scans the whole table


_USE_COPY = "adbc.postgresql.use_copy"  # EXPLAIN cannot run inside COPY (...) TO STDOUT


def explain_archive(
    conn: BulkConnection,
    queries: ChunkQueries,
    cutoff: str,
    chunk_rows: int,
    move: bool,
    lock_timeout: float = 0.0,
) -> QueryPlan:
    """EXPLAIN (never run) the count of rows older than the cutoff and the first chunk's
    statement, with the chunk's values bound exactly as a real chunk binds them. The
    planner folds current_setting() when it estimates, so the count uses the cutoff's
    real selectivity. Nothing is written: the transaction is rolled back. `lock_timeout`:
    seconds a table lock is waited for (0: as long as it is held)."""
    try:
        with conn.cursor() as cur:
            cur.adbc_statement.set_options(**{_USE_COPY: "false"})
            bind_chunk(cur, cutoff, None, chunk_rows, timeouts=(lock_timeout, 0.0))
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


def newer_rows(
    conn: BulkConnection, queries: ChunkQueries, cutoff: str, lock_timeout: float = 0.0
) -> tuple[bool, bool]:
    """(a row is at or after the cutoff, the table holds a row): run, not EXPLAINed, so
    only where an index leads with the cutoff column (else a scan of the table)."""
    try:
        with conn.cursor() as cur:
            bind_chunk(cur, cutoff, None, 1, timeouts=(lock_timeout, 0.0))
            cur.execute(queries.newer_rows())
            newer, any_row = cur.fetchall()[0]
    finally:
        conn.rollback()
    return bool(newer), bool(any_row)


def _explain(cur: BulkCursor, sql: str) -> dict[str, Any]:
    cur.execute(f"EXPLAIN (FORMAT JSON) {sql}")
    plan: dict[str, Any] = json.loads(cur.fetchall()[0][0])[0]["Plan"]
    return plan


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)
