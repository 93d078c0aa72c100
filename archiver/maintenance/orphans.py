"""The orphan sweep's schedule: the storage's sweep (archiver.lifecycle.orphans) queued
once per grace period, by whichever worker asks first."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from archiver.config import Settings
from archiver.store import jobs


class OrphanSweep:
    name = "orphan sweep"
    every = 60.0  # how often a worker asks whether the sweep is due

    def __init__(self, pool: asyncpg.Pool, settings: Settings, wake: Callable[[], None]) -> None:
        self.pool, self.settings, self.wake = pool, settings, wake

    async def run(self) -> None:
        location = str(self.settings.storage_location())
        if await jobs.enqueue_orphan_sweep(self.pool, location, self.settings.orphan_grace):
            self.wake()
