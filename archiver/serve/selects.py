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
column returns its companion's value where it has one: text.text_values) and, for a
statement that names it, `_archiver_file`; neither is shown unless named
(archiver.serve.hidden). A statement reads each as the SELECT of its files, written in
its place (archiver.serve.inlining)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from archiver.config import Settings, StorageLocation
from archiver.errors import InputError, StorageError, first_line
from archiver.ident import quote_ident
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.query import statement
from archiver.query.catalog import File, Snapshot
from archiver.query.engine import _azure_secret, connect, load_extension
from archiver.query.views import archived_copies, file_ranges
from archiver.serve import companions, dialect, hidden, inlining
from archiver.serve.definitions import Definitions, FileColumns
from archiver.serve.fileset import KEPT, FileSet
from archiver.serve.hidden import FILE_ID
from archiver.serve.types import Column, column_for

SOURCE_COLUMN = "_archiver_source"  # attach's _all view: which side a row came from
RETRIES = 3
REFUSED_WORDS = frozenset(("PRAGMA", "SUMMARIZE", "SHOW", "DESCRIBE"))  # DuckDB's own
BATCH_ROWS = 10_000
PARSES = 512  # statements whose parse is kept (oldest first out)


@dataclass
class Result:
    """A running statement's result: its columns as served and its batches, streamed."""

    columns: list[Column]
    shown: list[int]  # the batch column of each served column
    companion_of: dict[int, int]  # batch column -> the batch column of its companion
    _cursor: Any
    _batches: Iterator[pa.RecordBatch]
    _first: pa.RecordBatch | None
    _release: Callable[[], None]  # what the statement held beside its cursor
    closed: bool = field(default=False)
    tables: list[str] = field(default_factory=list)  # schema.table read (the audit's)
    read: list[str] = field(default_factory=list)  # schema.table.column named of them

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
            self._release()

    def interrupt(self) -> None:
        self._cursor.interrupt()


@dataclass(frozen=True)
class _Parse:
    """What serve reads of a statement's text, once per text."""

    sql: str  # in DuckDB's words
    tree: dict[str, Any] | None  # DuckDB's parse (None: a PIVOT, which has none in JSON)
    referenced: set[str]  # the column names it writes, but _archiver_file
    file_named: bool  # it names _archiver_file
    written: set[str]  # every name it gives a column (hidden.written)
    star: bool  # it selects *


class ServedArchive:
    """The process's DuckDB over the archive at `location`, and its catalog connections."""

    def __init__(self, settings: Settings, location: StorageLocation) -> None:
        self.settings = settings
        self.location = location
        self.fileset = FileSet(settings.database_url, str(location))
        self.fileset.check_primary()
        self._files: dict[str, FileColumns] = {}
        self._parses: dict[str, _Parse] = {}  # by statement text
        self._lock = threading.Lock()
        db = connect()  # loading turned off below, before any statement
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
        # the names of DuckDB's own settings: a client's SET of one is refused as such
        self.engine_settings = frozenset(
            r[0].lower() for r in db.execute("SELECT name FROM duckdb_settings()").fetchall()
        )
        db.execute("SET lock_configuration = true")  # no statement changes any of it
        self.db = db
        self.writer = inlining.Writer()
        self.definitions = Definitions(settings, str(location), self.describe)
        self.definitions.start()

    def describe(self, path: str) -> FileColumns:
        """A catalogued file's columns (read once per process)."""
        cur = self.db.cursor()
        try:
            return self._described(cur, self.location.reader_uri(path))
        finally:
            cur.close()

    def close(self) -> None:
        self.fileset.close()
        self.definitions.close()
        self.db.close()

    def run(self, sql: str, params: list[Any], started: Callable[[Any], None],
            names: tuple[str, ...] | None = None) -> Result:  # fmt: skip
        """Run one SELECT (refused before anything runs otherwise) over the archive at a
        fresh catalog snapshot; again at a newer one when a file went meanwhile.
        `started` is handed each DuckDB cursor the statement runs on (to interrupt it);
        `names`, its columns' names as PostgreSQL gives them, replace DuckDB's."""
        self.definitions.refresh_quietly()
        parse = self._parsed(sql)
        for attempt in range(1, RETRIES + 1):
            plain, kept = self.fileset.files(parse.sql, params, parse.tree)
            try:
                result = self._execute(parse, params, plain, kept, started)
                result.tables, result.read = self._read_of(parse, plain, kept)
                if names is not None and len(names) == len(result.columns):
                    result.columns = [
                        dataclasses.replace(c, name=n)
                        for c, n in zip(result.columns, names, strict=True)
                    ]
                return result
            except _FileGone:
                if attempt == RETRIES:
                    raise StorageError(
                        "serve: the archive's files changed under the statement three "
                        "times; run it again"
                    ) from None
        raise AssertionError("unreachable")

    def _read_of(self, parse: _Parse, *snapshots: Snapshot | None) -> tuple[list[str], list[str]]:
        """The tables a statement reads (schema.table), and schema.table.column of each
        of their columns it names (every shown one where it selects `*`)."""
        tables = sorted({t for s in snapshots if s is not None for t in s.files})
        named = parse.referenced | ({FILE_ID} if parse.file_named else set())
        columns = []
        for table in tables:
            served = self.definitions.tables.get(table)
            for column in served.columns if served is not None else ():
                if column.name in named or (parse.star and not hidden.hidden(column.name)):
                    columns.append(f"{table}.{column.name}")
        return tables, columns

    def tables_named(self, text: str) -> list[str]:
        """schema.table of each served table a statement names (a bare name: each served
        table of that name), as DuckDB parses it; none where it does not parse."""
        try:
            tree = self._parsed(text).tree
        except Exception:
            return []
        named = set()
        stack: list[Any] = [tree or {}]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if node.get("type") == "BASE_TABLE" and node.get("table_name"):
                    named.add((str(node.get("schema_name") or ""), str(node["table_name"])))
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        return sorted(
            t
            for t in self.definitions.tables
            for schema, name in named
            if t.split(".", 1)[1] == name and schema in ("", t.split(".", 1)[0])
        )

    def _parsed(self, text: str) -> _Parse:
        """A statement as serve reads it, once per statement text (a client's prepared
        statement runs again and again with other parameters); refused, before anything
        runs, unless it is one SELECT."""
        with self._lock:
            found = self._parses.get(text)
        if found is not None:
            return found
        sql = dialect.in_duckdb(text)
        word = sql.lstrip(" \t\r\n(").split(None, 1)[0].upper() if sql.strip() else ""
        if word in REFUSED_WORDS:  # DuckDB parses these as SELECTs of its own tables
            raise InputError(f"query: {word} refused: archiver serve only reads the archive")
        parser = self.db.cursor()
        try:
            # only one SELECT serializes; anything else is refused in archiver query's words
            tree = statement.serialized(sql, parser)
            if tree is None or len(tree.get("statements") or []) != 1:
                statement.refuse_writes(sql, parser)
        finally:
            parser.close()
        named = companions.columns_named(tree)
        star = '"STAR"' in json.dumps(tree) if tree is not None else True
        found = _Parse(sql, tree, named - {FILE_ID}, FILE_ID in named, hidden.written(tree), star)
        with self._lock:
            if len(self._parses) >= PARSES:
                self._parses.pop(next(iter(self._parses)))
            self._parses[text] = found
        return found

    def _execute(
        self,
        parse: _Parse,
        params: list[Any],
        plain: Snapshot | None,
        kept: Snapshot | None,
        started: Callable[[Any], None],
    ) -> Result:
        import duckdb

        cur = self.db.cursor()
        started(cur)
        release: Callable[[], None] = lambda: None  # noqa: E731
        try:
            types: dict[str, str] = {}  # column -> its original type, the newest file's
            companion_columns: set[str] = set()
            list_columns: set[str] = set()
            bodies: dict[tuple[str, str], str] = {}  # (schema, table) -> its rows' SELECT
            for snapshot, retired in ((plain, False), (kept, True)):
                if snapshot is None:
                    continue
                self._check_files(cur, snapshot)
                for table, files in snapshot.files.items():
                    schema, bare = table.split(".", 1)
                    body, described = self._body(cur, files, parse)
                    for one in described:
                        for column, type_sql in one.types.items():
                            types.setdefault(column, type_sql)
                        companion_columns.update(c for c in one.kinds if c.endswith(PG_TEXT_SUFFIX))
                        list_columns.update(c for c, k in one.kinds.items() if k.endswith("[]"))
                    bodies[(KEPT, table) if retired else (schema, bare)] = body
            plain_sql = dialect.list_literals(parse.sql, list_columns)
            parsed = parse.tree if plain_sql == parse.sql else None
            try:
                served, appended, release = self.writer.written(
                    cur, plain_sql, parsed, companion_columns, bodies, parse.file_named
                )
                reader = cur.execute(served, params or None).fetch_record_batch(BATCH_ROWS)
            except duckdb.BinderException:
                if not companion_columns:
                    raise
                # the companions made it unbindable (a name both sides of a join have)
                release()
                served, appended, release = self.writer.written(
                    cur, plain_sql, parsed, set(), bodies, parse.file_named
                )
                reader = cur.execute(served, params or None).fetch_record_batch(BATCH_ROWS)
            batches = iter(reader)
            first = next(batches, None)
            fields = list(reader.schema)
            shown, companion_of = companions.paired(
                [f.name for f in fields], appended, parse.written
            )
            registry = self.definitions.registry
            columns = [
                column_for(fields[i].name, fields[i].type, types.get(fields[i].name), registry)
                for i in shown
            ]
            return Result(columns, shown, companion_of, cur, batches, first, release)
        except BaseException as exc:
            cur.close()
            release()
            if isinstance(exc, duckdb.IOException):  # a footer or a file's rows not read
                if any(
                    self.location.reader_uri(f.path) in str(exc)
                    for s in (plain, kept)
                    if s is not None
                    for files in s.files.values()
                    for f in files
                ):
                    raise _FileGone() from None  # retired and deleted meanwhile: again
                raise StorageError(
                    f"serve: the archive could not be read: {first_line(exc)}"
                ) from None
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

    def _body(self, cur: Any, files: list[File], parse: _Parse) -> tuple[str, list[FileColumns]]:
        """A table's view over `files` and what each file holds (newest first: its
        columns' order and types win), `_archiver_file` where the statement names it,
        or, with no file, an empty relation of the columns the statement names."""
        if not files:
            names = sorted(parse.referenced) or ["_archiver_none"]
            cols = ", ".join(f"NULL AS {quote_ident(c)}" for c in names)  # of any type
            if parse.file_named:
                cols += f", CAST(NULL AS BIGINT) AS {FILE_ID}"
            return f"SELECT {cols} WHERE false", []
        parts = []
        held = []
        for file in reversed(files):
            uri = self.location.reader_uri(file.path)
            described = self._described(cur, uri)
            held.append(described)
            scan = "read_parquet('" + uri.replace("'", "''") + "')"
            ranges = file_ranges(file, described.kinds)
            file_id = f", CAST({file.id} AS BIGINT) AS {FILE_ID}" if parse.file_named else ""
            parts.append(f"SELECT *{file_id} FROM {scan}" + (f" WHERE {ranges}" if ranges else ""))
        return " UNION ALL BY NAME ".join(parts), held


class _FileGone(Exception):
    """A file of the snapshot was deleted before it was read."""
