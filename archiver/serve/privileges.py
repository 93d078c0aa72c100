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
The same grants are mirrored onto what `archiver attach` made in the application's
database (its foreign tables and `_all` views, `mirror_attached`).

Row security is the one rule the empty definitions tables cannot carry: a person whom a
live table's row security applies to (not its owner, or a member of the owner's role,
where it is not forced; not BYPASSRLS) is refused a statement that reads it."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from archiver.errors import first_line
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.serve import acl
from archiver.serve.audit import ATTACH_APPLICATION
from archiver.serve.definitions import Definitions
from archiver.serve.fileset import KEPT
from archiver.serve.hidden import FILE_ID
from archiver.serve.selects import SOURCE_COLUMN
from archiver.serve.watchdog import WATCHDOG
from archiver.serve.wire import SqlError
from archiver.store import access

log = logging.getLogger(__name__)

MIRROR_SECONDS = 2.0  # a GRANT or REVOKE on a live table is in force within this, plus a pass
STATEMENT_MS = 10_000  # any statement of a pass
PASS_SECONDS = 30.0  # a pass whose sessions wait longer is on a dead flow: they go

_ROW_SECURITY = """
SELECT n.nspname, c.relname, pg_get_userbyid(c.relowner), c.relforcerowsecurity
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relrowsecurity
  AND (n.nspname, c.relname) IN (SELECT * FROM unnest(%(schemas)s::text[], %(tables)s::text[]))
"""
# what `archiver attach` made: each foreign table of an archived table on a server attach
# made (its application_name), the table it reads, and its _all view where there is one
_ATTACHED = """
SELECT n.nspname, c.relname, o.schema_name, o.table_name,
       (SELECT v.relname FROM pg_class v WHERE v.relnamespace = c.relnamespace
          AND v.relname = c.relname || '_all' AND v.relkind = 'v')
FROM pg_foreign_table ft JOIN pg_class c ON c.oid = ft.ftrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_foreign_server s ON s.oid = ft.ftserver
CROSS JOIN LATERAL (
    SELECT max(substr(x, 13)) FILTER (WHERE x LIKE 'schema\\_name=%%') AS schema_name,
           max(substr(x, 12)) FILTER (WHERE x LIKE 'table\\_name=%%') AS table_name
    FROM unnest(ft.ftoptions) x) o
WHERE s.srvoptions @> ARRAY['application_name=' || %(application)s]
  AND o.schema_name <> %(kept)s
"""


@dataclass(frozen=True)
class RowSecurity:
    """A live table whose row security is enabled: its owner, and whether it is forced."""

    owner: str
    forced: bool


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
        self._sessions: dict[str, psycopg.Connection[Any]] = {}  # held between passes
        self._watched: contextlib.ExitStack | None = None  # a pass's bounds on them
        self._fds: set[int] = set()

    def start(self) -> None:
        """Mirrored once now, then every MIRROR_SECONDS (a pass that fails is logged and
        tried again: until one passes, a person reads nothing the definitions database
        does not grant them already)."""
        self._pass()
        self._thread = threading.Thread(target=self._run, name="serve-grants", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._drop_sessions()

    def _run(self) -> None:
        while not self._stop.wait(MIRROR_SECONDS):
            self._pass()

    def _pass(self) -> None:
        try:
            with contextlib.ExitStack() as self._watched:  # each session's waits bounded
                self.sync()
        except Exception as exc:  # the next pass tries again; persons stay as they were
            self._drop_sessions()
            log.warning("serve: the live tables' grants could not be mirrored: %s", first_line(exc))

    def _session(self, conninfo: str) -> psycopg.Connection[Any]:
        """A session of the mirror's own on `conninfo`, kept between passes; each
        statement bounded (a dead flow fails the pass, and the next one connects anew)."""
        conn = self._sessions.get(conninfo)
        if conn is None or conn.closed:
            conn = psycopg.connect(
                conninfo, autocommit=True, connect_timeout=5,
                options=f"-c statement_timeout={STATEMENT_MS}",
            )  # fmt: skip
            self._sessions[conninfo] = conn
        if self._watched is not None and conn.pgconn.socket not in self._fds:
            self._fds.add(conn.pgconn.socket)
            self._watched.enter_context(
                WATCHDOG.watch(conn.pgconn.socket, PASS_SECONDS, "a pass of the grants' mirror")
            )
        return conn

    def _drop_sessions(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for conn in sessions.values():
            conn.close()

    def sync(self) -> None:
        """The definitions database's grants, and attach's objects', made what the live
        database's say."""
        keys = acl.keys_of(
            (t.table.schema or "public", t.table.name) for t in self.definitions.tables.values()
        )
        source = self._session(self.source_url)
        live = acl.read(source, keys, source.info.dbname)
        self.row_security = {
            (r[0], r[1]): RowSecurity(r[2], bool(r[3])) for r in source.execute(_ROW_SECURITY, keys)
        }
        archive_only = access.mirrored(self._session(self.definitions.place.admin))
        _archive_only(live, archive_only)
        target = self._session(self.definitions.place.conninfo())
        roles = {r[0] for r in target.execute(acl.ROLES)}
        wanted = self._wanted(live, roles)
        current = acl.read(target, keys, self.definitions.place.database)
        changed = acl.apply(target, current, wanted, self.definitions.place.role,
                        self.definitions.place.database)  # fmt: skip
        if changed:
            log.info("serve: the live tables' grants mirrored (%d changes)", changed)
        try:
            mirror_attached(source, archive_only)
        except psycopg.errors.InsufficientPrivilege as exc:  # attach ran as another role
            if "attach" not in self._warned:
                self._warned.add("attach")
                log.warning("serve: the grants of attach's foreign tables cannot be kept in "
                            "step by archiver's role: %s", first_line(exc))  # fmt: skip

    def _wanted(self, live: acl.Grants, roles: set[str]) -> acl.Grants:
        """The live grants as the definitions database must hold them: of roles that
        exist there, never the definitions role's own (it owns the tables), a column's
        exact-text companion and `_archiver_file` with it."""
        me = self.definitions.place.role

        def known(grantee: str) -> bool:
            if grantee == acl.PUBLIC or (grantee in roles and grantee != me):
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
        return acl.Grants(
            {g for g in live.tables if known(g[2])},
            columns,
            {g for g in live.schemas if known(g[1])},
            {g for g in live.connect if known(g[0])},
        )


def mirror_attached(
    source: psycopg.Connection[Any], archive_only: list[tuple[str, str, list[str] | None]]
) -> int:
    """The live tables' grants onto what `archiver attach` made in `source`'s database:
    each foreign table of an archived table and its `_all` view, and USAGE on their
    schema; how many changes. An archive-only reader gets the foreign table alone (the
    view holds the live rows too). The `_kept` foreign tables are read through the
    views, with their owner's rights, and granted to nobody."""
    attached = source.execute(
        _ATTACHED, {"application": ATTACH_APPLICATION, "kept": KEPT}
    ).fetchall()
    if not attached:
        return 0
    of: dict[tuple[str, str], list[tuple[str, str, bool]]] = {}
    for schema, name, live_schema, live_table, view in attached:
        of.setdefault((live_schema, live_table), []).append((schema, name, False))
        if view is not None:
            of[(live_schema, live_table)].append((schema, view, True))
    live = acl.read(source, acl.keys_of(of), None)
    only = acl.Grants()
    _archive_only(only, archive_only)
    wanted = acl.Grants()
    for grants, views in ((live, True), (only, False)):
        for s, t, grantee in grants.tables:
            wanted.tables.update(
                (a, x, grantee) for a, x, view in of.get((s, t), ()) if views or not view
            )
        for s, t, column, grantee in grants.columns:
            for a, x, view in of.get((s, t), ()):
                if view and views:
                    wanted.columns.update(((a, x, column, grantee), (a, x, SOURCE_COLUMN, grantee)))
                elif not view:
                    wanted.columns.add((a, x, column, grantee))
    roles = {r[0] for r in source.execute(acl.ROLES)} | {
        acl.PUBLIC
    }  # a reader's role dropped since
    wanted.tables = {g for g in wanted.tables if g[-1] in roles}
    wanted.columns = {g for g in wanted.columns if g[-1] in roles}
    wanted.schemas = {(r[0], r[-1]) for r in wanted.tables | wanted.columns}
    targets = [(a, x) for objects in of.values() for a, x, _ in objects]
    current = acl.read(source, acl.keys_of(targets), None)
    me = str(source.execute("SELECT current_user").fetchone()[0])  # type: ignore[index]
    changed = acl.apply(source, current, wanted, me)
    if changed:
        log.info(
            "the live tables' grants mirrored onto attach's foreign tables (%d changes)", changed
        )
    return changed


def _archive_only(live: acl.Grants, granted: list[tuple[str, str, list[str] | None]]) -> None:
    """The archive-only readers (`archiver access`) added to the live grants, with the
    USAGE of the table's schema and the CONNECT they need to read it."""
    for table, role, columns in granted:
        schema, name = table.split(".", 1)
        if columns is None:
            live.tables.add((schema, name, role))
        live.columns.update((schema, name, c, role) for c in columns or ())
        live.schemas.add((schema, role))
        live.connect.add((role,))


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
