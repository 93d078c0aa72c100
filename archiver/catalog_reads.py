"""What the catalog says is archived, read from the event loop (asyncpg): a job's files,
the catalogued tables a name means, the files a selection names. The queue is
archiver.jobqueue; what a job's thread writes to the catalog is archiver.catalog."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import asyncpg

from archiver.db import query
from archiver.ident import TableName
from archiver.model import CatalogFile


async def job_files(conn: asyncpg.Connection, job_id: uuid.UUID) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(query("job_files"), job_id)]


async def catalogued_tables(conn: asyncpg.Connection, table: str) -> list[str]:
    """`table`, as a user writes it (PostgreSQL's syntax, see ident.TableName.parse), as
    the catalog names it: schema.table when the schema is given, else every catalogued
    schema.table of that bare name (a loose index scan, not a read of every file)."""
    name = TableName.parse(table)
    if name.schema is not None:
        return [str(name)]
    return [r[0] for r in await conn.fetch(query("catalogued_tables_named"), name.name)]


async def archived_files(
    conn: asyncpg.Connection,
    *,
    job_id: uuid.UUID | None = None,
    table: str | None = None,
    cutoff_from: dt.datetime | None = None,
    cutoff_to: dt.datetime | None = None,
    state: str | None = None,
) -> list[CatalogFile]:
    """Catalogued files for restore and verify, in archive order. `table`: schema.table,
    or a bare name matching it in any schema."""
    tables = None if table is None else await catalogued_tables(conn, table)
    rows = await conn.fetch(query("archived_files"), job_id, tables, cutoff_from, cutoff_to, state)
    return [CatalogFile.from_row(r) for r in rows]
