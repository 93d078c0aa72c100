"""`archiver query`: which tables the query can name (those with a Delta table), then
the query itself (archiver.query) in a thread."""

from __future__ import annotations

import asyncio

from archiver import db
from archiver.bulk import on_source
from archiver.config import Settings

PUBLISHED = (
    "SELECT source_table FROM delta_tables WHERE storage_url = $1 AND published > 0 "
    "ORDER BY source_table"
)
# committed files the publisher left out of their Delta table (a type Delta cannot hold,
# written by an older release): a query over the Delta table would miss their rows
LEFT_OUT = """
SELECT source_table, count(*) FILTER (WHERE delta_refused IS NOT NULL AND NOT offline),
       min(delta_refused), count(*) FILTER (WHERE offline)
FROM archive_files
WHERE storage_url = $1 AND state = 'committed' AND delta
  AND (delta_refused IS NOT NULL OR offline)
GROUP BY 1
"""


async def query(
    settings: Settings,
    sql: str,
    fmt: str,
    output: str | None,
    *,
    explain: bool,
    with_live: bool = False,
) -> str | None:
    from archiver import query as engine

    engine.refuse_writes(sql)  # before anything runs
    if with_live:
        from archiver import live

        engine.check_format(fmt, output)
        result = await on_source(
            settings.database_url,
            lambda conn: live.query(
                conn,
                settings,
                sql,
                lambda con: engine.execute(con, sql, fmt, output, explain=explain),
            ),
        )
        return engine.write(result, fmt, output)
    location = str(settings.storage_location())
    async with db.connection(settings.database_url) as conn:
        tables = [r[0] for r in await conn.fetch(PUBLISHED, location)]
        missing = {
            table: (
                f"query: {offline} archived files of {table} are in the Archive tier and "
                f"cannot be read: `archiver rehydrate --table {table}`; nothing returned"
                if offline
                else f"query: {n} archived files of {table} are not in its Delta table "
                f"({why}): its rows there would be missing; --with-live reads every "
                "catalogued file"
            )
            for table, n, why, offline in await conn.fetch(LEFT_OUT, location)
        }
    return await asyncio.to_thread(
        engine.run, settings, tables, sql, fmt, output, explain=explain, refused=missing
    )
