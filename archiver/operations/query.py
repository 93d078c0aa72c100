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
                lambda con: engine.execute(con, sql, fmt, output, explain=explain),
            ),
        )
        return engine.write(result, fmt, output)
    location = str(settings.storage_location())
    async with db.connection(settings.database_url) as conn:
        tables = [r[0] for r in await conn.fetch(PUBLISHED, location)]
    return await asyncio.to_thread(engine.run, settings, tables, sql, fmt, output, explain=explain)
