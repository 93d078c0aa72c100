"""`archiver attach`: a table's archive inside the application's own database, through
postgres_fdw and `archiver serve`, made (or made again, or dropped) in one transaction:

- the foreign server and the user mappings (the current role's, and PUBLIC's), with
  serve's credential; its application_name says on whose behalf each reads (`%u`);
- `archive.<table>`: a foreign table of the archived rows (serve's `schema.table`: the
  committed files at serve's own catalog snapshot), the original column types;
- `archive."<table>_kept"`: the same with `_archiver_file`, over serve's
  `archiver_kept."schema.table"` (committed files, and retired ones some snapshot may
  still see committed);
- `archive."<table>_all"`: every row of the table, live or archived, each exactly once:
  the live rows, and the kept rows of exactly the files the reader's own snapshot sees
  committed in archive_files. A chunk deletes its rows and catalogues its file in one
  transaction, and so does every operation that moves rows back or rewrites files; a
  snapshot sees each row live or in one committed file. serve keeps serving a retired
  file while any snapshot may still see it committed (archiver_seen_committed), so the
  files the view asks for are there when its foreign scan reads them, whenever that is.

Who reads them is the live table's grants, mirrored onto the foreign table and the view
(table and column SELECT, the schema's USAGE) by attach and then by serve every few
seconds (archiver.serve.privileges.mirror_attached).

Every name reaches SQL quoted (ident.quote_ident), every value quoted by the server
itself (quote_literal of a parameter)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from archiver.config import Settings
from archiver.errors import InputError, first_line
from archiver.ident import TableName, quote_ident
from archiver.serve.audit import ATTACH_APPLICATION
from archiver.serve.fileset import KEPT
from archiver.serve.hidden import FILE_ID
from archiver.serve.selects import SOURCE_COLUMN
from archiver.store import access


@dataclass(frozen=True)
class Attached:
    table: str  # schema.table
    schema: str  # where the foreign tables and the view are
    columns: int
    view: bool  # the _all view was made (the catalog is in the source database)
    server: str


COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

# The table as a user writes it, as the catalog or this database knows it.
RESOLVE = """
SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')
"""


def _names(table: str, schema: str) -> tuple[str, str, str]:
    bare = table.split(".", 1)[1]
    return (
        f"{quote_ident(schema)}.{quote_ident(bare)}",
        f"{quote_ident(schema)}.{quote_ident(bare + '_kept')}",
        f"{quote_ident(schema)}.{quote_ident(bare + '_all')}",
    )


async def attach(
    conn: asyncpg.Connection,
    settings: Settings,
    table_text: str,
    *,
    host: str,
    port: int,
    schema: str,
    server: str,
    sslmode: str,
) -> Attached:
    """Create (or replace) the foreign tables and the view of `table_text` in the
    database `conn` is on, in one transaction."""
    if not settings.serve_password:
        raise InputError(
            "attach: ARCHIVER_SERVE_PASSWORD is not set: the user mapping needs serve's password"
        )
    name = TableName.parse(table_text)
    table = await conn.fetchval(RESOLVE, name.sql)
    if table is None:
        raise InputError(f"attach: table {table_text} does not exist in this database")
    columns = await conn.fetch(COLUMNS, TableName.stored(table).sql)
    catalog = await conn.fetchval(
        "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = to_regclass('archive_files')"
    )
    view = catalog is not None and settings.same_database
    live, kept, everything = _names(table, schema)
    schema_name, bare = table.split(".", 1)
    storage = str(settings.storage_location())

    async def literal(value: str) -> str:  # a value, quoted by the server itself
        return str(await conn.fetchval("SELECT quote_literal($1::text)", value))

    user, password = await literal(settings.serve_user), await literal(settings.serve_password)
    async with conn.transaction():
        await _extension(conn)
        await _server(conn, server, host, port, sslmode)
        # the current role's, and everyone's: who reads what is the foreign tables' and
        # the views' grants, the live table's (archiver.serve.privileges)
        for whom in ("CURRENT_USER", "PUBLIC"):
            on = f"FOR {whom} SERVER {quote_ident(server)}"
            await conn.execute(
                f"CREATE USER MAPPING IF NOT EXISTS {on} OPTIONS (user {user}, password {password})"
            )
            await conn.execute(
                f"ALTER USER MAPPING {on} OPTIONS (SET user {user}, SET password {password})"
            )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
        await conn.execute(f"DROP VIEW IF EXISTS {everything}")
        await conn.execute(f"DROP FOREIGN TABLE IF EXISTS {live}, {kept}")
        declared = ", ".join(f"{quote_ident(c)} {t}" for c, t in columns)
        for target, remote_schema, remote_table, extra in (
            (live, schema_name, bare, ""),
            (kept, KEPT, table, f", {FILE_ID} bigint"),
        ):
            await conn.execute(
                f"CREATE FOREIGN TABLE {target} ({declared}{extra}) SERVER {quote_ident(server)} "
                f"OPTIONS (schema_name {await literal(remote_schema)}, "
                f"table_name {await literal(remote_table)})"
            )
        if view:
            listed = ", ".join(quote_ident(c) for c, _ in columns)
            await conn.execute(
                f"CREATE VIEW {everything} AS "
                f"SELECT {listed}, 'live'::text AS {SOURCE_COLUMN} FROM {TableName.stored(table).sql} "
                f"UNION ALL SELECT {listed}, 'archive'::text FROM {kept} k "
                # not a join: a hashed subplan, the catalog read once per statement (a
                # semi-join's nested loop would scan the foreign table once per file)
                f"WHERE COALESCE(k.{FILE_ID} IN (SELECT f.id FROM {quote_ident(catalog)}.archive_files f "
                f"WHERE f.storage_url = {await literal(storage)} "
                f"AND f.source_table = {await literal(table)} AND f.state = 'committed'), false)"
            )
        await _read_through(conn, live, host, port, sslmode)
    return Attached(table, schema, len(columns), view, server)


def mirror_grants(settings: Settings) -> int:
    """The live tables' grants, and the archive-only readers', onto what attach made (as
    serve keeps them, every few seconds): how many changes."""
    import psycopg

    from archiver.serve.privileges import mirror_attached

    with psycopg.connect(settings.database_url, autocommit=True) as catalog:
        archive_only = access.mirrored(catalog)
    with psycopg.connect(settings.effective_source_url, autocommit=True) as source:
        return mirror_attached(source, archive_only)


async def _read_through(
    conn: asyncpg.Connection, foreign: str, host: str, port: int, sslmode: str
) -> None:
    """One read of the foreign table, before anything attach made is committed: where
    serve cannot be read as configured, one line naming why, and the transaction (all
    attach made) rolled back."""
    try:
        async with conn.transaction():  # a savepoint: the error's cause read after it
            await conn.fetchval(f"SELECT count(*) FROM (SELECT 1 FROM {foreign} LIMIT 1) AS one")
    except asyncpg.PostgresError as exc:
        said = " ".join(filter(None, (str(exc), getattr(exc, "detail", None) or "")))
        where = f"{host}:{port}"
        if "does not support SSL" in said:
            cause = (
                f"serve at {where} does not speak TLS, and --sslmode {sslmode} requires "
                "it: give serve a certificate (ARCHIVER_SERVE_TLS_CERT), or attach with "
                "--sslmode disable on a private network"
            )
        elif "password authentication failed" in said or "SASL" in said:
            cause = (
                f"serve at {where} refused the password: ARCHIVER_SERVE_PASSWORD (and "
                "ARCHIVER_SERVE_USER) must be serve's own"
            )
        elif "Connection refused" in said:
            cause = f"nothing listens at {where}: is archiver serve running there (--host, --port)?"
        elif "could not translate host name" in said or "Name or service not known" in said:
            cause = f"host {host} is unknown here (--host)"
        elif "timeout expired" in said or "timed out" in said:
            cause = f"{where} did not answer (--host, --port, a firewall?)"
        elif "requires TLS" in said:
            cause = f"serve at {where} requires TLS: attach with --sslmode require"
        else:
            cause = f"the read through serve at {where} failed: {first_line(exc)}"
        raise InputError(f"attach: nothing made: {cause}") from None


async def detach(conn: asyncpg.Connection, table_text: str, *, schema: str) -> str:
    """Drop the view and the foreign tables of `table_text` (the server and the user
    mapping stay: other tables may use them)."""
    name = TableName.parse(table_text)
    table = await conn.fetchval(RESOLVE, name.sql) or (f"{name.schema or 'public'}.{name.name}")
    live, kept, everything = _names(table, schema)
    async with conn.transaction():
        await conn.execute(f"DROP VIEW IF EXISTS {everything}")
        await conn.execute(f"DROP FOREIGN TABLE IF EXISTS {live}, {kept}")
    return table


async def _extension(conn: asyncpg.Connection) -> None:
    """postgres_fdw, created if this role may; one line saying what to do if not."""
    if await conn.fetchval("SELECT 1 FROM pg_extension WHERE extname = 'postgres_fdw'"):
        return
    try:
        async with conn.transaction():
            await conn.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
    except asyncpg.PostgresError as exc:
        raise InputError(
            f"attach: postgres_fdw is not installed here and this role cannot create it ({exc}); "
            "ask an administrator to run CREATE EXTENSION postgres_fdw (on Azure Database for "
            "PostgreSQL, allow it in the server parameter azure.extensions first)"
        ) from None


async def _server(
    conn: asyncpg.Connection, server: str, host: str, port: int, sslmode: str
) -> None:
    """The foreign server, created or its options set (host, port, TLS)."""
    options = {
        "host": host,
        "port": str(port),
        "dbname": "archive",
        "sslmode": sslmode,
        "fetch_size": "10000",
        "application_name": ATTACH_APPLICATION,  # %u: on whose behalf, for serve's audit
    }
    exists = await conn.fetchval(
        "SELECT srvoptions FROM pg_foreign_server WHERE srvname = $1", server
    )
    have = {o.split("=", 1)[0] for o in exists or []}
    listed = []
    for key, value in options.items():
        quoted = await conn.fetchval("SELECT quote_literal($1::text)", value)
        listed.append(f"{'SET ' if key in have else ''}{key} {quoted}")
    if exists is None:
        await conn.execute(
            f"CREATE SERVER {quote_ident(server)} FOREIGN DATA WRAPPER postgres_fdw "
            f"OPTIONS ({', '.join(listed)})"
        )
    else:
        await conn.execute(f"ALTER SERVER {quote_ident(server)} OPTIONS ({', '.join(listed)})")
