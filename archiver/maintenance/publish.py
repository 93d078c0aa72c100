"""The publication sweep: a publish job for each table with committed files not yet in
its Delta log (what a worker killed before it queued one, or a publisher killed
mid-way, left), or with retired or offline files its Delta log still lists."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from archiver.config import Settings
from archiver.store import jobs


class PublicationSweep:
    name = "publication sweep"
    every = 30.0

    def __init__(self, pool: asyncpg.Pool, settings: Settings, wake: Callable[[], None]) -> None:
        self.pool, self.settings, self.wake = pool, settings, wake

    async def run(self) -> None:
        location = str(self.settings.storage_location())
        if await jobs.enqueue_publications(self.pool, location, delta=self.settings.delta):
            self.wake()
