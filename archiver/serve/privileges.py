"""What a person may read of the archive is what PostgreSQL lets them read of the live
table. The live tables' SELECT privileges (table and column), their schemas' USAGE and
the application database's CONNECT are mirrored onto the definitions database's tables,
schemas and database every MIRROR_SECONDS; then every statement a person sends is
checked by PostgreSQL itself, in that person's own session there (archiver.serve.signin):
`EXPLAIN` of the statement starts the executor, which checks each table and column it
reads (`*`, WHERE, JOIN, ORDER BY, subqueries, CTEs) and refuses with PostgreSQL's own
42501. A statement PostgreSQL cannot parse or plan is refused, not waved through.

Archive-only readers (`archiver access`, archive_access) are added to what is mirrored,
with their schema's USAGE and the database's CONNECT; the mirroring never takes them away.

Row security is the one rule the empty definitions tables cannot carry: a person whom a
live table's row security applies to (not its owner, or a member of the owner's role,
where it is not forced; not BYPASSRLS) is refused a statement that reads it."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from archiver.errors import first_line
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.serve.definitions import FILE_ID, Definitions
from archiver.serve.wire import SqlError
from archiver.store import access

log = logging.getLogger(__name__)

MIRROR_SECONDS = 2.0  # a GRANT or REVOKE on a live table is in force within this, plus a pass
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
_ROW_SECURITY = """
SELECT n.nspname, c.relname, pg_get_userbyid(c.relowner), c.relforcerowsecurity
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relrowsecurity
  AND (n.nspname, c.relname) IN (SELECT * FROM unnest(%(schemas)s::text[], %(tables)s::text[]))
"""
_ROLES = "SELECT rolname FROM pg_roles"


@dataclass
class Grants:
    """Who may read what: each a set of (object..., grantee) with PUBLIC as ''."""

    tables: set[tuple[str, str, str]] = field(default_factory=set)
    columns: set[tuple[str, str, str, str]] = field(default_factory=set)
    schemas: set[tuple[str, str]] = field(default_factory=set)
    connect: set[tuple[str]] = field(default_factory=set)


@dataclass(frozen=True)
class RowSecurity:
    """A live table whose row security is enabled: its owner, and whether it is forced."""

    owner: str
    forced: bool


def _grantee(name: str) -> sql.Composable:
    return sql.SQL("PUBLIC") if name == PUBLIC else sql.Identifier(name)


class Mirror:
    """The live tables' grants, kept on the definitions database's tables by a thread of
    its own (`start`), and the live tables' row security, kept in memory."""

    def __init__(self, definitions: Definitions, source_url: str) -> None:
        self.definitions = definitions
        self.source_url = source_url
        self.row_security: dict[tuple[str, str], RowSecurity] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[str] = set()

    def start(self) -> None:
        """Mirrored once now (a failure raises), then every MIRROR_SECONDS."""
        self.sync()
        self._thread = threading.Thread(target=self._run, name="serve-grants", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(MIRROR_SECONDS):
            try:
                self.sync()
            except Exception as exc:  # the next pass tries again; persons stay as they were
                log.warning("serve: the live tables' grants could not be read: %s", first_line(exc))

    def sync(self) -> None:
        """The definitions database's grants made what the live database's say."""
        served = [
            (t.table.schema or "public", t.table.name) for t in self.definitions.tables.values()
        ]
        keys = {
            "schemas": [s for s, _ in served],
            "tables": [t for _, t in served],
            "schema_names": sorted({s for s, _ in served}),
        }
        with psycopg.connect(self.source_url, autocommit=True) as source:
            database = source.info.dbname
            live = _read(source, keys, database)
            self.row_security = {
                (r[0], r[1]): RowSecurity(r[2], bool(r[3]))
                for r in source.execute(_ROW_SECURITY, keys)
            }
        with psycopg.connect(self.definitions.place.admin, autocommit=True) as catalog:
            _archive_only(live, access.mirrored(catalog))
        with self.definitions.connect() as target:
            target.autocommit = True
            roles = {r[0] for r in target.execute(_ROLES)}
            wanted = self._wanted(live, roles)
            current = _read(target, keys, self.definitions.place.database)
            self._apply(target, current, wanted)

    def _wanted(self, live: Grants, roles: set[str]) -> Grants:
        """The live grants as the definitions database must hold them: of roles that
        exist there, never the definitions role's own (it owns the tables), a column's
        exact-text companion and `_archiver_file` with it."""
        me = self.definitions.place.role

        def known(grantee: str) -> bool:
            if grantee == PUBLIC or (grantee in roles and grantee != me):
                return True
            if grantee != me and grantee not in self._warned:
                self._warned.add(grantee)
                log.warning("serve: role %s, granted on a live table, is not a role of the "
                            "catalog's server: not mirrored", grantee)  # fmt: skip
            return False

        present = {
            (t.table.schema or "public", t.table.name): {c.name for c in t.columns}
            for t in self.definitions.tables.values()
        }
        columns = set()
        for schema, table, column, grantee in live.columns:
            names = present.get((schema, table), set())
            for name in (column, column + PG_TEXT_SUFFIX, FILE_ID):
                if name in names and known(grantee):
                    columns.add((schema, table, name, grantee))
        return Grants(
            {g for g in live.tables if known(g[2])},
            columns,
            {g for g in live.schemas if known(g[1])},
            {g for g in live.connect if known(g[0])},
        )

    def _apply(self, target: psycopg.Connection[Any], current: Grants, wanted: Grants) -> None:
        me = self.definitions.place.role
        statements: list[sql.Composed] = []

        def change(
            verb: str, rows: Iterable[tuple[str, ...]], what: Callable[..., sql.Composed]
        ) -> None:
            word = "GRANT" if verb == "grant" else "REVOKE"
            to = "TO" if verb == "grant" else "FROM"
            for row in sorted(rows):
                if row[-1] == me:
                    continue
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

        def database() -> sql.Composed:
            return sql.SQL("CONNECT ON DATABASE {}").format(
                sql.Identifier(self.definitions.place.database)
            )

        for verb, a, b in (("revoke", current, wanted), ("grant", wanted, current)):
            change(verb, a.tables - b.tables, table)
            change(verb, a.columns - b.columns, column)
            change(verb, a.schemas - b.schemas, schema)
            change(verb, a.connect - b.connect, database)
        if not statements:
            return
        with target.transaction():
            for statement in statements:
                target.execute(statement)
        log.info("serve: the live tables' grants mirrored (%d changes)", len(statements))


def _archive_only(live: Grants, granted: list[tuple[str, str, list[str] | None]]) -> None:
    """The archive-only readers (`archiver access`) added to the live grants, with the
    USAGE of the table's schema and the CONNECT they need to read it."""
    for table, role, columns in granted:
        schema, name = table.split(".", 1)
        if columns is None:
            live.tables.add((schema, name, role))
        live.columns.update((schema, name, c, role) for c in columns or ())
        live.schemas.add((schema, role))
        live.connect.add((role,))


def _read(conn: psycopg.Connection[Any], keys: dict[str, Any], database: str) -> Grants:
    connect = sql.SQL(_CONNECT).format(database=sql.Literal(database))
    return Grants(
        {tuple(r) for r in conn.execute(_TABLES, keys)},
        {tuple(r) for r in conn.execute(_COLUMNS, keys)},
        {tuple(r) for r in conn.execute(_SCHEMAS, keys)},
        {tuple(r) for r in conn.execute(connect)},
    )


def relations_read(plan: Any) -> set[tuple[str, str]]:
    """(schema, table) of every relation an `EXPLAIN (VERBOSE, FORMAT JSON)` plan scans."""
    found: set[tuple[str, str]] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "Relation Name" in node:
                found.add((str(node.get("Schema", "")), str(node["Relation Name"])))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(plan)
    return found


def check_row_security(
    read: set[tuple[str, str]],
    row_security: dict[tuple[str, str], RowSecurity],
    exempt: Callable[[RowSecurity], bool],
) -> None:
    """42501 naming row security when a table read has it and it applies to the person."""
    for schema, table in sorted(read):
        rls = row_security.get((schema, table))
        if rls is not None and not exempt(rls):
            raise SqlError(
                "42501",
                f"permission denied for table {table}: row security applies to you on "
                "the live table, and archiver serve cannot apply its policies to archived rows",
            )


def plan_of(rows: Sequence[Sequence[bytes | None]]) -> Any:
    """The JSON plan EXPLAIN (FORMAT JSON) answered, in one row."""
    value = rows[0][0] if rows and rows[0] else None
    return json.loads(value.decode()) if value else []
