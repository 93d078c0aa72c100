"""A one-shot command's state, made once by archiver.cli around the command: its settings,
the Storage over ARCHIVER_STORAGE_URL (opened when a step first asks, then shared), and
the PostgreSQL sessions its steps share -- one asyncpg session per database
(db.command_sessions) and one ADBC connection per database (bulk.command_connections).

A step reaches it through `storage(settings)`, `db.connection(url)` and
`bulk.connect_bulk(url)` / `bulk.on_source(url, ...)`, which give the command's own when a
command is running and open their own otherwise (the worker, the scheduler, the console
and serve keep pools of their own; tests call operations directly). What a step may
leave on a shared session is nothing: a session is given back with no transaction
open and holding no session advisory lock, or it is closed
(docs/architecture.md, "A command's runtime")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from archiver import db
from archiver.bulk import command_connections
from archiver.config import Settings
from archiver.storage import open_storage
from archiver.storage.seam import Storage


@dataclass
class Runtime:
    settings: Settings
    _storage: Storage | None = field(default=None, repr=False)

    def storage(self) -> Storage:
        if self._storage is None:
            self._storage = open_storage(self.settings)
        return self._storage


_CURRENT: ContextVar[Runtime | None] = ContextVar("archiver_runtime", default=None)


@asynccontextmanager
async def command(settings: Settings) -> AsyncIterator[Runtime]:
    """The command's runtime, its sessions closed when the block ends."""
    async with db.command_sessions():
        with command_connections(db.HELD_IDLE_SECONDS):
            runtime = Runtime(settings)
            token = _CURRENT.set(runtime)
            try:
                yield runtime
            finally:
                _CURRENT.reset(token)


def storage(settings: Settings) -> Storage:
    """The running command's Storage when `settings` are its own, else one opened now."""
    runtime = _CURRENT.get()
    if runtime is not None and runtime.settings is settings:
        return runtime.storage()
    return open_storage(settings)
