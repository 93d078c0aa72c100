"""Bulk connections to PostgreSQL through the ADBC driver (rows as Arrow, COPY BINARY
decoded in C), synchronous, run in threads; the driver's database object a process shares
and the pool its context keeps them in (archiver.context). The check that the driver
writes values back exactly is restore's (archiver.driver_check)."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, cast
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import adbc_driver_manager

from archiver import db
from archiver.db import application_name, query
from archiver.errors import DatabaseUnavailable, first_line, redact

log = logging.getLogger(__name__)

Row = tuple[Any, ...]


class BulkCursor(Protocol):
    """The part of an ADBC (DB-API) cursor archiver uses."""

    @property
    def description(self) -> Any: ...
    @property
    def adbc_statement(self) -> Any: ...
    @property
    def rowcount(self) -> int: ...  # rows executemany's statement changed
    def execute(self, operation: str, parameters: Any = None) -> None: ...
    def executemany(self, operation: str, seq_of_parameters: Any) -> None: ...
    def fetchall(self) -> list[Row]: ...
    def fetch_record_batch(self) -> Any: ...  # a pyarrow.RecordBatchReader
    def fetch_arrow_table(self) -> Any: ...  # a pyarrow.Table
    def adbc_ingest(
        self,
        table_name: str,
        data: Any,
        mode: str = ...,
        *,
        temporary: bool = ...,
        db_schema_name: str | None = ...,
    ) -> int: ...
    def __enter__(self) -> BulkCursor: ...
    def __exit__(self, *exc: object) -> None: ...


class BulkConnection(Protocol):
    """A synchronous ADBC connection to PostgreSQL: bulk rows as Arrow, in a thread.

    A seam so the data path is typed; the ADBC driver's DB-API connection is the one
    implementation (its own package ships no type hints)."""

    @property
    def adbc_connection(self) -> Any: ...  # set_autocommit(), for VACUUM
    def cursor(self) -> BulkCursor: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


def record_batches(cur: BulkCursor) -> Any:
    """The cursor's result as a pyarrow.RecordBatchReader whose errors keep the server's
    SQLSTATE. The driver's public fetch_record_batch() returns pyarrow's bare reader, on
    which an error raised while rows stream (a lock timeout or a deadlock amid a DELETE
    ... RETURNING) is a plain ArrowInvalid with no SQLSTATE; the driver manager's own
    wrapper asks the driver for the error's details (adbc-driver-manager 1.13)."""
    reader = getattr(getattr(cur, "_results", None), "reader", None)
    return reader if reader is not None else cur.fetch_record_batch()


def fetch_and_rollback(conn: BulkConnection, sql: str, params: tuple[Any, ...] = ()) -> list[Row]:
    """Run one read-only query and roll its transaction back: catalog lookups, EXPLAIN."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            return cur.fetchall()
    finally:
        conn.rollback()


def fetch_records(
    conn: BulkConnection, sql: str, params: tuple[Any, ...] = ()
) -> list[dict[str, Any]]:
    """fetch_and_rollback, each row a dict by its columns' names."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            names = [d[0] for d in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        conn.rollback()


def run_in_transaction(conn: BulkConnection, sql: str, params: tuple[Any, ...] = ()) -> list[Row]:
    """One statement in the connection's open transaction, left open (the caller
    commits): its rows, if it returns any."""
    with conn.cursor() as cur:
        cur.execute(sql, params or None)
        return cur.fetchall() if cur.description is not None else []


def fetch_in_transaction(conn: BulkConnection, sql: str, params: tuple[Any, ...] = ()) -> list[Row]:
    """One query in the connection's open transaction, left open (fetch_and_rollback ends it):
    a transaction-scoped lock taken before a commit."""
    with conn.cursor() as cur:
        cur.execute(sql, params or None)
        return cur.fetchall()


class _DeferredModule(types.ModuleType):
    """Stands in for a module until one of its attributes is asked for, then imports it.

    adbc_driver_manager.dbapi imports pyarrow.dataset as it is imported, for the
    isinstance checks of adbc_ingest alone: start-up time and memory for every process
    that opens a bulk connection (the CLI's, the worker's). Deferred, it loads
    on first use (restore's adbc_ingest). The standard library's LazyLoader does not survive a second
    `import` of the module on Python 3.11 (the import system reads its __spec__)."""

    @classmethod
    def install(cls, name: str) -> None:
        stand_in = cls(name)
        sys.modules[name] = stand_in
        parent, _, child = name.rpartition(".")
        setattr(importlib.import_module(parent), child, stand_in)

    def __getattr__(self, attribute: str) -> Any:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attribute)


@contextmanager
def _absent(name: str) -> Iterator[None]:
    """Module `name` unimportable meanwhile, unless it was imported already.

    adbc_driver_manager.dbapi imports polars wherever it is installed, to register a
    backend for binding polars frames, which archiver never does: an import that
    every process opening a bulk connection paid in a virtualenv holding polars (its tests',
    and a user's whose archiver shares one with their analysts' tools)."""
    if name in sys.modules:
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get(name, 0) is None:
            del sys.modules[name]


_driver: str | None = None  # ARCHIVER_ADBC_DRIVER, or None: the wheel's own library


def use_driver(path: str | None) -> None:
    """Load bulk connections' driver from `path` (a checked ARCHIVER_ADBC_DRIVER), or
    from the adbc-driver-postgresql wheel when None."""
    global _driver
    _driver = path


class _Databases:
    """The ADBC database object behind a process's bulk connections: one per driver and
    URL, shared by the connections opened within `reuse_seconds` of its making.

    Making one costs a connection of its own (the driver asks the server's version); by
    default the driver would also read the server's whole pg_type into it, which costs
    more than the connection, so it is made with the driver's own table of PostgreSQL's
    built-in types (`BUILT_IN_TYPES`; a driver without that mode
    reads pg_type). Every column archiver reads through the driver is of a built-in type:
    columns of other types (enums, composites, an extension's) are selected as their
    text (archiver.pgtypes), a domain arrives as its base type, and an array of a domain
    is selected as its base type's array. A connection opened from a made one is cheap.
    `reuse_seconds` bounds how old its picture
    of the server gets (its version after an upgrade, a failover behind the same name).

    Connections are opened and closed outside any lock here, in whichever thread (a
    lock held across a connect that hangs would hold up every other thread's close,
    the worker's event loop among them). What that leaves unguarded is the driver's
    count of its database object's open connections, a plain integer: a miscount makes
    a close or the object's release report an error, which is ignored, and at worst
    keeps the object in memory until the process ends."""

    def __init__(self, reuse_seconds: float = 300.0) -> None:
        self.reuse_seconds = reuse_seconds
        self._lock = threading.Lock()
        self._kept: dict[tuple[str | None, str], tuple[float, Any]] = {}

    def connect(self, driver: str | None, url: str) -> BulkConnection:
        import adbc_driver_manager.dbapi as dbapi

        from archiver.bulk_parameters import Binding

        holder = getattr(dbapi, "_SharedDatabase", None)  # 1.13's; without it, none is shared
        if holder is None:
            database = self._make(driver, url)
            connection = adbc_driver_manager.AdbcConnection(database)
            return cast(BulkConnection, dbapi.Connection(database, connection, backend=Binding()))
        shared = self._held(holder, driver, url)
        try:
            connection = adbc_driver_manager.AdbcConnection(shared._db)
            return cast(BulkConnection, dbapi.Connection(shared, connection, backend=Binding()))
        finally:
            with contextlib.suppress(adbc_driver_manager.Error):
                shared.close()  # this call's hold: the connection keeps one of its own

    def _held(self, holder: Any, driver: str | None, url: str) -> Any:
        """The shared database of `driver` and `url`, held for the caller (who closes that
        hold) so that a thread replacing it meanwhile cannot release it under them."""
        key = (driver, url)
        with self._lock:
            made, shared = self._kept.get(key, (0.0, None))
            if shared is not None and made >= time.monotonic() - self.reuse_seconds:
                return shared.clone()
        shared = holder(self._make(driver, url))  # held by this cache
        held = shared.clone()
        with self._lock:
            replaced = self._kept.get(key, (0.0, None))[1]
            self._kept[key] = (time.monotonic(), shared)
        if replaced is not None:
            with contextlib.suppress(adbc_driver_manager.Error):
                replaced.close()  # this cache's hold: its open connections keep it meanwhile
        return held

    @staticmethod
    def _make(driver: str | None, url: str) -> Any:
        """The driver's database object, its types the driver's own table of PostgreSQL's
        built-in ones where the driver has that mode (1.13), not the server's pg_type read
        whole: every column archiver reads through the driver is of a built-in type."""
        import adbc_driver_postgresql

        def make(options: dict[str, str]) -> Any:
            if driver is None:
                return adbc_driver_postgresql.connect(url, db_kwargs=options)
            return adbc_driver_manager.AdbcDatabase(driver=driver, uri=url, **options)

        try:
            return make(BUILT_IN_TYPES)
        except adbc_driver_manager.NotSupportedError:  # a driver without that mode
            return make({})


# The driver's own table of built-in types, instead of reading the server's pg_type.
BUILT_IN_TYPES = {"adbc.postgresql.type_resolver_mode": "builtin"}
_DATABASES = _Databases()


def libpq_url(url: str) -> str:
    """`url` with libpq's TCP keepalive, tcp_user_timeout (db.KEEPALIVE_IDLE...: a dead
    flow ends the session) and the process's application_name, where it names none
    (quoted, not quote_plus'd: libpq reads no '+' as a space)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    wanted = {
        "keepalives": "1",
        "keepalives_idle": str(db.KEEPALIVE_IDLE),
        "keepalives_interval": str(db.KEEPALIVE_INTERVAL),
        "keepalives_count": str(db.KEEPALIVE_COUNT),
        "tcp_user_timeout": str(db.USER_TIMEOUT_MS),
    }
    wanted = {} if any(k in query for k in wanted) else wanted
    wanted |= {} if "application_name" in query else {"application_name": application_name()}
    made = urlencode({**query, **wanted}, quote_via=quote)
    return urlunsplit(parts._replace(query=made)) if wanted else url


def open_bulk(url: str) -> BulkConnection:
    """A new ADBC connection, its session in UTC so dates and naive timestamps convert the
    same way everywhere."""
    if "pyarrow.dataset" not in sys.modules:
        _DeferredModule.install("pyarrow.dataset")
    with _absent("polars"):
        import adbc_driver_postgresql.dbapi  # noqa: F401  (imports pyarrow: only for bulk work)

    try:
        conn = _DATABASES.connect(_driver, libpq_url(url))
    except adbc_driver_manager.Error as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {redact(url)}: {first_line(exc)}"
        ) from None
    try:
        with conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
        conn.commit()
    except BaseException:
        _close_quietly(conn)
        raise
    log.debug("bulk connection opened to %s", redact(url))
    return conn


def _close_quietly(conn: BulkConnection) -> None:
    with contextlib.suppress(adbc_driver_manager.Error):  # a terminated backend
        conn.close()


class BulkPool:
    """ADBC connections kept between a worker's jobs, or a command's steps.

    Opening one costs a server process and three round trips (and the driver's
    database object, shared: _Databases). A connection goes back to the pool only after
    its user ended without an exception, is rolled back first, and holds no session
    advisory lock (one that does is closed: a ledger operation's or a publisher's lock
    never outlives the step that took it); one idle longer than `idle_seconds` is closed
    (`prune`, called from the worker's loop and on every take: servers, poolers and
    firewalls drop idle sessions), and every reused one answers a query first (its
    backend's pid, kept for `backend_pid`), so a connection the server dropped costs a
    reconnect, never an attempt. What else a user changes on a session it puts back
    itself: SET LOCAL and set_config(..., true) end with the transaction, temporary
    tables are dropped or rolled back with it, a job's session lock_timeout
    (source.binding) and VACUUM's autocommit (source.guardrails) are restored in a
    `finally`; the two settings `open_bulk` makes stay."""

    def __init__(
        self,
        idle_seconds: float = 60.0,
        open_connection: Callable[[str], BulkConnection] = open_bulk,
    ) -> None:
        self.idle_seconds = idle_seconds
        self._open = open_connection
        self._idle: dict[str, list[tuple[float, BulkConnection]]] = {}
        self._pids: dict[BulkConnection, int] = {}  # of every connection it holds
        self._lock = threading.Lock()
        self._closed = False  # a connection given back after close() is closed too

    def _take(self, url: str) -> BulkConnection:
        self.prune()
        while True:
            with self._lock:
                idle = self._idle.get(url)
                taken = idle.pop() if idle else None
            conn = self._open(url) if taken is None else taken[1]
            try:
                pid = int(fetch_and_rollback(conn, "SELECT pg_backend_pid()")[0][0])
            except adbc_driver_manager.Error:
                self._discard(conn)
                if taken is None:
                    raise
                continue
            with self._lock:
                self._pids[conn] = pid
            return conn

    def _discard(self, conn: BulkConnection) -> None:
        with self._lock:
            self._pids.pop(conn, None)
        _close_quietly(conn)

    def backend_pid(self, conn: BulkConnection) -> int:
        """The server process of a connection this pool handed out (to end its
        transaction from elsewhere with pg_terminate_backend)."""
        with self._lock:
            return self._pids[conn]

    def prune(self) -> None:
        """Close the connections idle for longer than `idle_seconds`."""
        oldest = time.monotonic() - self.idle_seconds
        with self._lock:
            stale = [c for conns in self._idle.values() for since, c in conns if since < oldest]
            for url, conns in self._idle.items():
                self._idle[url] = [(since, c) for since, c in conns if since >= oldest]
        for conn in stale:
            self._discard(conn)

    @contextmanager
    def connection(self, url: str) -> Iterator[BulkConnection]:
        conn = self._take(url)
        try:
            yield conn
        except BaseException:
            self._discard(conn)
            raise
        try:
            conn.rollback()
            locks = fetch_and_rollback(conn, query("session_advisory_locks"))[0][0]
        except adbc_driver_manager.Error:
            self._discard(conn)
            return
        with self._lock:
            if not locks and not self._closed:
                self._idle.setdefault(url, []).append((time.monotonic(), conn))
                return
        self._discard(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, {}, True
        for conns in idle.values():
            for _, conn in conns:
                self._discard(conn)
