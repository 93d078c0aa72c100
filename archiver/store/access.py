"""Archive-only access (sql/021_reads.sql): the roles that may read a table's archive
whatever the live table grants them, granted by `archiver access` and added by serve to
the grants it mirrors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncpg

from archiver.db import query

if TYPE_CHECKING:
    import psycopg


async def grant(
    conn: asyncpg.Connection, table: str, role: str, columns: list[str] | None, by: str
) -> None:
    await conn.execute(query("access_grant"), table, role, columns, by)


async def revoke(conn: asyncpg.Connection, table: str, role: str) -> bool:
    """False when `role` had no archive-only access to `table`."""
    return bool(await conn.execute(query("access_revoke"), table, role) != "DELETE 0")


async def every(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(query("access_list"))]


def mirrored(conn: psycopg.Connection[Any]) -> list[tuple[str, str, list[str] | None]]:
    """(schema.table, role, columns or None) of each archive-only grant (serve's read)."""
    rows = conn.execute(query("access_list")).fetchall()
    return [(str(r[0]), str(r[1]), r[2]) for r in rows]
