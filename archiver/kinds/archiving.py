"""The archive kind: a table's old rows moved or copied into Parquet files
(archiver.archive.job), queued by `archiver enqueue` and the scheduler's policies
(archiver.operations.enqueue). Its request is archiver.model.ArchiveRequest, the input of
the pipeline that runs it (which stands below the kinds), its result the job's Progress;
its queueing (dedup and lock keys per part, an operator's priority and attempts) is
decided where it is queued."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Iterator

from archiver import metrics
from archiver.archive.context import ChunkLimits
from archiver.archive.job import open_job, run_job
from archiver.archive.plan import BacklogRule
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.errors import ArchiverError
from archiver.kinds.kind import JobRun, Kind
from archiver.kinds.publish import queue_publications
from archiver.model import ArchiveRequest, Job, Progress


def archive(ctx: Context, run: JobRun, request: ArchiveRequest) -> Progress:
    job, settings = run.job, ctx.settings
    with contextlib.ExitStack() as connections:
        src = connections.enter_context(ctx.bulk(settings.effective_source_url))
        catalog_conn = connections.enter_context(ctx.bulk(settings.database_url))
        reader = None
        if request.reads_in_pairs and settings.copy_connections == 2:
            reader = connections.enter_context(ctx.bulk(settings.effective_source_url))
        run.source_pids = [ctx.bulk_pool.backend_pid(c) for c in (src, reader) if c is not None]
        context = open_job(
            src,
            catalog_conn,
            job_id=str(job.id),
            worker=run.worker,
            attempt=job.claims,
            request=request,
            storage=ctx.storage(),
            same_database=settings.same_database,
            workdir=ctx.workdir,
            limits=ChunkLimits(
                settings.lock_timeout,
                settings.statement_timeout,
                settings.lock_retries,
                settings.row_lock_wait,
            ),
            reader=reader,
            connect=functools.partial(_lane_connection, ctx, run),
            backlog=BacklogRule.of(settings),
        )
        return run_job(
            context,
            Progress.from_json(job.progress),
            lambda: run.interrupt,
            functools.partial(metrics.chunk_done, request.table),
            metrics.throttled,
        )


@contextlib.contextmanager
def _lane_connection(ctx: Context, run: JobRun) -> Iterator[BulkConnection]:
    """A backlog job's further source connection, its backend named among the job's
    (a second stop signal rolls back what each has in flight)."""
    with ctx.bulk(ctx.settings.effective_source_url) as conn:
        pid = ctx.bulk_pool.backend_pid(conn)
        run.source_pids.append(pid)
        try:
            yield conn
        finally:
            run.source_pids.remove(pid)


def publish_after(ctx: Context, job: Job) -> Awaitable[object]:
    """What an archive job committed joins its Delta tables: its publish jobs queued
    before the job is finished, so that the queue is never idle while a publication is
    owed (a burst worker takes them before it exits; a script that waits for no queued
    or running job then finds every table published)."""
    if not ctx.settings.delta:
        return asyncio.sleep(0)
    if ctx.pool is None:
        raise ArchiverError("this worker's queue is not in PostgreSQL")
    return queue_publications(ctx.pool, str(ctx.storage().location))


KIND = Kind.of(ArchiveRequest, archive, after=publish_after)
