"""`archiver access`: archive-only readers (an auditor who reads a table's archive and
none of its live rows), checked before anything is recorded: the table catalogued, the
role one of the catalog server's, the columns the table's. serve and attach mirror them
beside the live tables' grants (archiver.serve.privileges)."""

from __future__ import annotations

from typing import Any

from archiver.context import Context
from archiver.errors import InputError
from archiver.ident import TableName
from archiver.store import access, archive_files
from archiver.store.audit import actor


async def _catalogued(ctx: Context, table: str) -> str:
    """`table` as the catalog names it (schema.table): an archived table, or a live one
    not archived yet (attach's, say); one line saying it is neither."""
    name = TableName.parse(table)
    async with ctx.catalog() as conn:
        found = await archive_files.catalogued_tables(conn, name.name)
    if name.schema is not None:
        found = [t for t in found if t == str(name)]
    if len(found) == 1:
        return found[0]
    if not found:
        async with ctx.source() as conn:
            live = await conn.fetchval(
                "SELECT n.nspname || '.' || c.relname FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')",
                name.sql,
            )
        if live is not None:
            return str(live)
    said = ", ".join(found) if found else "none"
    raise InputError(
        f"access: {table} is not one archived or live table (archived of that name: {said})"
    )


async def grant(ctx: Context, table: str, role: str, columns: list[str] | None) -> str:
    named = await _catalogued(ctx, table)
    async with ctx.catalog() as conn:
        if not await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role
        ):
            raise InputError(f"access: role {role} does not exist")
    if columns:
        async with ctx.source() as conn:
            present = {
                r[0]
                for r in await conn.fetch(
                    "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) "
                    "AND attnum > 0 AND NOT attisdropped",
                    TableName.stored(named).sql,
                )
            }
        unknown = sorted(set(columns) - present)
        if unknown:
            raise InputError(f"access: {named} has no column {', '.join(unknown)}")
    async with ctx.catalog() as conn:
        await access.grant(conn, named, role, sorted(set(columns)) if columns else None, actor())
    return f"{role} may read the archive of {named}" + (
        f" ({', '.join(sorted(set(columns)))})" if columns else ""
    )


async def revoke(ctx: Context, table: str, role: str) -> str:
    named = await _catalogued(ctx, table)
    async with ctx.catalog() as conn:
        if not await access.revoke(conn, named, role):
            raise InputError(f"access: {role} had no archive-only access to {named}")
    return f"{role} no longer reads the archive of {named} beyond the live table's grants"


async def listed(ctx: Context) -> list[dict[str, Any]]:
    async with ctx.catalog() as conn:
        return await access.every(conn)
