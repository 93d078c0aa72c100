"""What an archive would do, from the planner's statistics, before it does anything: what
`enqueue --dry-run` prints and what a new job's progress starts from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archiver import source
from archiver.db import BulkConnection
from archiver.model import ArchiveRequest, Mode

TARGET_CHUNK_BYTES = 160 * 1024 * 1024  # of table data; Arrow is about the same size
DEFAULT_CHUNK_ROWS = 100_000  # when the table has no statistics yet
MIN_CHUNK_ROWS, MAX_CHUNK_ROWS = 1_000, 2_000_000
# zstd Parquet bytes per byte of PostgreSQL table (heap + TOAST), measured on the reference
# orders table (100k rows: 190 table bytes, 40 Parquet bytes per row). A rough guide only.
PARQUET_RATIO = 0.21


def chunk_rows_for_width(width: int) -> int:
    """Rows per chunk for rows of `width` table bytes: chunks of about TARGET_CHUNK_BYTES."""
    if width <= 0:
        return DEFAULT_CHUNK_ROWS
    return max(MIN_CHUNK_ROWS, min(MAX_CHUNK_ROWS, TARGET_CHUNK_BYTES // width))


@dataclass(frozen=True)
class ArchivePlan:
    table: str
    rows: int  # rows older than the cutoff, as the planner estimates them
    chunk_rows: int
    chunks: int
    parquet_bytes: int | None  # rough: table bytes per row x PARQUET_RATIO; None without stats
    indexes: tuple[str, ...]  # indexes the chunk statement uses
    sequential_scan: bool  # the chunk statement scans the whole table

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": self.rows,
            "chunk_rows": self.chunk_rows,
            "chunks": self.chunks,
            "parquet_bytes": self.parquet_bytes,
            "uses_index": bool(self.indexes),
            "indexes": list(self.indexes),
            "sequential_scan": self.sequential_scan,
        }


def plan_archive(
    conn: BulkConnection, request: ArchiveRequest, queries: source.ChunkQueries | None = None
) -> ArchivePlan:
    """EXPLAIN the archive on the source connection; writes nothing."""
    if queries is None:
        queries = source.describe_archive(conn, request.table, request.column, request.mode)
    _, width = source.estimate_rows(conn, queries.table)
    chunk_rows = request.chunk_rows or chunk_rows_for_width(width)
    plan = source.explain_archive(
        conn, queries, request.cutoff, chunk_rows, move=request.mode == Mode.MOVE
    )
    return ArchivePlan(
        table=queries.table.qualified,
        rows=plan.rows_older,
        chunk_rows=chunk_rows,
        chunks=-(-plan.rows_older // chunk_rows),
        parquet_bytes=int(plan.rows_older * width * PARQUET_RATIO) if width > 0 else None,
        indexes=plan.indexes,
        sequential_scan=plan.sequential_scan,
    )
