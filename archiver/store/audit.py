"""Who changed what in the queue (sql/016_audit.sql): one row per operator action, from
the console or the CLI, written by the caller in the transaction of the change, so the
row exists exactly when the change does."""

from __future__ import annotations

import getpass
import socket
from typing import Any

import asyncpg

from archiver.db import query


def actor() -> str:
    """Who runs this command, for the ledger and the audit: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


async def record(
    conn: asyncpg.Connection,
    action: str,
    target: str,
    outcome: str,
    *,
    who: str | None = None,
    address: str | None = None,
) -> None:
    """`who` and `address`: the console's person and client; the CLI's user@host else."""
    via = "cli" if who is None else "console"
    await conn.execute(query("audit_record"), who or actor(), address, via, action, target, outcome)


async def of_target(conn: asyncpg.Connection, target: str, limit: int = 20) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(query("audit_of_target"), target, limit)]
