"""What a process works with, made once where the process starts and handed down to every
step that needs it: its settings, its name, its scratch directory, the one Storage over
ARCHIVER_STORAGE_URL, and its PostgreSQL sessions -- asyncpg for small queries, ADBC
(archiver.bulk) for rows as Arrow. Nothing below the entry points opens a session or a
storage of its own, nor finds one in ambient state: it is handed a Context (a layout test
holds it, tests/unit/test_layout.py).

Where one is made, and how it hands out sessions:

    cli.main            a one-shot command's (`shared_sessions`): one asyncpg session per
                        database shared by the command's steps in turn, one ADBC
                        connection per database the same way, closed when it ends
    worker, scheduler,  `cli.main` makes theirs as for a command, and the service opens
    console, serve      its pool of the queue database on it (`open_pool`); the worker's
                        job threads take the context's ADBC connections
    tests               `Context(settings, storage=...)`: any storage (a folder, the
                        in-memory one), a session opened per ask

What a step may leave on a shared session is nothing: a session is given back with no
transaction open and holding no session advisory lock, or it is closed
(docs/architecture.md, "The context")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from archiver import db
from archiver.bulk import BulkConnection, BulkPool
from archiver.config import Settings
from archiver.outcome import Side
from archiver.storage import open_storage
from archiver.storage.seam import Storage

T = TypeVar("T")
log = logging.getLogger(__name__)

# A command's shared session left idle longer than this (a step of bulk work or blob
# transfers between) is replaced rather than trusted: a network path may have dropped an
# idle flow without a word, and a statement on it would wait for TCP to give up.
HELD_IDLE_SECONDS = 30.0


@dataclass
class _Held:
    conn: asyncpg.Connection | None  # None while its first connect is under way
    loop: asyncio.AbstractEventLoop
    busy: bool = False
    used: float = 0.0  # time.monotonic() when last given back


class Context:
    """A process's settings, storage and sessions (the module's docstring says where one
    is made). `side`: a committing command's record of what stands (archiver.outcome)."""

    def __init__(
        self,
        settings: Settings,
        *,
        name: str = "archiver",
        workdir: Path | None = None,
        storage: Storage | None = None,
        side: Side | None = None,
        shared_sessions: bool = False,
    ) -> None:
        """`shared_sessions`: one asyncpg session and one ADBC connection per database,
        shared by the steps in turn (a one-shot command's); else a session per ask and
        ADBC connections kept between asks as a worker keeps them."""
        self.settings, self.name, self.side = settings, name, side
        self.workdir = workdir or Path(tempfile.gettempdir())
        self._storage = storage
        self.pool: asyncpg.Pool | None = None  # the queue database's, once a service opened it
        self._held: dict[str, _Held] | None = {} if shared_sessions else None
        self._iceberg: Any = None  # the Iceberg SQL catalog, once asked for
        self._iceberg_lock = threading.Lock()  # asked for by job threads at once
        self.bulk_pool = BulkPool(HELD_IDLE_SECONDS) if shared_sessions else BulkPool()

    # -- storage -------------------------------------------------------------------------

    def storage(self) -> Storage:
        """The archive's Storage, opened when first asked for, then the same one."""
        if self._storage is None:
            self._storage = open_storage(self.settings)
        return self._storage

    def iceberg(self, open_catalog: Callable[[Settings], Any]) -> Any:
        """The process's Iceberg catalog, made by `open_catalog`
        (archiver.iceberg.catalog's) when first asked for: pyiceberg's SqlCatalog over the
        queue database, its SQLAlchemy pool closed by `aclose`."""
        with self._iceberg_lock:
            if self._iceberg is None:
                self._iceberg = open_catalog(self.settings)
            return self._iceberg

    # -- asyncpg sessions ----------------------------------------------------------------

    async def open_pool(
        self, *, size: int, lazy: bool = False, command_timeout: float = db.COMMAND_TIMEOUT
    ) -> asyncpg.Pool:
        """A service's pool of catalog sessions: `connection` to the queue database takes
        one of it from now on (closed by `aclose`). `command_timeout`: what a statement
        waits for its answer at most, unless its call says otherwise."""
        self.pool = await db.create_pool(
            self.settings.database_url, size=size, lazy=lazy, command_timeout=command_timeout
        )
        return self.pool

    @asynccontextmanager
    async def session_apart(self, url: str) -> AsyncIterator[asyncpg.Connection]:
        """A session no other step shares while the block runs (one holding a lock
        across a command's steps): one of the service's pool when it serves `url` (the
        pool's reset ends what the block left, its advisory locks included), else one
        opened now and closed after."""
        if self.pool is not None and url == self.settings.database_url:
            async with self.pool.acquire() as conn:
                yield conn
            return
        conn = await db.connect(url)
        try:
            yield conn
        finally:
            await conn.close()

    async def open_session(self, url: str) -> asyncpg.Connection:
        """A session of the database at `url` kept by the caller, who closes it (the
        worker's LISTEN, held as long as it runs)."""
        return await db.connect(url)

    def catalog(self) -> contextlib.AbstractAsyncContextManager[asyncpg.Connection]:
        """A session of the catalog (queue) database: `connection(settings.database_url)`."""
        return self.connection(self.settings.database_url)

    def source(self) -> contextlib.AbstractAsyncContextManager[asyncpg.Connection]:
        """A session of the source database."""
        return self.connection(self.settings.effective_source_url)

    @asynccontextmanager
    async def connection(self, url: str) -> AsyncIterator[asyncpg.Connection]:
        """`async with ctx.connection(url) as conn:` -- the pool's when `url` is the
        catalog's and a service opened one; a command's shared session of that database,
        given back with no transaction open (closed instead if it still holds a session
        advisory lock: a lock never outlives the step that took it); else one opened now
        and closed after. A shared session in use (a nested ask, or another task's), or
        asked for from another event loop (a thread's), is not shared: the ask gets its own."""
        if self.pool is not None and url == self.settings.database_url:
            async with self.session_apart(url) as conn:
                yield conn
            return
        held, loop = self._held, asyncio.get_running_loop()
        h = held.get(url) if held is not None else None
        if held is None or (h is not None and (h.busy or h.loop is not loop)):
            conn = await db.connect(url)
            try:
                yield conn
            finally:
                await conn.close()
            return
        if h is None:
            h = held[url] = _Held(None, loop)
        h.busy = True  # before any await: another task asking meanwhile gets its own
        try:
            stale = h.conn is not None and (
                h.conn.is_closed() or time.monotonic() - h.used > HELD_IDLE_SECONDS
            )
            if stale:
                with contextlib.suppress(Exception):
                    await h.conn.close()  # type: ignore[union-attr]
            if h.conn is None or stale:
                h.conn = await db.connect(url)
            yield h.conn
            if h.conn.is_in_transaction():
                await h.conn.execute("ROLLBACK")
            kept = bool(await h.conn.fetchval(db.query("session_advisory_locks")))
        except BaseException:
            kept = True  # its state is not known after a failure: not used again
            raise
        finally:
            h.busy, h.used = False, time.monotonic()
            if kept:
                if held.get(url) is h:
                    del held[url]
                if h.conn is not None:
                    with contextlib.suppress(Exception):
                        await h.conn.close()

    # -- ADBC connections ----------------------------------------------------------------

    @contextlib.contextmanager
    def bulk(self, url: str) -> Iterator[BulkConnection]:
        """A synchronous ADBC connection to the database at `url` (use it in a thread),
        from the context's pool: given back rolled back (BulkPool says when it is closed
        instead). Another ask while one is out gets another, kept for later asks."""
        with self.bulk_pool.connection(url) as conn:
            yield conn

    async def in_thread(self, url: str, read: Callable[[BulkConnection], T]) -> T:
        """`read(conn)` on one of the context's ADBC connections to `url`, in a thread."""

        def run() -> T:
            with self.bulk(url) as conn:
                return read(conn)

        return await asyncio.to_thread(run)

    # -- a command's outcome -------------------------------------------------------------

    def committed(self, done: str, left: str = "", *, partial: bool = False) -> None:
        """The running command's change committed: `done` says what stands, `left` what
        finishes it after a later failure (archiver.outcome). Outside a committing
        command (a worker's job, a test), nothing."""
        if self.side is not None:
            self.side.done, self.side.left, self.side.partial = done, left, partial

    async def __aenter__(self) -> Context:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every session the context holds (a command's end, a service's stop)."""
        held, self._held = self._held, ({} if self._held is not None else None)
        for h in (held or {}).values():
            if h.conn is not None:
                await db.close_bounded(h.conn)
        if self.pool is not None:
            pool, self.pool = self.pool, None
            await db.close_pool(pool)
        try:  # a job thread stuck on a dead flow may hold one of them: not waited for long
            await asyncio.wait_for(asyncio.to_thread(self.bulk_pool.close), db.CLOSE_TIMEOUT)
        except TimeoutError:
            log.warning("ADBC connections still closing after %gs: left", db.CLOSE_TIMEOUT)
        if self._iceberg is not None:
            catalog, self._iceberg = self._iceberg, None
            await asyncio.to_thread(catalog.engine.dispose)
