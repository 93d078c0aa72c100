"""The rescuer: running jobs whose worker stopped renewing its lease are queued again
(failed with their last attempt, cancelled when that was asked), by whichever live
worker looks first."""

from __future__ import annotations

import logging

from archiver.maintenance.duty import Shared

log = logging.getLogger(__name__)


class Rescuer:
    name = "rescuer"

    def __init__(self, shared: Shared) -> None:
        settings = shared.settings
        self.queue, self.lease, self.wake = shared.queue, settings.lease_seconds, shared.wake
        # as often as the worker polls or beats, whichever is sooner: a lease is found
        # expired within one of those of its expiry
        self.every = min(settings.poll_interval, settings.heartbeat_seconds)

    async def run(self) -> None:
        rescued = await self.queue.rescue_expired(self.lease)
        for job_id, status in rescued:
            log.warning("job %s: lease expired, now %s", job_id, status)
        if rescued:
            self.wake()
