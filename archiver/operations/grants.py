"""The GRANT script for a role, from what the source database says of the tables it will
archive (see archiver.grants for the statements themselves)."""

from __future__ import annotations

from archiver import db
from archiver.bulk import BulkConnection
from archiver.config import ConfigFile
from archiver.context import Context
from archiver.errors import InputError
from archiver.grants import TableAccess, grant_script
from archiver.ident import TableName
from archiver.model import Mode
from archiver.operations.enqueue import checked_policies
from archiver.source.aggregates import children_of
from archiver.source.tables import TableInfo, describe_table
from archiver.source.triggers import DeleteTrigger, delete_triggers


async def grants(ctx: Context, role: str, tables: list[str], config: ConfigFile | None) -> str:
    """The GRANT script for `role`: the queue, and each of `tables` (default: the config
    file's policy tables) with the tables it is moved with."""

    if not role.strip():
        raise InputError("--role: give the role workers and the scheduler log in as")
    # (table, with its children, moved): a named table's mode is not known, so it gets
    # what a move needs, and a table referenced by foreign keys only moves with them
    wanted = [(TableName.parse(t), True, True) for t in tables]
    if not wanted and config is not None:
        wanted = [
            (p.table, p.with_children, p.mode == Mode.MOVE)
            for p, _ in await checked_policies(ctx, config)
        ]

    def describe(
        conn: BulkConnection,
    ) -> tuple[list[TableAccess], set[str], list[DeleteTrigger], list[str]]:
        """Each table to grant on (children marked), the schemas of the types and operators
        archiver names by schema, the DELETE triggers that will run as the role, and why
        an aggregate could not be read."""
        access: dict[str, TableAccess] = {}
        moved: dict[str, TableInfo] = {}
        refused: list[str] = []
        schemas: set[str] = set()
        for name, with_children, move in wanted:
            info = describe_table(conn, name)
            members = [info]
            if with_children:
                try:
                    children, graph = children_of(conn, info)
                except InputError as exc:
                    refused.append(f"{info.qualified}: --with-children is refused: {exc}")
                else:
                    members += children
                    schemas |= {s for k in graph.keys for s, _ in k.operators} - {"pg_catalog"}
            for m in members:
                schemas |= {c.base_schema for c in m.key if c.base_schema is not None}
                child_of = "" if m is info else info.qualified
                key = tuple(c.name for c in m.key)
                access.setdefault(m.qualified, TableAccess(m.schema, m.name, key, child_of))
                if move:
                    moved.setdefault(m.qualified, m)
        triggers = delete_triggers(conn, moved.values()) if moved else []
        return list(access.values()), schemas, triggers, refused

    described = (
        await ctx.in_thread(ctx.settings.effective_source_url, describe)
        if wanted
        else ([], set(), [], [])
    )
    access, schemas, triggers, refused = described
    async with ctx.catalog() as conn:
        schema = await conn.fetchval(db.query("queue_schema"))
    if schema is None:
        raise InputError("no archiver schema in the queue database; run `archiver migrate` first")
    return grant_script(
        str(schema),
        role,
        access,
        ctx.settings.same_database,
        type_schemas=sorted(schemas),
        triggers=triggers,
        refused=refused,
    )
