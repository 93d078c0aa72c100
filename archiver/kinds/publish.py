"""The publish kind: a table's catalogued files on one storage joined to its Delta table
(archiver.delta.publish), queued after each archive job, by the workers' publication
sweep and by the commands that change an archive."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import asyncpg

from archiver.context import Context
from archiver.kinds.kind import JobRun, Kind, same_storage
from archiver.model import Queueing
from archiver.store import jobs
from archiver.text import counted


@dataclass(frozen=True)
class PublishRequest:
    KIND: ClassVar[str] = "publish"

    table: str
    storage_url: str

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> PublishRequest:
        return cls(str(payload["table"]), str(payload["storage_url"]))

    def payload(self) -> dict[str, Any]:
        return {"table": self.table, "storage_url": self.storage_url}

    def queueing(self) -> Queueing:  # one queued and one running per table at a time
        key = f"publish:{self.storage_url}:{self.table}"
        return Queueing(key, key, max_attempts=10)


@dataclass(frozen=True)
class PublishResult:
    """What a publication did: not `rows`/`files`, which count what a table's jobs
    archived (archiver status sums them over a table's jobs)."""

    published_rows: int
    published_files: int
    delta_version: int | None
    refused: list[str]

    def to_json(self) -> dict[str, Any]:
        return vars(self).copy()

    def said(self) -> str:
        files = counted(self.published_files, "file")
        return f"{counted(self.published_rows, 'row')} in {files} published"


def publish(ctx: Context, run: JobRun, request: PublishRequest) -> PublishResult:
    from archiver.delta.publish import publish_table_on

    same_storage(request.KIND, request.storage_url, ctx)
    with ctx.bulk(ctx.settings.database_url) as conn:
        done = publish_table_on(ctx, conn, request.table, sweep_only=not ctx.settings.delta)
    return PublishResult(done.rows, done.files, done.version, done.refused)


KIND = Kind.of(PublishRequest, publish)


async def queue_publications(
    conn: asyncpg.Connection | asyncpg.Pool, storage_url: str, *, delta: bool = True
) -> int:
    """A publish job for every table of `storage_url` with something to publish
    (store.jobs.tables_to_publish; `delta`: publishing is on), one queued per table at
    most. How many were new."""
    new = 0
    for table in await jobs.tables_to_publish(conn, storage_url, delta=delta):
        _, created = await jobs.enqueue_request(conn, PublishRequest(table, storage_url))
        new += created
    return new
