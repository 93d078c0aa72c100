"""archive_ledger, the operations that take rows out of the archive or rewrite its files
(restore, purge, erase, convert, compact): the only code that writes it. Every statement
is named in store/ledger.sql. An operation runs on its synchronous ADBC connection; its
row's lock is the session's, so a dead operation is told from a live one by whether its
lock is free (archiver.ledger, which runs the operations, says how)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from archiver.bulk import BulkConnection, Row, fetch_and_rollback, run_in_transaction
from archiver.db import query


def begin(
    conn: BulkConnection,
    operation: str,
    actor: str,
    storage_url: str,
    tables: list[str],
    request: dict[str, Any],
) -> int:
    """The operation's row, in the open transaction, its lock taken by this session:
    its id."""
    rows = run_in_transaction(
        conn,
        query("ledger_begin"),
        (operation, actor, storage_url, json.dumps(tables), json.dumps(request)),
    )
    return int(rows[0][0])


def lock_held(conn: BulkConnection, operation: int) -> bool:
    """Whether this session still holds the operation's lock."""
    return bool(run_in_transaction(conn, query("ledger_held"), (operation,))[0][0])


def unlock(conn: BulkConnection, operation: int) -> None:
    run_in_transaction(conn, query("ledger_unlock"), (operation,))


def intent_of(conn: BulkConnection, operation: int) -> str | None:
    """The intent an operation recorded (JSON), if any; read and rolled back."""
    text = fetch_and_rollback(conn, query("ledger_intent_of"), (operation,))[0][0]
    return None if text is None else str(text)


def take_dead(conn: BulkConnection, storage_url: str) -> list[Row]:
    """In the open transaction: the running operations on `storage_url` whose lock was
    free (left by a dead process), each lock now taken by this session -- id, tables
    (JSON), source transaction, intent."""
    return run_in_transaction(conn, query("ledger_running"), (storage_url,))


def record_intent(
    conn: BulkConnection, operation: int, source_xid: str, intent: dict[str, Any]
) -> None:
    """What `settle` will do once the source transaction `source_xid` commits."""
    run_in_transaction(conn, query("ledger_intent"), (operation, source_xid, json.dumps(intent)))


def done(conn: BulkConnection, operation: int, rows: int, detail: dict[str, Any]) -> None:
    run_in_transaction(conn, query("ledger_done"), (operation, rows, json.dumps(detail)))


def abandon(conn: BulkConnection, operation: int) -> None:
    """A dead operation's row, closed by the sweep (what it wrote undone first)."""
    run_in_transaction(conn, query("ledger_abandon"), (operation,))


async def sweep_tables(pool: asyncpg.Pool, storage_url: str) -> list[str]:
    """Tables on `storage_url` the ledger sweep may have work on: those of operations
    still running, and those with retired files whose blobs can go."""
    return [r[0] for r in await pool.fetch(query("sweep_tables"), storage_url)]


async def prune(pool: asyncpg.Pool, retention_seconds: float, batch: int) -> int:
    """The finished housekeeping operations (compactions, conversions) older than the
    retention period: how many went (up to `batch`)."""
    status = await pool.execute(query("prune_ledger"), retention_seconds, batch)
    return int(status.split()[-1])
