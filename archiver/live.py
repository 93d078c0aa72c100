"""`archiver query --with-live`: each archived table's name means its live rows together
with its archived rows, one read-only relation, exact while archiver's own jobs run.

Exactness comes from one PostgreSQL snapshot. A move's chunk deletes its rows and
catalogues its file in one transaction (the catalog in the source database, the
default), and so do a restore's move back, an erasure and a purge: a snapshot sees each
row live or in exactly one committed file, never both, never neither. So:

 1 a catalog connection opens a REPEATABLE READ, READ ONLY transaction, exports its
   snapshot (pg_export_snapshot) and reads the committed files of every table in it;
 2 DuckDB's postgres scanner attaches the source database read-only and, first thing
   in its transaction, imports that snapshot (SET TRANSACTION SNAPSHOT), checked by
   reading pg_current_snapshot() back on both sides: the live rows are read at it;
 3 the archived rows are those files (not the Delta table, which lags its catalog by a
   publication), read where they are stored.

A file retired and deleted between 1 and 3 (a restore, erase or purge committing
meanwhile) cannot be read: the query is run again at a new snapshot, up to RETRIES
times. With the catalog in another database than the source (ARCHIVER_SOURCE_URL), no
snapshot sees both, and --with-live refuses.

Each view presents one type per column, the live table's as DuckDB reads it: archived
uuid/json/time text is cast back, PostgreSQL-only values kept as text beside a column
(`c__pg_text`, ±infinity) are cast back into it, an enum is VARCHAR on both sides; a
column added since the files were written is NULL in them, a column dropped since is
kept (NULL in the live rows). `_archiver_source` says where a row came from: 'live' or
'archive'."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from archiver import failpoints
from archiver.bulk import BulkConnection
from archiver.config import Settings, StorageLocation
from archiver.errors import InputError, StorageError, first_line
from archiver.ident import quote_ident
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.query import SOURCE

LIVE_DB = "archiver_live"  # the attached source database, in DuckDB
RETRIES = 3


@dataclass(frozen=True)
class File:
    """A catalogued file, with the ranges the catalog holds of its rows (text)."""

    path: str
    key: str  # the first key column
    min_key: str
    max_key: str
    cutoff: str  # the cutoff column ("" for a table archived with its parents)
    min_cutoff: str | None  # ISO 8601 UTC; None: unbounded (PostgreSQL-only values)
    max_cutoff: str | None
    unsure: bool = False  # out of the Delta table, its job gone: a copy's, or a move's?


@dataclass
class Snapshot:
    """The catalog at one snapshot: its id (to import) and each table's files."""

    exported: str
    current: str  # pg_current_snapshot(), to check the import
    files: dict[str, list[File]] = field(default_factory=dict)
    offline: dict[str, int] = field(default_factory=dict)
    delta_exact: set[str] = field(default_factory=set)  # Delta table == committed files


# Tables whose Delta table holds exactly their committed files at the snapshot: every
# committed file in a publication already in the log, every retired or offline one
# taken out by one (the other tables' archive is read from their files: exact, slower).
DELTA_EXACT = """
SELECT d.source_table FROM delta_tables d
WHERE d.storage_url = $1 AND d.published > 0 AND NOT EXISTS (
    SELECT 1 FROM archive_files f
    WHERE f.storage_url = d.storage_url AND f.source_table = d.source_table AND (
        (f.state = 'committed' AND f.delta AND NOT f.offline
         AND (f.publication IS NULL OR f.publication > d.published))
        OR ((f.state = 'retired' OR f.offline) AND f.publication <= d.published
            AND (f.unpublication IS NULL OR f.unpublication > d.published))))
"""


def read_catalog(conn: BulkConnection, location: str, *, live: bool = True) -> Snapshot:
    """Step 1, on `conn` (left open in its transaction: the exported snapshot lives as
    long as it does). `live` False: the files of tables read through their Delta table
    are not fetched (but their offline ones, counted)."""
    with conn.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.execute("SELECT pg_export_snapshot(), pg_current_snapshot()::text")
        exported, current = cur.fetchall()[0]
        cur.execute(DELTA_EXACT, (location,))
        exact = {r[0] for r in cur.fetchall()}
        cur.execute(
            "SELECT f.source_table, f.path, f.offline, f.delta, j.payload->>'mode', "
            "f.key_columns[1], f.min_key[1], f.max_key[1], f.cutoff_column, "
            "to_char(f.min_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'), "
            "to_char(f.max_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') "
            "FROM archive_files f LEFT JOIN background_jobs j ON j.id = f.job_id "
            "WHERE f.storage_url = $1 AND f.state = 'committed' AND ($2 OR f.offline "
            "  OR f.source_table NOT IN (SELECT jsonb_array_elements_text($3::jsonb))) "
            "ORDER BY f.source_table, f.id",
            (location, live, json.dumps(sorted(exact))),
        )
        rows = cur.fetchall()
        # tables with archive jobs but no file yet: their view has _archiver_source too
        cur.execute(
            "SELECT DISTINCT payload->>'table' FROM background_jobs WHERE task_name = 'archive'"
        )
        queued = [r[0] for r in cur.fetchall() if r[0]]
    snapshot = Snapshot(str(exported), str(current), {t: [] for t in sorted({*queued, *exact})})
    snapshot.delta_exact = exact
    for table, path, offline, delta, mode, key, low, high, cutoff, first, last in rows:
        snapshot.files.setdefault(table, [])
        if mode == "copy":
            continue
        if offline:
            snapshot.offline[table] = snapshot.offline.get(table, 0) + 1
            continue
        unsure = not delta and mode != "move"
        snapshot.files[table].append(File(path, key, low, high, cutoff, first, last, unsure))
    return snapshot


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # DuckDB's type


def _describe(con: Any, relation: str) -> list[Column]:
    return [Column(r[0], r[1]) for r in con.execute(f"DESCRIBE {relation}").fetchall()]


def import_snapshot(con: Any, snapshot: Snapshot) -> None:
    """Step 2: DuckDB's transaction on the source reads at the catalog's snapshot."""
    con.execute("BEGIN")
    exported = snapshot.exported.replace("'", "")
    con.execute(f"CALL postgres_execute('{LIVE_DB}', 'SET TRANSACTION SNAPSHOT ''{exported}''')")
    seen = con.execute(
        f"SELECT * FROM postgres_query('{LIVE_DB}', 'SELECT pg_current_snapshot()::text')"
    ).fetchall()[0][0]
    if seen != snapshot.current:
        raise InputError(
            f"query --with-live: the live rows would be read at another snapshot ({seen}) "
            f"than the catalog's ({snapshot.current}); nothing returned"
        )


def archived_copies(con: Any, uris: dict[str, str]) -> set[str]:
    """Of files outside the Delta table whose job is gone, those a copy job wrote (their
    own metadata says)."""
    if not uris:
        return set()
    listed = ", ".join("'" + u.replace("'", "''") + "'" for u in uris.values())
    rows = con.execute(
        f"SELECT file_name, decode(value) FROM parquet_kv_metadata([{listed}]) "
        "WHERE decode(key) = 'archiver.mode'"
    ).fetchall()
    by_uri = {u: p for p, u in uris.items()}
    return {by_uri[f] for f, mode in rows if mode == "copy" and f in by_uri}


def create_views(
    con: Any, location: StorageLocation, snapshot: Snapshot, *, live: bool = True
) -> list[str]:
    """Step 3: a view per archived table (schema.table, and the bare name where one
    schema has it) over its live rows and its files; `live` False: over its archive
    alone, its Delta table where that is exact at the snapshot, else its files. The
    tables, as named."""
    from archiver.query import delta_scan

    storage_uri = location.reader_uri
    unsure = {
        f.path: storage_uri(f.path) for files in snapshot.files.values() for f in files if f.unsure
    }
    copies = archived_copies(con, unsure)
    con.execute("SET parquet_metadata_cache = true")  # each footer read once
    bodies = {}
    for table, files in snapshot.files.items():
        schema, name = table.split(".", 1)
        kept = [(storage_uri(f.path), f) for f in files if f.path not in copies]
        if snapshot.offline.get(table):
            continue  # a query naming it was refused (query)
        if live:
            bodies[table] = _union(con, schema, name, kept)
        elif table in snapshot.delta_exact:
            bodies[table] = delta_scan(location, table)
        elif kept:
            bodies[table] = _archived(con, kept)
    names = [t.split(".", 1) for t in bodies]
    unique = {n for _, n in names if sum(1 for _, m in names if m == n) == 1}
    for table, body in bodies.items():
        schema, name = table.split(".", 1)
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
        con.execute(f"CREATE OR REPLACE VIEW {quote_ident(schema)}.{quote_ident(name)} AS {body}")
        if name in unique and schema != "main":
            con.execute(f"CREATE OR REPLACE VIEW main.{quote_ident(name)} AS {body}")
    made = list(bodies)
    if live:  # every other table of the source, live only, by the same names and snapshot
        mine = sorted({t.split(".", 1)[0] for t in made})
        schemas = sorted({"public", *mine})
        path = ["main", *map(quote_ident, mine), *(f"{LIVE_DB}.{quote_ident(s)}" for s in schemas)]
        con.execute(f"SET search_path = '{','.join(path).replace(chr(39), chr(39) * 2)}'")
    return made


def _archived(con: Any, files: list[tuple[str, File]]) -> str:
    """A table's archive read from its files, as its Delta table presents it: the
    columns of every file (PostgreSQL-only companions left out), a column's types
    unified by DuckDB where files differ (a file Delta refused for its type is read
    too), each file a branch bounded by its catalogued ranges, as in _union."""
    parts = []
    for uri, file in files:
        scan = "read_parquet('" + uri.replace("'", "''") + "')"
        columns = [c for c in _describe(con, f"SELECT * FROM {scan}")]
        kinds = {c.name: c.kind for c in columns if not c.name.endswith(PG_TEXT_SUFFIX)}
        ranges = _ranges(file, kinds)
        parts.append(
            f"SELECT * FROM (SELECT {', '.join(map(quote_ident, kinds))} FROM {scan})"
            + (f" WHERE {ranges}" if ranges else "")
        )
    return " UNION ALL BY NAME ".join(parts)


def _union(con: Any, schema: str, name: str, files: list[tuple[str, File]]) -> str:
    """One table's live rows and archived rows, one type per column. Each file is a
    branch of the union holding its catalogued key and cutoff ranges as constants: a
    query's filter that contradicts them lets DuckDB drop the branch, so the file is not
    read (its footer is, once, to bind it)."""
    live_rel = f"{LIVE_DB}.{quote_ident(schema)}.{quote_ident(name)}"
    try:
        live = _describe(con, live_rel)
    except Exception:  # the table is gone from PostgreSQL: its archive alone
        live = []
    kinds = {c.name: ("VARCHAR" if c.kind.startswith("ENUM") else c.kind) for c in live}
    parts = []
    if live:
        cols = [
            f"CAST({quote_ident(c.name)} AS {kinds[c.name]}) AS {quote_ident(c.name)}" for c in live
        ]
        parts.append(f"SELECT {', '.join(cols)}, 'live' AS {SOURCE} FROM {live_rel}")
    for uri, file in files:
        scan = "read_parquet('" + uri.replace("'", "''") + "')"
        archived = {c.name: c.kind for c in _describe(con, f"SELECT * FROM {scan}")}
        cols = []
        for c, kind in kinds.items():
            if c not in archived:
                cols.append(f"CAST(NULL AS {kind}) AS {quote_ident(c)}")
                continue
            value = f"CAST({quote_ident(c)} AS {kind})"
            if c + PG_TEXT_SUFFIX in archived:  # ±infinity and the like, kept as text
                special = quote_ident(c + PG_TEXT_SUFFIX)
                value = f"CASE WHEN {special} IS NOT NULL THEN TRY_CAST({special} AS {kind}) ELSE {value} END"
            cols.append(f"{value} AS {quote_ident(c)}")
        dropped = [
            c for c in archived if c not in kinds and not c.endswith(PG_TEXT_SUFFIX)
        ]  # columns dropped since they were archived
        cols += [quote_ident(c) for c in dropped]
        ranges = _ranges(file, kinds)
        parts.append(
            f"SELECT * FROM (SELECT {', '.join(cols)}, 'archive' AS {SOURCE} FROM {scan})"
            + (f" WHERE {ranges}" if ranges else "")
        )
    if not parts:
        raise InputError(f"query --with-live: {schema}.{name} has neither live rows nor files")
    return " UNION ALL BY NAME ".join(parts)


INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT")


def _ranges(file: File, kinds: dict[str, str]) -> str:
    """SQL: the catalog's ranges of `file`, as constants of the view's types, where
    DuckDB orders them as PostgreSQL does (integer keys; date and timestamp cutoffs,
    never NULL in an archived row): a true statement about every row of the file."""
    found = []
    if kinds.get(file.key) in INTEGERS and file.min_key and file.max_key:
        key, kind = quote_ident(file.key), kinds[file.key]
        low, high = (v.replace("'", "''") for v in (file.min_key, file.max_key))
        found.append(f"{key} BETWEEN CAST('{low}' AS {kind}) AND CAST('{high}' AS {kind})")
    kind = kinds.get(file.cutoff, "")
    if (
        file.min_cutoff
        and file.max_cutoff
        and kind in ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE")
    ):
        column = quote_ident(file.cutoff)
        low, high = file.min_cutoff, file.max_cutoff
        if kind == "DATE":
            low, high = low[:10], high[:10]
        elif kind == "TIMESTAMP WITH TIME ZONE":
            low, high = low + "+00", high + "+00"
        found.append(f"{column} BETWEEN CAST('{low}' AS {kind}) AND CAST('{high}' AS {kind})")
    return " AND ".join(found)


@contextlib.contextmanager
def attached(con: Any, settings: Settings) -> Iterator[None]:
    """The source database attached read-only in DuckDB, by its postgres scanner."""
    from archiver.query import load_extension

    load_extension(con, "postgres_scanner")
    url = _named(settings.effective_source_url).replace("'", "''")
    con.execute(f"ATTACH '{url}' AS {LIVE_DB} (TYPE postgres, READ_ONLY)")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            con.execute("ROLLBACK")


def _named(url: str) -> str:
    """`url` with this process's application_name (archiver.interrupt ends its sessions
    by it), unless it names one."""
    from urllib.parse import quote

    from archiver.db import application_name

    if "application_name=" in url:
        return url
    if url.startswith(("postgres://", "postgresql://")):
        return f"{url}{'&' if '?' in url else '?'}application_name={quote(application_name())}"
    return f"{url} application_name='{application_name()}'"


def query(conn: BulkConnection, settings: Settings, sql: str, run: Any, *, live: bool) -> Any:
    """Steps 1-3 on the catalog connection `conn` (`live` False: step 1, then views over
    each table's archive alone), then `run(con)` on the DuckDB connection holding the
    views: its result. Run again at a new snapshot when a file of the catalog's snapshot
    was deleted before it was read (up to RETRIES times). `sql` naming a table with
    Archive-tier files is refused in one line: their rows cannot be read."""
    import duckdb

    from archiver.query import engine, pin_scans, refuse_tables

    command = "query --with-live" if live else "query"
    if live and settings.source_url and settings.source_url != settings.database_url:
        raise InputError(
            "query --with-live: the catalog is in another database than the source "
            "(ARCHIVER_SOURCE_URL), so no one snapshot sees both the live rows and the "
            "archive; query the archive alone (without --with-live)"
        )
    location = settings.storage_location()
    for attempt in range(1, RETRIES + 1):
        snapshot = read_catalog(conn, str(location), live=live)
        refuse_tables(sql, {
            table: f"{command}: {n} archived files of {table} are in the Archive tier and "
            f"cannot be read: `archiver rehydrate --table {table}`; nothing returned"
            for table, n in snapshot.offline.items()
        })  # fmt: skip
        failpoints.reach("live_catalog_read")
        try:
            with engine(settings, location) as con, _source(con, settings, live):
                if live:
                    import_snapshot(con, snapshot)
                create_views(con, location, snapshot, live=live)
                if live:
                    pin_scans(con, sql)
                return run(con)
        except duckdb.IOException as exc:
            if attempt == RETRIES or not _a_file_went(exc, snapshot, location):
                # storage unreachable (found by the soak, Azurite restarting): one line
                raise StorageError(
                    f"{command}: the archive could not be read: {first_line(exc)}"
                ) from None
        finally:
            conn.rollback()
    raise AssertionError("unreachable")


def _source(con: Any, settings: Settings, live: bool) -> contextlib.AbstractContextManager[None]:
    return attached(con, settings) if live else contextlib.nullcontext()


def _a_file_went(exc: Exception, snapshot: Snapshot, location: StorageLocation) -> bool:
    """Whether `exc` is about a file of the snapshot (deleted since: retired by a
    restore, erase or purge that committed after it)."""
    text = str(exc)
    return any(
        location.reader_uri(f.path) in text for files in snapshot.files.values() for f in files
    )
