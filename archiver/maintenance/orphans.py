"""The orphan sweep's schedule: the storage's sweep (archiver.kinds.orphans) queued once
per grace period, by whichever worker asks first."""

from __future__ import annotations

from archiver.kinds.orphans import queue_sweep
from archiver.maintenance.duty import Shared


class OrphanSweep:
    name = "orphan sweep"
    every = 60.0  # how often a worker asks whether the sweep is due

    def __init__(self, shared: Shared) -> None:
        self.pool, self.settings, self.wake = shared.pool, shared.settings, shared.wake

    async def run(self) -> None:
        location = str(self.settings.storage_location())
        if await queue_sweep(self.pool, location, self.settings.orphan_grace):
            self.wake()
