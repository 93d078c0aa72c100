"""The definitions database: a PostgreSQL database of serve's own, on the catalog's
server, holding one empty table per archived table -- its schema and name, each column
with its original type (format_type at archive time, as every file records it), NOT
NULL where the live table has it and every file holds the column, the key as its
primary key, the table's and columns' comments, and after its own columns the
`<column>__pg_text` companions and `_archiver_file`, which serve shows only to a
statement that names them (archiver.serve.hidden) -- and the types those columns use (enums with their
labels, domains, composites, ranges, extensions' types), made as the source database
defines them. Its owner is a login role that owns nothing else and is granted nothing
else: serve answers every statement that reads only PostgreSQL's catalogs there, as
that role, so psql's `\\d`, pgjdbc's DatabaseMetaData, SQLAlchemy's inspector,
postgres_fdw's IMPORT FOREIGN SCHEMA and Npgsql's type loading get PostgreSQL's own
answer, whatever they ask (archiver.serve.upstream), and no relation of the catalog
database is ever there to see.

Made where missing (archiver.serve.reader), then kept in step with the catalog by serve:
at start and whenever the committed files changed, each table whose definition changed
is made again in one transaction, its types made where missing
(archiver.serve.declared_types; never dropped: their OIDs stay what clients have
cached)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from archiver.config import Settings
from archiver.errors import DatabaseUnavailable, first_line
from archiver.ident import TableName
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.serve.declared_types import DeclaredTypes
from archiver.serve.hidden import FILE_ID, hidden
from archiver.serve.reader import Place, make
from archiver.serve.registry import TYPES, Registry
from archiver.serve.text import C_MONEY, Money
from archiver.serve.watchdog import WATCHDOG
from archiver.store.served import served_definitions, served_signature

log = logging.getLogger(__name__)

SYNC_SECONDS = 1.0  # the catalog is asked whether files changed at most this often


@dataclass(frozen=True)
class FileColumns:
    """A file's columns as DuckDB reads them, and their original PostgreSQL types."""

    kinds: dict[str, str]  # name -> DuckDB type, in file order
    types: dict[str, str]  # name -> format_type() at archive time


@dataclass
class ServedColumn:
    name: str
    type_sql: str  # as created: qualified where it is a user's type
    not_null: bool
    archived: str = ""  # format_type at archive time


@dataclass
class ServedTable:
    """What the definitions database declares of one archived table."""

    table: TableName
    columns: list[ServedColumn]
    key: list[str]
    comment: str | None = None
    comments: dict[str, str] = field(default_factory=dict)

    def ddl(self) -> list[sql.Composed]:
        """The statements that make the table (after any older one is dropped)."""
        name = sql.Identifier(self.table.schema or "public", self.table.name)
        columns = [
            sql.SQL("{} {}{}").format(
                sql.Identifier(c.name),
                sql.SQL(c.type_sql),
                sql.SQL(" NOT NULL" if c.not_null else ""),
            )
            for c in self.columns
        ]
        if self.key:
            columns.append(
                sql.SQL("PRIMARY KEY ({})").format(
                    sql.SQL(", ").join(map(sql.Identifier, self.key))
                )
            )
        out: list[sql.Composed] = [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                sql.Identifier(self.table.schema or "public")
            ),
            sql.SQL("CREATE TABLE {} ({})").format(name, sql.SQL(", ").join(columns)),
        ]
        if self.comment:
            out.append(sql.SQL("COMMENT ON TABLE {} IS {}").format(name, sql.Literal(self.comment)))
        for column, text in sorted(self.comments.items()):
            out.append(
                sql.SQL("COMMENT ON COLUMN {} IS {}").format(
                    sql.Identifier(self.table.schema or "public", self.table.name, column),
                    sql.Literal(text),
                )
            )
        return out

    def fingerprint(self) -> str:
        return hashlib.sha256(
            repr((self.columns, self.key, self.comment, sorted(self.comments.items()))).encode()
        ).hexdigest()


LIVE = """
SELECT a.attname, a.attnotnull, col_description(a.attrelid, a.attnum), obj_description(a.attrelid, 'pg_class')
FROM pg_attribute a
WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
"""

# -- keeping them in step ------------------------------------------------------------------

LOCK_SECONDS = 5.0  # a refresh waited for, and its catalog read, at most


class Definitions:
    """The definitions database of one serve process: made at start, kept in step with
    the catalog (`refresh`), and what serve needs of it: the names of pg_catalog's
    relations, the server's version, each served column's type."""

    def __init__(
        self, settings: Settings, storage: str, describe: Callable[[str], FileColumns]
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.place = Place.of(settings)
        self.describe = describe  # a file's columns, by its path (read once per process)
        self._lock = threading.Lock()
        self._checked = 0.0
        self._signature: tuple[Any, ...] | None = None
        self._made: dict[str, str] = {}  # schema.table -> the fingerprint made
        self._catalog: psycopg.Connection[Any] | None = None
        self.catalogs: frozenset[str] = frozenset()
        self.server_version = ""
        self.version_num = ""
        self.tables: dict[str, ServedTable] = {}
        self.registry = Registry([])
        self.money = C_MONEY  # how the server's lc_monetary writes money
        # (schema, table) -> column -> (relation OID, attnum)
        self.attributes: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}

    def start(self) -> None:
        """Made where missing, then in step with the catalog (every table made again:
        serve cannot know what another process left)."""
        make(self.place)
        with self.connect() as conn:
            catalogs = (
                "SELECT relname FROM pg_class WHERE relnamespace = 'pg_catalog'::regnamespace"
            )
            self.catalogs = frozenset(r[0] for r in conn.execute(catalogs))
            self.server_version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            self.version_num = str(conn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
            amounts = conn.execute(
                "SELECT '1234567.891'::numeric::money::text, '-1234567.891'::numeric::money::text"
            ).fetchone()
            assert amounts is not None
            self.money = Money.of(*amounts)
        self.refresh(force=True)

    def origin(self, schema: str | None, table: str, column: str) -> tuple[int, int]:
        """(relation OID, column number) of a served table's column here, as PostgreSQL
        tells a client where a result column comes from; (0, 0) where it is none."""
        if schema is not None:
            found = self.attributes.get((schema, table))
        else:  # a bare name: as serve resolves it, the one served table of that name
            named = [v for (s, t), v in self.attributes.items() if t == table]
            found = named[0] if len(named) == 1 else self.attributes.get(("public", table))
        return (found or {}).get(column, (0, 0))

    def reported_version(self) -> str:
        """server_version as serve reports it: the definitions database's server's
        release (what its catalogs are), naming archiver."""
        return f"{self.server_version.split()[0]} (archiver serve)"

    def refresh_quietly(self) -> None:
        """refresh where no other thread is at it, a failure logged: a statement over
        the archive runs on the definitions it has (what it reads never depends on them,
        only the types it announces)."""
        try:
            self.refresh(wait=False)
        except Exception as exc:
            log.warning("serve: the definitions database not brought in step: %s", first_line(exc))

    def close(self) -> None:
        if self._catalog is not None:
            with contextlib.suppress(Exception):
                self._catalog.close()
            self._catalog = None

    @contextlib.contextmanager
    def connect(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection to the definitions database as its reader."""
        try:
            conn = psycopg.connect(self.place.conninfo())
        except psycopg.OperationalError as exc:
            raise DatabaseUnavailable(
                f"serve: cannot connect to the definitions database {self.place.database} as "
                f"{self.place.role}: {first_line(exc)}"
            ) from None
        try:
            yield conn
        finally:
            conn.close()

    def refresh(self, force: bool = False, wait: bool = True) -> None:
        """The definitions in step with the committed files: asked of the catalog at most
        every SYNC_SECONDS, each changed table made again in one transaction (`wait`:
        for another thread's refresh to end, else leave it to that one)."""
        # another thread's refresh waited for LOCK_SECONDS at most: then, the definitions as they are
        if not self._lock.acquire(blocking=wait, timeout=LOCK_SECONDS if wait else -1):
            return
        try:
            now = time.monotonic()
            if not force and now - self._checked < SYNC_SECONDS:
                return
            self._checked = now
            conn = self._catalog_connection()
            try:
                fd = conn.pgconn.socket
                with (
                    WATCHDOG.watch(fd, LOCK_SECONDS, "a read of the catalog"),
                    conn.cursor() as cur,
                ):
                    signature = served_signature(cur, self.storage)
                    changed = force or signature != self._signature
                    rows = served_definitions(cur, self.storage) if changed else []
                conn.rollback()
            except Exception:
                self._catalog = None
                with contextlib.suppress(Exception):
                    conn.close()
                raise
            if not changed:
                return
            self._apply(rows, force)
            self._signature = signature
        finally:
            self._lock.release()

    def _catalog_connection(self) -> psycopg.Connection[Any]:
        """The catalog on a session the watchdog bounds (a raw cursor binds SQL's $1)."""
        if self._catalog is None:
            try:
                self._catalog = psycopg.connect(self.settings.database_url, connect_timeout=5,
                    cursor_factory=psycopg.RawCursor, application_name="archiver serve")  # fmt: skip
            except psycopg.OperationalError as exc:
                raise DatabaseUnavailable(f"serve: the catalog: {first_line(exc)}") from None
        return self._catalog

    def _apply(self, rows: list[tuple[Any, ...]], force: bool) -> None:
        grouped: dict[str, list[tuple[str, list[str]]]] = {}
        for table, path, key, _ in rows:
            grouped.setdefault(str(table), []).append((str(path), list(key or [])))
        with (
            psycopg.connect(self.settings.effective_source_url) as source,
            self.connect() as target,
        ):
            source.read_only = True
            target.autocommit = True  # each type made in a transaction of its own
            types = DeclaredTypes(source, target)
            wanted = {
                table: self._table(table, files, source, types) for table, files in grouped.items()
            }
            with target.transaction():
                target.execute("SET LOCAL lock_timeout = '10s'")
                present = {
                    f"{r[0]}.{r[1]}"
                    for r in target.execute(
                        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
                        "AND n.nspname NOT LIKE 'pg\\_%%' AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')"
                    )
                }
                for table in sorted(present - set(wanted)):
                    target.execute(
                        sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(
                            sql.Identifier(*table.split(".", 1))
                        )
                    )
                    self._made.pop(table, None)
                for table, served in sorted(wanted.items()):
                    mark = served.fingerprint()
                    if not force and self._made.get(table) == mark and table in present:
                        continue
                    name = sql.Identifier(served.table.schema or "public", served.table.name)
                    target.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(name))
                    for statement in served.ddl():
                        target.execute(statement)
                    self._made[table] = mark
            self.registry = self._registry(target, wanted)
        self.tables = wanted
        log.info(
            "serve: the definitions database %s declares %d archived tables",
            self.place.database,
            len(wanted),
        )

    def _registry(
        self, target: psycopg.Connection[Any], wanted: dict[str, ServedTable]
    ) -> Registry:
        """The database's types, and the type each archived type's text was declared as."""
        attributes: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
        declared = {}
        for r in target.execute(
            "SELECT n.nspname, c.relname, a.attname, a.atttypid, a.atttypmod, c.oid, a.attnum FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema')"
        ):
            declared[(r[0], r[1], r[2])] = (int(r[3]), int(r[4]))
            attributes.setdefault((r[0], r[1]), {})[r[2]] = (int(r[5]), int(r[6]))
        self.attributes = attributes
        archived: dict[str, tuple[int, int]] = {}
        for served in wanted.values():
            for column in served.columns:
                found = declared.get(
                    (served.table.schema or "public", served.table.name, column.name)
                )
                if found is not None and column.archived:
                    archived.setdefault(column.archived, found)
        return Registry(target.execute(TYPES).fetchall(), archived)

    def _table(
        self,
        table: str,
        files: list[tuple[str, list[str]]],
        source: psycopg.Connection[Any],
        types: DeclaredTypes,
    ) -> ServedTable:
        """One table's definition: every column of every file (the newest file's order and
        types first), its key, NOT NULL and comments as the live table has them."""
        name = TableName.stored(table)
        columns: dict[str, str] = {}  # name -> type as archived
        held: dict[str, int] = {}  # name -> how many of the files hold it
        for path, _ in files:  # newest first
            found = self.describe(path)
            for column, kind in found.kinds.items():
                held[column] = held.get(column, 0) + 1
                if column.endswith(PG_TEXT_SUFFIX) and column not in found.types:
                    columns.setdefault(column, "text")
                else:
                    columns.setdefault(column, found.types.get(column) or _duckdb_type(kind))
        live = {r[0]: r for r in source.execute(LIVE, [name.quoted]).fetchall()}
        everywhere = {c for c, n in held.items() if n == len(files)}
        key = [k for k in files[0][1] if k in everywhere] if files else []
        if len(key) != len(files[0][1] if files else []):
            key = []
        out = []
        for column in sorted(columns, key=hidden):  # the table's own first, in order
            type_sql = columns[column]
            declared = types.resolve(type_sql)
            not_null = column in key or (
                column in everywhere and bool(live.get(column, (0, False))[1])
            )
            out.append(ServedColumn(column, declared, not_null, type_sql))
        out.append(ServedColumn(FILE_ID, "bigint", True))
        comment = next((str(r[3]) for r in live.values() if r[3]), None)
        comments = {c: str(r[2]) for c, r in live.items() if r[2] and c in columns}
        return ServedTable(name, out, key, comment, comments)


_DUCKDB_TYPES = {
    "BOOLEAN": "boolean",
    "TINYINT": "smallint",
    "SMALLINT": "smallint",
    "INTEGER": "integer",
    "BIGINT": "bigint",
    "HUGEINT": "numeric",
    "FLOAT": "real",
    "DOUBLE": "double precision",
    "VARCHAR": "text",
    "BLOB": "bytea",
    "DATE": "date",
    "TIME": "time without time zone",
    "TIMESTAMP": "timestamp without time zone",
    "TIMESTAMP WITH TIME ZONE": "timestamp with time zone",
    "INTERVAL": "interval",
    "UUID": "uuid",
    "JSON": "json",
}


def _duckdb_type(kind: str) -> str:
    """A column of a file that records no original type: the type of its values."""
    if kind.endswith("[]"):
        element = _duckdb_type(kind[:-2])
        return element + "[]" if not element.endswith("[]") else "text"
    if kind.startswith("DECIMAL"):
        return "numeric" + kind[len("DECIMAL") :]
    return _DUCKDB_TYPES.get(kind, "text")
