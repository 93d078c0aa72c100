"""The orphans kind: each table folder of one storage looked through, the files nothing
references deleted (archiver.operations.orphans), queued once a grace period by the
workers' orphan sweep (archiver.maintenance.orphans)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import asyncpg

from archiver.context import Context
from archiver.kinds.kind import JobRun, Kind, same_storage
from archiver.model import Queueing
from archiver.operations.orphans import remove_orphans
from archiver.store import jobs
from archiver.text import counted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OrphansRequest:
    KIND: ClassVar[str] = "orphans"

    storage_url: str

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> OrphansRequest:
        return cls(str(payload["storage_url"]))

    def payload(self) -> dict[str, Any]:
        return {"storage_url": self.storage_url}

    def queueing(self) -> Queueing:  # one queued and one running per storage at a time
        key = f"orphans:{self.storage_url}"
        return Queueing(key, key, max_attempts=3)


@dataclass(frozen=True)
class OrphansResult:
    orphans_deleted: int
    orphan_bytes: int
    tables: int  # table folders looked through

    def to_json(self) -> dict[str, Any]:
        return vars(self).copy()

    def said(self) -> str:
        folders = counted(self.tables, "table folder")
        return f"{counted(self.orphans_deleted, 'orphan')} deleted in {folders}"


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", …" if len(names) > 3 else "")


async def sweep(ctx: Context, run: JobRun, request: OrphansRequest) -> OrphansResult:
    """Each table folder of the job's storage looked through; its orphans deleted."""
    same_storage(request.KIND, request.storage_url, ctx)
    found = await remove_orphans(ctx, None)
    for table in found:
        if table.found:
            log.warning(
                "job %s: %s: %s nothing references deleted (%s)", run.job.id, table.table,
                counted(len(table.found), "archived file"), _some([o.name for o in table.found]),
            )  # fmt: skip
        if table.foreign:
            log.warning(
                "job %s: %s: %s archiver did not name left as they are (%s)", run.job.id,
                table.table, counted(len(table.foreign), "object"), _some(table.foreign),
            )  # fmt: skip
    deleted = sum(len(t.found) for t in found)
    return OrphansResult(deleted, sum(t.bytes for t in found), len(found))


KIND = Kind.of(OrphansRequest, sweep, threaded=False)


async def queue_sweep(pool: asyncpg.Pool, storage_url: str, period: float) -> bool:
    """The orphan sweep of `storage_url` when it is due (none queued in the last
    `period` seconds by any worker: store.jobs.maintenance_due). True when queued."""
    async with pool.acquire() as conn, conn.transaction():
        if not await jobs.maintenance_due(conn, OrphansRequest.KIND, storage_url, period):
            return False
        await jobs.enqueue_request(conn, OrphansRequest(storage_url))
    return True
