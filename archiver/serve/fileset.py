"""Which files a statement reads: the tables it names (as written, its parameters taken
as constants), resolved in the catalog's database, their files at one catalog query --
committed, and for the kept relations the retired files some snapshot may still see
committed -- and those its constraints on key and cutoff leave out, pruned before any
is opened (archiver.query's pruning)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any

from archiver.bulk import BulkConnection, open_bulk
from archiver.errors import ConfigError, InputError
from archiver.ident import as_typed
from archiver.query import catalog, statement
from archiver.query.catalog import File, Snapshot
from archiver.store import reads

KEPT = "archiver_kept"  # the schema of the kept relations


class FileSet:
    """The catalog reads of one serve process: a connection per serving thread."""

    def __init__(self, url: str, storage: str) -> None:
        self.url = url
        self.storage = storage
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[tuple[BulkConnection, Any]] = []  # each thread's, with its cursor

    def files(
        self, sql: str, params: list[Any], parser: Any, tree: dict[str, Any] | None
    ) -> tuple[Snapshot | None, Snapshot | None]:
        """The files `sql` (`params` bound) may read of its plain and of its kept
        relations (None: it names none), from its parse `tree` (DuckDB's; None where it
        has none: then it may read every archived table)."""
        refs = None if tree is None else statement.references(sql, tree=tree, params=params)
        plain, kept = _named(refs)
        return self._catalog(plain, kept, refs)

    def _cursor(self) -> tuple[BulkConnection, Any]:
        """This thread's catalog connection and the cursor FILES runs on, opened once
        (a cursor kept prepares its statement once)."""
        found: tuple[BulkConnection, Any] | None = getattr(self._local, "held", None)
        if found is None:
            conn = open_bulk(self.url)
            found = self._local.held = (conn, conn.cursor())
            with self._lock:
                self._opened.append(found)
        return found

    def close(self) -> None:
        """Every thread's connection, closed (serve is stopping): its kept cursor first (a
        cursor collected after its connection closed fails in ADBC's __del__)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for held in opened:
            for part in reversed(held):
                with contextlib.suppress(Exception):
                    part.close()

    def check_primary(self) -> None:
        """Refuse a catalog database in recovery: its readers' snapshots are a standby's,
        which the primary's reaping does not see (archiver_seen_committed)."""
        conn, _ = self._cursor()
        with conn.cursor() as cur:
            cur.execute("SELECT pg_is_in_recovery()")
            standby = bool(cur.fetchall()[0][0])
        conn.rollback()
        if standby:
            raise ConfigError(
                "serve: ARCHIVER_DATABASE_URL is a standby in recovery: serve reads the "
                "catalog on the primary, where the files a view's snapshot sees are kept"
            )

    def _read(self, names: list[str], retired: bool) -> list[tuple[Any, ...]]:
        """FILES on this thread's connection, once more on a new one if it broke; a bare
        table name (`orders`, or `*`: every table) resolved as archiver query resolves
        it first."""
        for attempt in (1, 2):
            held = self._cursor()
            conn, files = held
            try:
                bare = [n for n in names if "." not in n]
                tables = [n for n in names if "." in n]
                if bare:
                    with conn.cursor() as cur:
                        found = (
                            reads.archived_tables(cur)
                            if "*" in bare
                            else reads.named_tables(cur, bare)
                        )
                    tables += found
                rows = reads.served_files(files, tables, self.storage, retired)
                conn.rollback()
                return rows
            except Exception:
                self._local.held = None
                with self._lock:
                    if held in self._opened:
                        self._opened.remove(held)
                for part in (files, conn):
                    with contextlib.suppress(Exception):
                        part.close()
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
                file = File(str(path), row[5], row[6], row[7], row[8], row[9], row[10], unsure)
                files.append(dataclasses.replace(file, id=int(row[11])))
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
