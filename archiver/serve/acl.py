"""The grants of tables, columns, schemas and a database, read from a PostgreSQL
database's catalogs and made so in another (or the same) by GRANT and REVOKE: what
archiver.serve.privileges mirrors from the live tables onto the definitions database and
onto what `archiver attach` made. Only SELECT, USAGE and CONNECT: the archive is read,
never written. Each grant is a tuple of its object's names and the grantee's (PUBLIC as
'')."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

PUBLIC = ""  # aclexplode's grantee 0

# (schema, table, grantee) of each SELECT on a served table; (schema, table, column,
# grantee) of each on one of its columns; (schema, grantee) of USAGE; (grantee,) of CONNECT
_TABLES = """
SELECT n.nspname, c.relname, coalesce(pg_get_userbyid(nullif(a.grantee, 0)), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
WHERE a.privilege_type = 'SELECT'
  AND (n.nspname, c.relname) IN (SELECT * FROM unnest(%(schemas)s::text[], %(tables)s::text[]))
"""
_COLUMNS = """
SELECT n.nspname, c.relname, att.attname, coalesce(pg_get_userbyid(nullif(a.grantee, 0)), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute att ON att.attrelid = c.oid AND att.attnum > 0 AND NOT att.attisdropped
CROSS JOIN LATERAL aclexplode(att.attacl) a
WHERE a.privilege_type = 'SELECT'
  AND (n.nspname, c.relname) IN (SELECT * FROM unnest(%(schemas)s::text[], %(tables)s::text[]))
"""
_SCHEMAS = """
SELECT n.nspname, coalesce(pg_get_userbyid(nullif(a.grantee, 0)), '')
FROM pg_namespace n CROSS JOIN LATERAL aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
WHERE a.privilege_type = 'USAGE' AND n.nspname = ANY(%(schema_names)s::text[])
"""
_CONNECT = """
SELECT coalesce(pg_get_userbyid(nullif(a.grantee, 0)), '')
FROM pg_database d CROSS JOIN LATERAL aclexplode(coalesce(d.datacl, acldefault('d', d.datdba))) a
WHERE a.privilege_type = 'CONNECT' AND d.datname = {database}
"""
ROLES = "SELECT rolname FROM pg_roles"


@dataclass
class Grants:
    """Who may read what: each a set of (object..., grantee) with PUBLIC as ''."""

    tables: set[tuple[str, str, str]] = field(default_factory=set)
    columns: set[tuple[str, str, str, str]] = field(default_factory=set)
    schemas: set[tuple[str, str]] = field(default_factory=set)
    connect: set[tuple[str]] = field(default_factory=set)


def _grantee(name: str) -> sql.Composable:
    return sql.SQL("PUBLIC") if name == PUBLIC else sql.Identifier(name)


def apply(
    target: psycopg.Connection[Any],
    current: Grants,
    wanted: Grants,
    me: str,
    database: str | None = None,
) -> int:
    """GRANTs and REVOKEs that make `target`'s grants `wanted`, in one transaction: how
    many. `me` (the objects' owner) is never granted or revoked anything; `database`,
    where CONNECT is mirrored too."""
    statements: list[sql.Composed] = []

    def change(
        verb: str, rows: Iterable[tuple[str, ...]], what: Callable[..., sql.Composed]
    ) -> None:
        word = "GRANT" if verb == "grant" else "REVOKE"
        to = "TO" if verb == "grant" else "FROM"
        for row in sorted(rows):
            if row[-1] != me:
                statements.append(sql.SQL("{} {} {} {}").format(
                    sql.SQL(word), what(*row[:-1]), sql.SQL(to), _grantee(row[-1])))  # fmt: skip

    def table(schema: str, name: str) -> sql.Composed:
        return sql.SQL("SELECT ON TABLE {}").format(sql.Identifier(schema, name))

    def column(schema: str, name: str, col: str) -> sql.Composed:
        return sql.SQL("SELECT ({}) ON TABLE {}").format(
            sql.Identifier(col), sql.Identifier(schema, name)
        )

    def schema(name: str) -> sql.Composed:
        return sql.SQL("USAGE ON SCHEMA {}").format(sql.Identifier(name))

    def connect() -> sql.Composed:
        return sql.SQL("CONNECT ON DATABASE {}").format(sql.Identifier(database or ""))

    for verb, a, b in (("revoke", current, wanted), ("grant", wanted, current)):
        change(verb, a.tables - b.tables, table)
        change(verb, a.columns - b.columns, column)
        change(verb, a.schemas - b.schemas, schema)
        if database is not None:
            change(verb, a.connect - b.connect, connect)
    if statements:
        with target.transaction():
            for statement in statements:
                target.execute(statement)
    return len(statements)


def keys_of(tables: Iterable[tuple[str, str]]) -> dict[str, Any]:
    listed = sorted(set(tables))
    return {
        "schemas": [s for s, _ in listed],
        "tables": [t for _, t in listed],
        "schema_names": sorted({s for s, _ in listed}),
    }


def read(conn: psycopg.Connection[Any], keys: dict[str, Any], database: str | None) -> Grants:
    """The grants `conn`'s database holds on the tables and schemas of `keys`, and CONNECT
    on `database` where given."""
    connect = sql.SQL(_CONNECT).format(database=sql.Literal(database))
    return Grants(
        {tuple(r) for r in conn.execute(_TABLES, keys)},
        {tuple(r) for r in conn.execute(_COLUMNS, keys)},
        {tuple(r) for r in conn.execute(_SCHEMAS, keys)},
        {tuple(r) for r in conn.execute(connect)} if database is not None else set(),
    )
