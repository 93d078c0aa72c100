"""One publisher per Delta table: a session advisory lock per (storage, table), held
across the publisher's transactions (delta_lock in store/publications.sql); taken with or without
a limit on the wait, checked before each Delta commit, released at the end. The one
module that takes or releases it: the publisher, a reaping of retired files (which must
not run while a publication adds files) and a rehydration bringing files back into the
table take it here, on an ADBC or (`atake`, `arelease`) an asyncpg session."""

from __future__ import annotations

from typing import Any

import adbc_driver_manager
import asyncpg

from archiver.bulk import BulkConnection, Row
from archiver.db import query
from archiver.errors import PublisherBusy

LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout ran out


def _rows(conn: BulkConnection, sql: str, params: tuple[Any, ...] = ()) -> list[Row]:
    """In the connection's open transaction (a SET must outlive the statement)."""
    with conn.cursor() as cur:
        cur.execute(sql, params or None)
        return cur.fetchall() if cur.description is not None else []


def take(conn: BulkConnection, url: str, table: str, wait: float | None = None) -> None:
    """Take `table`'s publisher lock, waiting at most `wait` seconds for it (None: as
    long as it takes), else PublisherBusy. The limit is PostgreSQL's lock_timeout, so
    the server itself stops the wait."""
    if wait is None:
        _rows(conn, query("delta_lock"), (url, table))
        conn.commit()
        return
    try:
        _rows(conn, f"SET lock_timeout = {max(1, int(wait * 1000))}")
        _rows(conn, query("delta_lock"), (url, table))
    except adbc_driver_manager.Error as exc:
        conn.rollback()
        if getattr(exc, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            raise PublisherBusy(table, wait) from None
        raise
    _rows(conn, "RESET lock_timeout")
    conn.commit()


def held(conn: BulkConnection, url: str, table: str) -> bool:
    """Whether this session still holds `table`'s publisher lock."""
    found = bool(_rows(conn, query("delta_locked"), (url, table))[0][0])
    conn.commit()
    return found


def release(conn: BulkConnection, url: str, table: str) -> None:
    """Release the lock (after rolling back whatever was left open)."""
    conn.rollback()
    _rows(conn, query("delta_unlock"), (url, table))
    conn.commit()


def try_take(conn: BulkConnection, url: str, table: str) -> bool:
    """Take the lock if it is free now; whether it was taken."""
    try:
        return bool(_rows(conn, query("delta_try_lock"), (url, table))[0][0])
    finally:
        conn.rollback()  # a session's lock: it outlives the transaction


async def atake(conn: asyncpg.Connection, url: str, table: str) -> None:
    """`take`, waiting as long as it takes, on an asyncpg session."""
    await conn.execute(query("delta_lock"), url, table)


async def arelease(conn: asyncpg.Connection, url: str, table: str) -> None:
    """`release` on an asyncpg session, in its transaction if one is open."""
    await conn.execute(query("delta_unlock"), url, table)
