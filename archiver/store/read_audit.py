"""The read audit (sql/021_reads.sql): every read of the archive and every refusal,
written by serve in batches (archiver.serve.audit), pruned past the retention, and read
by the console."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import asyncpg

from archiver.db import query

if TYPE_CHECKING:
    import psycopg

COLUMNS = (
    "at", "door", "role", "on_behalf_of", "address", "application", "statement",
    "parameters", "tables", "columns", "rows", "duration_ms", "outcome",
)  # fmt: skip


def write(conn: psycopg.Connection[Any], rows: Sequence[Sequence[Any]]) -> None:
    """Rows in COLUMNS' order, in one COPY of the caller's transaction."""
    with conn.cursor() as cur, cur.copy(query("read_audit_copy")) as copy:
        for row in rows:
            copy.write_row(row)


def rest_holders(
    conn: psycopg.Connection[Any], door: str, revoked: str, seconds: float
) -> list[tuple[str, Any]]:
    """(role, its latest load) of each who loaded a table through `door` in the last
    `seconds`, since the latest row whose statement starts with `revoked`."""
    params = {"door": door, "revoked": revoked, "seconds": seconds}
    return [(r[0], r[1]) for r in conn.execute(query("read_audit_rest_holders"), params)]


async def prune(pool: asyncpg.Pool, seconds: float, batch: int) -> int:
    """Reads older than `seconds` deleted, a batch per transaction; how many."""
    total = 0
    while True:
        done = await pool.execute(query("read_audit_prune"), seconds, batch)
        count = int(done.split()[-1])
        total += count
        if count < batch:
            return total


async def recent(
    conn: asyncpg.Connection, role: str | None, table: str | None, limit: int = 100
) -> list[dict[str, Any]]:
    """The latest reads, refusals first, of `role` and of `table` (schema.table) where given."""
    return [dict(r) for r in await conn.fetch(query("read_audit_recent"), role, table, limit)]
