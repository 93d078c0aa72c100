"""`archiver query`: the query (archiver.query) over views of the archive made at one
catalog snapshot, in a thread holding an ADBC connection."""

from __future__ import annotations

from archiver.context import Context
from archiver.query import engine, statement
from archiver.query.answer import answer


async def query(
    ctx: Context,
    sql: str,
    fmt: str,
    output: str | None,
    *,
    explain: bool,
    with_live: bool = False,
    local_files: bool = False,
) -> str | None:

    statement.refuse_writes(sql)  # before anything runs
    engine.check_format(fmt, output)
    result = await ctx.in_thread(
        ctx.settings.database_url,
        lambda conn: answer(
            conn,
            ctx.settings,
            sql,
            lambda con: engine.execute(con, sql, fmt, output, explain=explain, live=with_live),
            live=with_live,
            local_files=local_files,
        ),
    )
    return engine.write(result, fmt, output)
