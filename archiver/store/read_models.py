"""What the CLI's reports and the console's pages read: the ops views (sql/003), the job
lists, and each table's archive (its files, schemas, tiers, Delta table, verification
and ledger), over every state table. Every statement is named in store/read_models.sql;
writes nothing. Rows come back as dicts by column name, as the terminal and the
templates show them."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import asyncpg

from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.db import query

Rows = list[dict[str, Any]]
OPS_VIEWS = ("status_summary", "running_jobs", "failed_jobs", "archive_summary", "paused")
# the console's overview, read in one snapshot
OVERVIEW = {
    "by_table": "console_jobs_by_table",
    "running": "running_jobs",
    "failures": "console_failures",
    "paused": "paused",
    "rows_per_hour": "console_rows_per_hour",
    "waits": "console_queue_wait",
}
# a table's page, beside its summary and its Delta table
TABLE_DETAILS = {"schemas": "table_schemas", "tiers": "table_tiers", "ledger": "table_ledger"}


async def _rows(conn: asyncpg.Connection, name: str, *args: Any) -> Rows:
    return [dict(r) for r in await conn.fetch(query(name), *args)]


async def _row(conn: asyncpg.Connection, name: str, *args: Any) -> dict[str, Any] | None:
    rows = await _rows(conn, name, *args)
    return rows[0] if rows else None


async def _snapshot(conn: asyncpg.Connection, names: dict[str, str]) -> dict[str, Rows]:
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return {key: await _rows(conn, name) for key, name in names.items()}


async def ops_report(conn: asyncpg.Connection) -> dict[str, Rows]:
    """Every operator view (`archiver status`), read in one snapshot."""
    return await _snapshot(conn, {name: name for name in OPS_VIEWS})


async def overview(conn: asyncpg.Connection) -> dict[str, Rows]:
    """The console's overview (OVERVIEW's sections), read in one snapshot."""
    return await _snapshot(conn, OVERVIEW)


async def list_jobs(
    conn: asyncpg.Connection,
    status: str | None,
    table: str | None,
    limit: int,
    *,
    task: str | None = None,
    error: str | None = None,
    created_from: dt.datetime | None = None,
    created_to: dt.datetime | None = None,
    after: tuple[dt.datetime, uuid.UUID] | None = None,
) -> Rows:
    """Jobs newest first (`archiver jobs`, the console's list), `after` a page's last row."""
    at, job_id = after if after else (None, None)
    args = (status, table, limit, task, error, at, job_id, created_from, created_to)
    return await _rows(conn, "list_jobs", *args)


def count_jobs_by_status(conn: BulkConnection) -> dict[str, int]:
    """Jobs per status, on a synchronous ADBC connection (the metrics collector's thread)."""
    rows = fetch_and_rollback(conn, query("jobs_by_status"))
    return {str(status): int(count) for status, count in rows}


async def job_group(conn: asyncpg.Connection, group: str) -> Rows:
    """The jobs of one `enqueue --parallel` group."""
    return await _rows(conn, "job_group", group)


async def archive_summary(conn: asyncpg.Connection) -> Rows:
    """Each archived table: files, rows, bytes, cutoff range."""
    return await _rows(conn, "archive_summary")


async def table_summary(conn: asyncpg.Connection, table: str) -> dict[str, Any] | None:
    """One table's line of archive_summary (schema.table as catalogued), None if it has
    no archive."""
    return await _row(conn, "table_archive", table)


async def delta_table(conn: asyncpg.Connection, table: str) -> dict[str, Any] | None:
    """The Delta table of `table`, as recorded, if any."""
    return await _row(conn, "table_delta", table)


async def table_details(conn: asyncpg.Connection, table: str) -> dict[str, Any]:
    """A table's page beside its summary: its files' schemas and tiers, its ledger, its
    Delta table and its last verification (the last two a row or None)."""
    found: dict[str, Any] = {k: await _rows(conn, q, table) for k, q in TABLE_DETAILS.items()}
    found["delta"] = await delta_table(conn, table)
    found["verified"] = await _row(conn, "last_verification", table)
    found["kept"] = await _row(conn, "table_kept", table)
    return found
