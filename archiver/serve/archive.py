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

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from archiver.bulk import BulkPool
from archiver.config import Settings, StorageLocation
from archiver.errors import InputError, StorageError, first_line
from archiver.ident import TableName, as_typed, quote_ident
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.query import catalog, statement
from archiver.query.catalog import File, Snapshot
from archiver.query.views import archived_copies, file_ranges
from archiver.serve.types import Column, column_for

KEPT = "archiver_kept"  # the schema of the kept relations
FILE_ID = "_archiver_file"  # the column naming a row's file (its catalog id)
RETRIES = 3
REFUSED_WORDS = frozenset(("PRAGMA", "SUMMARIZE", "SHOW", "DESCRIBE"))  # DuckDB's own
BATCH_ROWS = 10_000


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
            self._cursor.execute("USE memory")
            self._cursor.execute(f"DETACH {self._database}")
        finally:
            self._cursor.close()

    def interrupt(self) -> None:
        self._cursor.interrupt()


class ServedArchive:
    """The process's DuckDB over the archive at `location`, and its catalog connections."""

    def __init__(self, settings: Settings, location: StorageLocation) -> None:
        import duckdb

        from archiver.query.engine import _azure_secret, load_extension

        self.settings = settings
        self.location = location
        self.pool = BulkPool(idle_seconds=60.0)
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
        db.execute("SET lock_configuration = true")  # no statement changes any of it
        self.db = db

    def close(self) -> None:
        self.pool.close()
        self.db.close()

    def run(self, sql: str, params: list[Any], started: Callable[[Any], None]) -> Result:
        """Run one SELECT (refused before anything runs otherwise) over the archive at a
        fresh catalog snapshot; again at a newer one when a file went meanwhile.
        `started` is handed each DuckDB cursor the statement runs on (to interrupt it)."""
        statement.refuse_writes(sql)
        word = sql.lstrip(" \t\r\n(").split(None, 1)[0].upper() if sql.strip() else ""
        if word in REFUSED_WORDS:  # DuckDB parses these as SELECTs of its own tables
            raise InputError(f"query: {word} refused: archiver serve only reads the archive")
        refs = statement.references(sql)
        plain, kept = _named(refs)
        for attempt in range(1, RETRIES + 1):
            plain_snapshot, kept_snapshot = self._catalog(plain, kept, refs)
            try:
                return self._execute(sql, params, refs, plain_snapshot, kept_snapshot, started)
            except _FileGone:
                if attempt == RETRIES:
                    raise StorageError(
                        "serve: the archive's files changed under the statement three times; "
                        "run it again"
                    ) from None
        raise AssertionError("unreachable")

    def _catalog(
        self, plain: set[str] | None, kept: set[str], refs: list[statement.Reference] | None
    ) -> tuple[Snapshot | None, Snapshot | None]:
        def bounded(table: str) -> bool:
            return refs is not None and catalog.bounded(table, refs)

        with self.pool.connection(self.settings.database_url) as conn:
            here = str(self.location)
            snapshots: list[Snapshot | None] = []
            for named, retired in ((plain, False), (kept, True)):
                if named is not None and not named:
                    snapshots.append(None)
                    continue
                snapshot = catalog.read_catalog(
                    conn, here, named, live=True, bounded=bounded, retired=retired
                )
                conn.rollback()
                for table in _not_yet_archived(conn, named or set(), snapshot):
                    snapshot.files[table] = []  # read as empty, not as unknown
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
        refs: list[statement.Reference] | None,
        plain: Snapshot | None,
        kept: Snapshot | None,
        started: Callable[[Any], None],
    ) -> Result:
        import duckdb

        name = f"q{next(self._numbers)}"
        cur = self.db.cursor()
        started(cur)
        cur.execute(f"ATTACH ':memory:' AS {name}")
        cur.execute(f"USE {name}")
        try:
            referenced = _columns_named(sql) - {FILE_ID}
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
                    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(target[0])}")
                    cur.execute(
                        f"CREATE VIEW {quote_ident(target[0])}.{quote_ident(target[1])} AS {body}"
                    )
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
            return Result(columns, shown, companion_of, cur, batches, first, name)
        except BaseException:
            cur.execute("USE memory")
            cur.execute(f"DETACH {name}")
            cur.close()
            raise

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


class _FileGone(Exception):
    """A file of the snapshot was deleted before it was read."""


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


def _not_yet_archived(conn: Any, named: set[str], snapshot: Snapshot) -> list[str]:
    """Of the schema-qualified tables a statement names, those the catalog has nothing of
    that exist in its database (the application's, by default): `archiver attach`
    declares a table before its first file."""
    unknown = [
        n for n in named if "." in n and n.casefold() not in {t.casefold() for t in snapshot.files}
    ]
    if not unknown:
        return []
    with conn.cursor() as cur:
        cur.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND c.oid IN "
            "(SELECT to_regclass(t) FROM jsonb_array_elements_text($1::jsonb) t)",
            (json.dumps([TableName.parse(n).sql for n in unknown]),),
        )
        found = [str(r[0]) for r in cur.fetchall()]
    conn.rollback()
    return found


def _as_read(refs: list[statement.Reference], kept: bool) -> list[statement.Reference]:
    """The references to the plain relations, or to the kept ones named as their table."""
    out = []
    for ref in refs:
        schema, _, rest = ref.table.partition(".")
        is_kept = schema.casefold() == KEPT and bool(rest)
        if is_kept == kept:
            out.append(statement.Reference(rest if kept else ref.table, ref.columns))
    return out


def _columns_named(sql: str) -> set[str]:
    """Every column name `sql` writes (its parse's column references)."""
    import duckdb

    try:
        row = duckdb.connect().execute("SELECT json_serialize_sql($1)", [sql]).fetchone()
    except duckdb.Error:
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
