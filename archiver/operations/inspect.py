"""What commands read of the source database besides an archive's check: a table's
qualified name, an aggregate's children, whether vacuum has run since a move."""

from __future__ import annotations

import datetime as dt

from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.ident import TableName
from archiver.source.aggregates import children_of
from archiver.source.tables import describe_table, find_table


async def qualified_table(ctx: Context, name: str) -> str:
    """`schema.table` of a table of the source database, found as enqueue finds it."""
    table = TableName.parse(name)
    qualified: str = await ctx.in_thread(
        ctx.settings.effective_source_url, lambda conn: ".".join(find_table(conn, table)[:2])
    )
    return qualified


async def aggregate_children(ctx: Context, tables: list[str]) -> dict[str, list[str]]:
    """Each table's children: the tables `--with-children` moves with it."""

    def read(conn: BulkConnection) -> dict[str, list[str]]:
        found = {}
        for table in tables:
            info = describe_table(conn, TableName.stored(table))
            found[table] = [child.qualified for child in children_of(conn, info)[0]]
        return found

    children: dict[str, list[str]] = (
        await ctx.in_thread(ctx.settings.effective_source_url, read) if tables else {}
    )
    return children


async def vacuumed_since(ctx: Context, table: str, since: dt.datetime) -> str:
    """Whether (auto)vacuum has run on `table` since `since`, as its statistics say."""
    async with ctx.source() as conn:
        row = await conn.fetchrow(
            "SELECT last_autovacuum, last_vacuum FROM pg_stat_user_tables "
            "WHERE relid = to_regclass($1)",
            TableName.stored(table).quoted,
        )
    runs = [t for t in (row or {}).values() if t is not None and t >= since]
    return f"yes, at {max(runs).isoformat()}" if runs else "not yet"
