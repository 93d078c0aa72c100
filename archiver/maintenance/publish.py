"""The publication sweep: a publish job for each table with committed files not yet in
its Delta log (what a worker killed before it queued one, or a publisher killed
mid-way, left), or with retired or offline files its Delta log still lists."""

from __future__ import annotations

from archiver.kinds.publish import queue_publications
from archiver.maintenance.duty import Shared


class PublicationSweep:
    name = "publication sweep"
    every = 30.0

    def __init__(self, shared: Shared) -> None:
        self.pool, self.settings, self.wake = shared.pool, shared.settings, shared.wake

    async def run(self) -> None:
        location = str(self.settings.storage_location())
        if await queue_publications(self.pool, location, delta=self.settings.delta):
            self.wake()
