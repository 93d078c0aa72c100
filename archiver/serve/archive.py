"""What `archiver serve` answers a SELECT with: the archive at the catalog's snapshot,
read by DuckDB as `archiver query` reads it (archiver.query: the statement's parse, the
tables it names alone, their files pruned by its constraints on key and cutoff before
any footer is read), one process-wide DuckDB whose configuration is locked and which
reads no file but the archive's.

Each archived table `schema.table` is two relations:

- `schema.table`: the rows of its committed files, as `archiver query` reads it (what
  `archiver attach` declares as the foreign table `archive.<table>`);
- `archiver_kept."schema.table"`: the rows of its committed files and of its retired
  files that some snapshot of the catalog's database may still see committed
  (archiver_seen_committed), each with `_archiver_file`, its file's catalog id. The view
  attach makes keeps the rows of the files the reader's own snapshot sees committed:
  exact while archiver moves rows (archiver.serve.attach).

Both carry every column of every file (a column a file lacks is NULL in it), the
`<column>__pg_text` companions of PostgreSQL-only values (a statement that returns a
column returns its companion's value where it has one: text.text_values) and
`_archiver_file`. A statement runs in an in-memory database of its own inside the
process's DuckDB, holding its views; it is detached when the statement's result closes."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from archiver.bulk import BulkConnection, open_bulk
from archiver.config import Settings, StorageLocation
from archiver.errors import InputError, StorageError, first_line
from archiver.ident import as_typed, quote_ident
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.query import catalog, statement
from archiver.query.catalog import ARCHIVED, NAMED, File, Snapshot
from archiver.query.views import archived_copies, file_ranges
from archiver.serve.types import Column, column_for

KEPT = "archiver_kept"  # the schema of the kept relations
FILE_ID = "_archiver_file"  # the column naming a row's file (its catalog id)
RETRIES = 3
REFUSED_WORDS = frozenset(("PRAGMA", "SUMMARIZE", "SHOW", "DESCRIBE"))  # DuckDB's own
BATCH_ROWS = 10_000

# The files of tables $1 (a JSON array of schema.table, as stored) on storage $2:
# committed, and with $3 retired ones some snapshot may still see committed
# (archiver_seen_committed) or kept (a compaction's inputs); a table of this database
# that has no file yet, as one row of NULLs (attach declares a table before its first
# file); whether each file's key is an integer column here (its catalogued key range
# then prunes: text ends sort otherwise).
FILES = """
WITH wanted AS (
    SELECT DISTINCT t FROM jsonb_array_elements_text($1::jsonb) t
    WHERE EXISTS (SELECT 1 FROM archive_files f WHERE f.source_table = t)
       OR to_regclass(quote_ident(split_part(t, '.', 1)) || '.'
                      || quote_ident(substr(t, strpos(t, '.') + 1))) IS NOT NULL
)
SELECT w.t, f.path, f.offline, f.delta, j.payload->>'mode',
       f.key_columns[1], f.min_key[1], f.max_key[1], f.cutoff_column,
       to_char(f.min_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
       to_char(f.max_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
       f.id, f.state = 'retired',
       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = to_regclass(
                   quote_ident(split_part(w.t, '.', 1)) || '.'
                   || quote_ident(substr(w.t, strpos(w.t, '.') + 1)))
               AND a.attname = f.key_columns[1] AND NOT a.attisdropped
               AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype))
FROM wanted w
LEFT JOIN archive_files f ON f.source_table = w.t AND f.storage_url = $2 AND (
    f.state = 'committed' OR ($3 AND f.state = 'retired'
        AND (f.kept_until > now() OR archiver_seen_committed(f.retired_xid))))
LEFT JOIN background_jobs j ON j.id = f.job_id
ORDER BY w.t, f.id
"""


@dataclass(frozen=True)
class FileColumns:
    """A file's columns as DuckDB reads them, and their original PostgreSQL types."""

    kinds: dict[str, str]  # name -> DuckDB type, in file order
    types: dict[str, str]  # name -> format_type() at archive time


@dataclass
class Result:
    """A running statement's result: its columns as served and its batches, streamed."""

    columns: list[Column]
    shown: list[int]  # the batch column of each served column
    companion_of: dict[int, int]  # batch column -> the batch column of its companion
    _cursor: Any
    _batches: Iterator[pa.RecordBatch]
    _first: pa.RecordBatch | None
    _database: str
    _release: Callable[[str], None]
    closed: bool = field(default=False)

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self._first is not None:
            first, self._first = self._first, None
            yield first
        yield from self._batches

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._cursor.close()
        finally:
            self._release(self._database)

    def interrupt(self) -> None:
        self._cursor.interrupt()


class ServedArchive:
    """The process's DuckDB over the archive at `location`, and its catalog connections."""

    def __init__(self, settings: Settings, location: StorageLocation) -> None:
        import duckdb

        from archiver.query.engine import _azure_secret, load_extension

        self.settings = settings
        self.location = location
        self._local = threading.local()  # each serving thread's catalog connection
        self._free: list[str] = []  # attached databases no statement holds
        self._schemas: dict[str, set[str]] = {}  # the schemas made in each
        _no_pandas_lookups()
        self._files: dict[str, FileColumns] = {}
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        db = duckdb.connect(
            config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
        )
        if location.scheme == "az":
            load_extension(db, "azure")
            _azure_secret(db, settings)
        root = location.reader_uri("")
        db.execute("SET allowed_directories = $1", [[root]])
        db.execute("SET enable_external_access = false")  # no file but the archive's
        db.execute(f"SET memory_limit = '{int(settings.serve_memory_limit)}B'")
        db.execute(f"SET threads = {int(settings.serve_threads)}")
        db.execute("SET parquet_metadata_cache = true")  # each footer read once
        # a catalogued file never changes (its name is never written again: a retry
        # rewrites an uncommitted one, a rewrite gets a new name), so the blocks DuckDB
        # keeps of it (within memory_limit) are used without asking storage again
        db.execute("SET validate_external_file_cache = 'NO_VALIDATION'")
        # no name is looked up among this process's Python objects (DuckDB's replacement
        # scans import pandas and polars to look, on every statement)
        db.execute("SET python_enable_replacements = false")
        db.execute("SET lock_configuration = true")  # no statement changes any of it
        self.db = db

    def close(self) -> None:
        self.db.close()

    def run(self, sql: str, params: list[Any], started: Callable[[Any], None]) -> Result:
        """Run one SELECT (refused before anything runs otherwise) over the archive at a
        fresh catalog snapshot; again at a newer one when a file went meanwhile.
        `started` is handed each DuckDB cursor the statement runs on (to interrupt it)."""
        parser = self.db.cursor()  # DuckDB's parse, on a connection of the process's own
        try:
            statement.refuse_writes(sql, parser)
            word = sql.lstrip(" \t\r\n(").split(None, 1)[0].upper() if sql.strip() else ""
            if word in REFUSED_WORDS:  # DuckDB parses these as SELECTs of its own tables
                raise InputError(f"query: {word} refused: archiver serve only reads the archive")
            # parameters prune as constants
            refs = statement.references(_inlined(sql, params), parser)
            referenced = _columns_named(parser, sql) - {FILE_ID}
        finally:
            parser.close()
        plain, kept = _named(refs)
        for attempt in range(1, RETRIES + 1):
            plain_snapshot, kept_snapshot = self._catalog(plain, kept, refs)
            try:
                return self._execute(
                    sql, params, referenced, plain_snapshot, kept_snapshot, started
                )
            except _FileGone:
                if attempt == RETRIES:
                    raise StorageError(
                        "serve: the archive's files changed under the statement three times; "
                        "run it again"
                    ) from None
        raise AssertionError("unreachable")

    def _connection(self) -> BulkConnection:
        """This thread's catalog connection, opened once."""
        conn: BulkConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = open_bulk(self.settings.database_url)
        return conn

    def _read(self, names: list[str], retired: bool) -> list[tuple[Any, ...]]:
        """FILES on this thread's connection, once more on a new one if it broke; a bare
        table name (`orders`, or `*`: every table) resolved as archiver query resolves
        it first."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                with conn.cursor() as cur:
                    bare = [n for n in names if "." not in n]
                    tables = [n for n in names if "." in n]
                    if "*" in bare:
                        cur.execute(ARCHIVED)
                        tables += [str(r[0]) for r in cur.fetchall()]
                    elif bare:
                        cur.execute(NAMED, (json.dumps(bare),))
                        tables += [str(r[0]) for r in cur.fetchall() if r[0]]
                    cur.execute(FILES, (json.dumps(tables), str(self.location), retired))
                    rows = cur.fetchall()
                conn.rollback()
                return rows
            except Exception:
                self._local.conn = None
                with contextlib.suppress(Exception):
                    conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _catalog(
        self, plain: set[str] | None, kept: set[str], refs: list[statement.Reference] | None
    ) -> tuple[Snapshot | None, Snapshot | None]:
        """The files of the tables the statement names, as two snapshots (its plain
        relations: committed files; its kept ones: retired ones too), pruned by its
        constraints: one catalog query."""
        names = sorted((plain if plain is not None else {"*"}) | kept)
        rows = self._read(names, bool(kept))
        plain_refs = [statement.Reference(n) for n in plain or ()]
        snapshots: list[Snapshot | None] = []
        for wanted, retired in ((plain, False), (kept, True)):
            if wanted is not None and not wanted:
                snapshots.append(None)
                continue
            snapshot = Snapshot("", "")
            for row in rows:
                table = str(row[0])
                mine = (
                    table.casefold() in {k.casefold() for k in kept}
                    if retired
                    else wanted is None or bool(statement.reads(table, plain_refs))
                )
                if not mine:
                    continue
                files = snapshot.files.setdefault(table, [])
                path, offline, mode, gone = row[1], row[2], row[4], row[12]
                if path is None or mode == "copy" or (gone and not retired):
                    continue
                if offline:
                    snapshot.offline[table] = snapshot.offline.get(table, 0) + 1
                    continue
                if row[13]:
                    snapshot.integer_keys.add((table, str(row[5])))
                unsure = not row[3] and mode != "move"
                files.append(File(str(path), row[5], row[6], row[7], row[8], row[9], row[10],
                                  unsure, int(row[11]), bool(gone)))  # fmt: skip
            if refs is not None:
                catalog.prune(snapshot, _as_read(refs, retired))
            if snapshot.offline:
                table, n = sorted(snapshot.offline.items())[0]
                raise InputError(
                    f"serve: {n} archived files of {table} are in the Archive tier and "
                    f"cannot be read: `archiver rehydrate --table {as_typed(table)}`"
                )
            snapshots.append(snapshot)
        return snapshots[0], snapshots[1]

    def _execute(
        self,
        sql: str,
        params: list[Any],
        referenced: set[str],
        plain: Snapshot | None,
        kept: Snapshot | None,
        started: Callable[[Any], None],
    ) -> Result:
        import duckdb

        cur = self.db.cursor()
        started(cur)
        name, schemas_made = self._database(cur)
        cur.execute(f"USE {name}")
        try:
            types: dict[str, str] = {}  # column -> its original type, the newest file's
            companions: set[str] = set()
            schemas = ["main"]
            for snapshot, retired in ((plain, False), (kept, True)):
                if snapshot is None:
                    continue
                self._check_files(cur, snapshot)
                for table, files in snapshot.files.items():
                    schema, bare = table.split(".", 1)
                    target = (KEPT, table) if retired else (schema, bare)
                    body, described = self._body(cur, files, referenced)
                    for one in described:
                        for column, type_sql in one.types.items():
                            types.setdefault(column, type_sql)
                        companions.update(c for c in one.kinds if c.endswith(PG_TEXT_SUFFIX))
                    if target[0] not in schemas_made:
                        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(target[0])}")
                        schemas_made.add(target[0])
                    view = f"{quote_ident(target[0])}.{quote_ident(target[1])}"
                    cur.execute(f"CREATE OR REPLACE VIEW {view} AS {body}")
                    if not retired and schema not in schemas:
                        schemas.append(schema)
            path = ",".join(f"{name}.{quote_ident(s)}" for s in schemas)
            cur.execute(f"SET search_path = '{path.replace(chr(39), chr(39) * 2)}'")
            served = _with_companions(cur, sql, companions)
            try:
                reader = cur.execute(served, params or None).fetch_record_batch(BATCH_ROWS)
                batches = iter(reader)
                first = next(batches, None)
            except duckdb.IOException as exc:
                if any(
                    self.location.reader_uri(f.path) in str(exc)
                    for s in (plain, kept)
                    if s is not None
                    for files in s.files.values()
                    for f in files
                ):
                    raise _FileGone() from None
                raise StorageError(
                    f"serve: the archive could not be read: {first_line(exc)}"
                ) from None
            fields = list(reader.schema)
            shown, companion_of = paired([f.name for f in fields])
            columns = [
                column_for(fields[i].name, fields[i].type, types.get(fields[i].name)) for i in shown
            ]
            return Result(columns, shown, companion_of, cur, batches, first, name, self._release)
        except BaseException:
            cur.close()
            self._release(name)
            raise

    def _database(self, cur: Any) -> tuple[str, set[str]]:
        """An in-memory database no running statement holds, for a statement's views
        (attached once, then reused: a statement replaces the views it names)."""
        with self._lock:
            if self._free:
                name = self._free.pop()
                return name, self._schemas[name]
            name = f"q{next(self._numbers)}"
        cur.execute(f"ATTACH ':memory:' AS {name}")
        with self._lock:
            self._schemas[name] = set()
        return name, self._schemas[name]

    def _release(self, name: str) -> None:
        with self._lock:
            self._free.append(name)

    def _check_files(self, cur: Any, snapshot: Snapshot) -> None:
        """Leave out the files of copy jobs whose job is gone (their metadata says so)."""
        unsure = {
            f.path: self.location.reader_uri(f.path)
            for files in snapshot.files.values()
            for f in files
            if f.unsure
        }
        copies = archived_copies(cur, unsure)
        for table, files in snapshot.files.items():
            snapshot.files[table] = [f for f in files if f.path not in copies]

    def _described(self, cur: Any, uri: str) -> FileColumns:
        """A file's columns, read once per process (a catalogued file never changes)."""
        with self._lock:
            found = self._files.get(uri)
        if found is not None:
            return found
        scan = "read_parquet('" + uri.replace("'", "''") + "')"
        kinds = {r[0]: r[1] for r in cur.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
        meta = cur.execute(
            f"SELECT decode(value) FROM parquet_kv_metadata('{uri.replace(chr(39), chr(39) * 2)}') "
            "WHERE decode(key) = 'archiver.columns'"
        ).fetchall()
        types = {c["name"]: c["type"] for c in json.loads(meta[0][0])} if meta else {}
        found = FileColumns(kinds, types)
        with self._lock:
            self._files[uri] = found
        return found

    def _body(
        self, cur: Any, files: list[File], referenced: set[str]
    ) -> tuple[str, list[FileColumns]]:
        """A table's view over `files` and what each file holds (newest first: its
        columns' order and types win), or, with no file, an empty relation of the
        columns the statement names."""
        if not files:
            names = sorted(referenced) or ["_archiver_none"]
            cols = ", ".join(f"CAST(NULL AS VARCHAR) AS {quote_ident(c)}" for c in names)
            return f"SELECT {cols}, CAST(NULL AS BIGINT) AS {FILE_ID} WHERE false", []
        parts = []
        held = []
        for file in reversed(files):
            uri = self.location.reader_uri(file.path)
            described = self._described(cur, uri)
            held.append(described)
            scan = "read_parquet('" + uri.replace("'", "''") + "')"
            ranges = file_ranges(file, described.kinds)
            parts.append(
                f"SELECT *, CAST({file.id} AS BIGINT) AS {FILE_ID} FROM {scan}"
                + (f" WHERE {ranges}" if ranges else "")
            )
        return " UNION ALL BY NAME ".join(parts), held


def _no_pandas_lookups() -> None:
    """DuckDB's Python module tries `import pandas` on each parameterized statement; where
    pandas is not installed, each try searches sys.path again. The absence is recorded
    once instead (a None in sys.modules: Python's own way to say a module is absent)."""
    import importlib.util

    if importlib.util.find_spec("pandas") is None:
        sys.modules["pandas"] = None  # type: ignore[assignment]


class _FileGone(Exception):
    """A file of the snapshot was deleted before it was read."""


def _inlined(sql: str, params: list[Any]) -> str:
    """`sql` with each `$n` written as its parameter's value, for finding the files a
    statement can read (it runs with its parameters bound)."""
    if not params:
        return sql

    def value(m: re.Match[str]) -> str:
        n = int(m.group(1))
        if n > len(params):
            return m.group(0)
        param = params[n - 1]
        if param is None:
            return "NULL"
        if isinstance(param, bool) or not isinstance(param, int | str):
            return m.group(0)
        return str(param) if isinstance(param, int) else "'" + param.replace("'", "''") + "'"

    return re.sub(r"\$(\d+)\b", value, sql)


def _named(refs: list[statement.Reference] | None) -> tuple[set[str] | None, set[str]]:
    """The tables a statement names (None: not known, every archived table), and those
    it names in the kept schema (as schema.table)."""
    if refs is None:
        return None, set()
    plain, kept = set(), set()
    for ref in refs:
        schema, _, rest = ref.table.partition(".")
        if schema.casefold() == KEPT and rest:
            kept.add(rest)
        else:
            plain.add(ref.table)
    return plain, kept


def _as_read(refs: list[statement.Reference], kept: bool) -> list[statement.Reference]:
    """The references to the plain relations, or to the kept ones named as their table."""
    out = []
    for ref in refs:
        schema, _, rest = ref.table.partition(".")
        is_kept = schema.casefold() == KEPT and bool(rest)
        if is_kept == kept:
            out.append(statement.Reference(rest if kept else ref.table, ref.columns))
    return out


def _columns_named(parser: Any, sql: str) -> set[str]:
    """Every column name `sql` writes (its parse's column references)."""
    try:
        row = parser.execute("SELECT json_serialize_sql($1)", [sql]).fetchone()
    except Exception:  # DuckDB's error for the statement is the run's to report
        return set()
    found: set[str] = set()
    stack: list[Any] = [json.loads(row[0]) if row else {}]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("class") == "COLUMN_REF" or node.get("type") == "COLUMN_REF":
                names = node.get("column_names") or []
                if names:
                    found.add(str(names[-1]))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _with_companions(cur: Any, sql: str, companions: set[str]) -> str:
    """`sql`, its top-level select list extended by the companion of each plain column it
    returns (`c__pg_text` beside `c`) where the relations have one (`companions`): its
    PostgreSQL-only values (±infinity, numeric NaN, multi-dimensional arrays) then
    replace the column's NULL (text.text_values). A statement of any other shape, or
    one DuckDB cannot bind so extended, runs as it is."""
    if not companions:
        return sql
    try:
        tree = json.loads(cur.execute("SELECT json_serialize_sql($1)", [sql]).fetchone()[0])
    except Exception:
        return sql
    statements = tree.get("statements") or []
    node = statements[0].get("node", {}) if len(statements) == 1 else {}
    items = node.get("select_list") or []
    if (
        tree.get("error")
        or node.get("type") != "SELECT_NODE"
        or node.get("group_expressions")
        or any(m.get("type") == "DISTINCT_MODIFIER" for m in node.get("modifiers") or [])
        or any(i.get("type") != "COLUMN_REF" for i in items)
    ):
        return sql
    added = []
    for item in items:
        names = item["column_names"]
        companion = names[-1] + PG_TEXT_SUFFIX
        if companion in companions:
            alias = (item.get("alias") or names[-1]) + PG_TEXT_SUFFIX
            added.append(dict(item, column_names=[*names[:-1], companion], alias=alias))
    if not added:
        return sql
    node["select_list"] = items + added
    try:
        extended = cur.execute("SELECT json_deserialize_sql($1)", [json.dumps(tree)]).fetchone()[0]
        cur.execute(f"DESCRIBE {extended}")
    except Exception:
        return sql
    return str(extended)


def paired(names: list[str]) -> tuple[list[int], dict[int, int]]:
    """Of a result's column names: the indexes served, and for each, the index of its
    companion (`name__pg_text` beside `name`, which is not served)."""
    index = {n: i for i, n in enumerate(names)}
    hidden = {
        i
        for i, n in enumerate(names)
        if n.endswith(PG_TEXT_SUFFIX) and n[: -len(PG_TEXT_SUFFIX)] in index
    }
    shown = [i for i in range(len(names)) if i not in hidden]
    return shown, {
        i: index[names[i] + PG_TEXT_SUFFIX]
        for i in shown
        if index.get(names[i] + PG_TEXT_SUFFIX) in hidden
    }
