"""What a maintenance duty is: a name, a period and a run (`Duty`), made from what the
worker shares with every duty (`Shared`), as River's services all take one archetype."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import asyncpg

from archiver.config import ConfigFile, Settings
from archiver.context import Context
from archiver.errors import ArchiverError
from archiver.store.queue import Queue


class Duty(Protocol):
    name: str

    @property
    def every(self) -> float:
        """Seconds between two runs."""

    async def run(self) -> None: ...


@dataclass(frozen=True)
class Shared:
    """The worker's context (its settings, storage and the pool of the queue database: none
    for a worker on an in-memory queue), its queue, `wake` (a duty that queued or freed
    work wakes the claim loop) and its config file's policies."""

    ctx: Context
    queue: Queue
    wake: Callable[[], None]
    config: ConfigFile | None = None

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def pool(self) -> asyncpg.Pool:
        """The queue database's pool (only the duties of a worker that has one are made)."""
        if self.ctx.pool is None:
            raise ArchiverError("this worker's queue is not in PostgreSQL")
        return self.ctx.pool
