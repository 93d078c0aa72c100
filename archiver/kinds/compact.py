"""The compact kind: a table's small files on one storage merged into files of `target`
bytes within one `period`, at most `budget` bytes of them a run
(archiver.operations.compact), queued by the workers' compaction sweep
(archiver.maintenance.compact)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import asyncpg

from archiver.context import Context
from archiver.ident import as_typed
from archiver.kinds.kind import JobRun, Kind, same_storage
from archiver.model import Queueing
from archiver.operations.compact import Options, compact_table
from archiver.store import jobs
from archiver.text import counted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactRequest:
    KIND: ClassVar[str] = "compact"

    table: str
    storage_url: str
    target: int
    period: str
    budget: int

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> CompactRequest:
        return cls(
            str(payload["table"]),
            str(payload["storage_url"]),
            int(payload["target"]),
            str(payload["period"]),
            int(payload["budget"]),
        )

    def payload(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def queueing(self) -> Queueing:  # one queued and one running per table at a time
        key = f"compact:{self.storage_url}:{self.table}"
        return Queueing(key, key, max_attempts=3)


@dataclass(frozen=True)
class CompactResult:
    merged_files: int
    into: int  # files written
    merged_bytes: int
    ledger: list[int]  # the ledger operations committed
    yielded: str | None  # why it stopped early (a command held the table)

    def to_json(self) -> dict[str, Any]:
        return vars(self).copy()

    def said(self) -> str:
        said = f"{counted(self.merged_files, 'file')} merged into {self.into}"
        return said + (f" ({self.yielded})" if self.yielded else "")


async def compact(ctx: Context, run: JobRun, request: CompactRequest) -> CompactResult:
    """Its table's small chunks merged, up to its budget; yielding to a command that
    holds the table (the job completes: the next compaction goes on)."""
    same_storage(request.KIND, request.storage_url, ctx)
    done = await compact_table(
        ctx,
        as_typed(request.table),
        Options(request.target, request.period, request.budget),
        report=lambda line: log.info("job %s: %s", run.job.id, line),
    )
    return CompactResult(done.files_in, done.files_out, done.bytes_in, done.merged, done.yielded)


KIND = Kind.of(CompactRequest, compact, threaded=False)


async def queue_compactions(
    pool: asyncpg.Pool,
    storage_url: str,
    period: float,
    small: int,
    requests: Callable[[str], CompactRequest | None],
) -> int:
    """Once a `period` per storage (store.jobs.maintenance_due): a compaction job for each
    table with two committed files under `small` bytes or more, as `requests(table)` says
    (None: the table is not compacted). How many were new."""
    new = 0
    async with pool.acquire() as conn, conn.transaction():
        if not await jobs.maintenance_due(conn, CompactRequest.KIND, storage_url, period):
            return 0
        for table in await jobs.tables_to_compact(conn, storage_url, small):
            request = requests(table)
            if request is not None:
                _, created = await jobs.enqueue_request(conn, request)
                new += created
    return new
