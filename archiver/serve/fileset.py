"""Which files a statement reads: the tables it names (as written, its parameters taken
as constants), resolved in the catalog's database, their files at one catalog query --
committed, and for the kept relations the retired files some snapshot may still see
committed -- and those its constraints on key and cutoff leave out, pruned before any
is opened (archiver.query's pruning)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from psycopg import pq
from psycopg.conninfo import make_conninfo
from psycopg.pq.abc import PGconn

from archiver.errors import ConfigError, DatabaseUnavailable, InputError, redact
from archiver.ident import as_typed
from archiver.query import catalog, statement
from archiver.query.catalog import File, Snapshot
from archiver.serve.watchdog import WATCHDOG
from archiver.store.served import served_files

KEPT = "archiver_kept"  # the schema of the kept relations


CATALOG_SECONDS = 5.0  # what a statement waits for the catalog's list of its files at most


class FileSet:
    """The catalog reads of one serve process: a connection per serving thread."""

    def __init__(self, url: str, storage: str) -> None:
        self.url = url
        self.storage = storage
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[PGconn] = []  # each thread's

    def files(
        self, sql: str, params: list[Any], tree: dict[str, Any] | None
    ) -> tuple[Snapshot | None, Snapshot | None]:
        """The files `sql` (`params` bound) may read of its plain and of its kept
        relations (None: it names none), from its parse `tree` (DuckDB's; None where it
        has none: then it may read every archived table)."""
        refs = None if tree is None else statement.references(sql, tree=tree, params=params)
        plain, kept = _named(refs)
        return self._catalog(plain, kept, refs)

    def _connection(self) -> PGconn:
        """This thread's catalog connection (libpq's, psycopg's binding), opened once."""
        found: PGconn | None = getattr(self._local, "held", None)
        if found is None:
            found = pq.PGconn.connect(
                make_conninfo(self.url, application_name="archiver serve").encode()
            )
            if found.status != pq.ConnStatus.OK:
                said = found.get_error_message()
                found.finish()
                raise DatabaseUnavailable(
                    f"serve: cannot connect to PostgreSQL at {redact(self.url)}: {str(said).strip()}"
                )
            # an OLTP lookup: JIT compiling its plan (estimated high: the planner cannot
            # tell how few files a key span meets) would cost more than the lookup
            found.exec_(b"SET jit = off")
            self._local.held = found
            with self._lock:
                self._opened.append(found)
        return found

    def close(self) -> None:
        """Every thread's connection, closed (serve is stopping)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            with contextlib.suppress(Exception):
                conn.finish()

    def check_primary(self) -> None:
        """Refuse a queue database in recovery: its readers' snapshots are a standby's,
        which the primary's reaping does not see (archiver_seen_committed)."""
        res = self._connection().exec_(b"SELECT pg_is_in_recovery()")
        if res.status != pq.ExecStatus.TUPLES_OK:
            said = res.error_message.decode(errors="replace").strip()
            raise DatabaseUnavailable(f"serve: the queue database did not answer: {said}")
        if res.get_value(0, 0) == b"t":
            raise ConfigError(
                "serve: ARCHIVER_DATABASE_URL is a standby in recovery: serve reads the "
                "catalog on the primary, where the files a view's snapshot sees are kept"
            )

    def _read(
        self, names: list[str], retired: bool, ranges: dict[str, list[Any]]
    ) -> list[tuple[Any, ...]]:
        """FILES on this thread's connection (its own snapshot: no transaction around
        it), once more on a new one if it broke; a bare table name (`orders`, or `*`:
        every table) resolved as archiver query resolves it, in the same query."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                with WATCHDOG.watch(conn.socket, CATALOG_SECONDS, "a read of the catalog"):
                    return served_files(conn, names, self.storage, retired, ranges)
            except Exception:
                if conn.status == pq.ConnStatus.OK and attempt == 1:
                    raise  # the query's own failure, not the connection's
                self._local.held = None
                with self._lock:
                    if conn in self._opened:
                        self._opened.remove(conn)
                with contextlib.suppress(Exception):
                    conn.finish()
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
        # one table read: the catalog leaves out what its key bounds prune (a key lookup's
        # one file comes back, not every file of the table)
        ranges = {}
        if refs is not None and not kept and len({r.table.casefold() for r in refs}) == 1:
            ranges = statement.integer_ranges(refs)
        rows = self._read(names, bool(kept), ranges)
        plain_refs = [statement.Reference(n) for n in plain or ()]
        snapshots: list[Snapshot | None] = []
        for wanted, retired in ((plain, False), (kept, True)):
            if wanted is not None and not wanted:
                snapshots.append(None)
                continue
            snapshot = Snapshot("", "")
            kept_names = {k.casefold() for k in kept}
            mine: dict[str, bool] = {}  # of each table, whether the statement reads it here
            for row in rows:
                table = str(row[0])
                if table not in mine:
                    mine[table] = (
                        table.casefold() in kept_names
                        if retired
                        else wanted is None or bool(statement.reads(table, plain_refs))
                    )
                if not mine[table]:
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
                files.append(
                    File(path, row[5], row[6], row[7], row[8], row[9], row[10], unsure, row[11])
                )
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


def _kept(ref: statement.Reference) -> str | None:
    """The table a reference names in the kept schema (schema.table), None: a plain one."""
    schema, _, rest = ref.table.partition(".")
    return rest if schema.casefold() == KEPT and rest else None


def _named(refs: list[statement.Reference] | None) -> tuple[set[str] | None, set[str]]:
    """The tables a statement names (None: not known, every archived table), and those
    it names in the kept schema (as schema.table)."""
    if refs is None:
        return None, set()
    kept = {k for r in refs if (k := _kept(r)) is not None}
    return {r.table for r in refs if _kept(r) is None}, kept


def _as_read(refs: list[statement.Reference], kept: bool) -> list[statement.Reference]:
    """The references to the plain relations, or to the kept ones named as their table."""
    out = []
    for ref in refs:
        table = _kept(ref)
        if (table is not None) == kept:
            out.append(statement.Reference(table if table is not None else ref.table, ref.columns))
    return out
