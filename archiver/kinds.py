"""Job kinds: what a worker does with each `task_name` of background_jobs, declared in
one place, as River registers a worker per job kind. The worker's claim loop, its runs
and its maintenance never look at a kind's name: they ask this registry for the kind's
handler, the words that say it completed, and what follows it.

A kind is its request class (model.py: its name, `KIND`, and its payload, written by
`payload()` when queued and read by `from_payload` when claimed) and its handler here,
registered with `Kind.of(RequestClass, handler)`: the handler is typed with the request
class, so the type checker holds the two together (no isinstance). It runs one claimed
job with the worker's context (archiver.context: its storage, pools and scratch
directory) and returns its Progress, in the worker's job thread (`threaded`: bulk work on its
own ADBC connections) or on its event loop. `after` runs once the job has ended,
whatever its outcome. A kind with no work (`batch`) is completed by the claim loop in
batches (the bench's queue figures). To add a kind: its request class in model.py, its
handler and `Kind.of` here, and whatever queues it (store.jobs.enqueue_request)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import asyncpg

from archiver import metrics
from archiver.archive.context import ChunkLimits
from archiver.archive.job import open_job, run_job
from archiver.archive.plan import BacklogRule
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.errors import ArchiverError
from archiver.ident import as_typed
from archiver.lifecycle.retention import Age
from archiver.model import (
    ArchiveRequest,
    CompactRequest,
    Job,
    OrphansRequest,
    Progress,
    PublishRequest,
    PurgeRequest,
    Request,
)
from archiver.operations.compact import Options, compact_table
from archiver.operations.orphans import remove_orphans
from archiver.operations.purge import purge_table
from archiver.store import jobs
from archiver.text import counted

log = logging.getLogger(__name__)
R = TypeVar("R")


@dataclass
class JobRun:
    """A job in progress: what the worker's loop and the job's thread share."""

    job: Job
    worker: str  # the name of the worker running it (its leases')
    interrupt: BaseException | None = None  # read by the thread between chunks
    source_pids: list[int] = field(default_factory=list)  # its source backends
    task: asyncio.Task[None] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Kind(Generic[R]):
    name: str
    run: Callable[[Context, JobRun, R], Any]  # a Progress; awaitable unless threaded
    payload: Callable[[Mapping[str, Any]], R]
    threaded: bool = True
    done: Callable[[Progress], str] = lambda p: (
        f"{counted(p.rows, 'row')} in {counted(p.files, 'file')}"
    )
    after: Callable[[Context, Job], Awaitable[object]] | None = None
    batch: bool = False

    @classmethod
    def of(
        cls, request: type[Request[R]], run: Callable[[Context, JobRun, R], Any], **kw: Any
    ) -> Kind[R]:
        """The kind of `request`'s jobs, run by `run` (with Kind's other fields)."""
        return cls(request.KIND, run, request.from_payload, **kw)

    def request(self, job: Job) -> R:
        """The job's payload as this kind's request; a malformed one fails the attempt,
        naming the kind and what is wrong."""
        try:
            return self.payload(job.payload)
        except (KeyError, TypeError, ValueError) as exc:
            raise ArchiverError(
                f"job {job.id}: not a {self.name} job's payload ({type(exc).__name__}: {exc})"
            ) from None


# -- archive: move or copy a table's old rows ------------------------------------------


def _archive(ctx: Context, run: JobRun, request: ArchiveRequest) -> Progress:
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


def _catalog_pool(ctx: Context) -> asyncpg.Pool:
    if ctx.pool is None:
        raise ArchiverError("this worker's queue is not in PostgreSQL")
    return ctx.pool


def _publish_after(ctx: Context, job: Job) -> Awaitable[object]:
    """What an archive job committed joins its Delta tables (queued before the run
    ends, so a burst worker takes the publish job before it exits)."""
    if not ctx.settings.delta:
        return asyncio.sleep(0)
    return jobs.enqueue_publications(_catalog_pool(ctx), str(ctx.storage().location))


# -- publish: a table's catalogued files into its Delta table -----------------------


def _publish(ctx: Context, run: JobRun, request: PublishRequest) -> Progress:
    from archiver.delta.publish import publish_table_on

    if request.storage_url != str(ctx.storage().location):
        raise ArchiverError(
            f"publish: files on {request.storage_url}, this worker writes to another storage"
        )
    with ctx.bulk(ctx.settings.database_url) as conn:
        done = publish_table_on(ctx, conn, request.table, sweep_only=not ctx.settings.delta)
    # not rows/files: those count what a table's jobs archived (archiver status summed
    # them, and counted every published row twice)
    return Progress(
        extra={
            "published_rows": done.rows,
            "published_files": done.files,
            "delta_version": done.version,
            "refused": done.refused,
        }
    )


def _published(p: Progress) -> str:
    rows, files = p.extra["published_rows"], p.extra["published_files"]
    return f"{counted(rows, 'row')} in {counted(files, 'file')} published"


# -- purge: a policy's retention -------------------------------------------------------


async def _purge(ctx: Context, run: JobRun, request: PurgeRequest) -> Progress:
    """Its table's files older than `retain` purged (those under an immutability
    policy or legal hold kept, and said)."""

    table = request.table
    done = await purge_table(
        ctx,
        as_typed(table),
        Age.parse(request.retain, "retain"),
        skip_protected=True,
        missing_ok=True,
        report=lambda line: log.info("job %s: %s", run.job.id, line),
    )
    if done.skipped:
        log.warning("job %s: %s: kept, for their protection: %s", run.job.id, table, done.skipped)
    return Progress(
        extra={"purged_rows": done.rows, "purged_files": done.files, "ledger": done.ledger}
    )


# -- compact: a table's small files merged --------------------------------------------


async def _compact(ctx: Context, run: JobRun, request: CompactRequest) -> Progress:
    """Its table's small chunks merged, up to its budget; yielding to a command that
    holds the table (the job completes: the next compaction goes on)."""

    if request.storage_url != str(ctx.storage().location):
        raise ArchiverError(
            f"compact: files on {request.storage_url}, this worker writes to another storage"
        )
    done = await compact_table(
        ctx,
        as_typed(request.table),
        Options(request.target, request.period, request.budget),
        report=lambda line: log.info("job %s: %s", run.job.id, line),
    )
    return Progress(
        extra={
            "merged_files": done.files_in,
            "into": done.files_out,
            "merged_bytes": done.bytes_in,
            "ledger": done.merged,
            "yielded": done.yielded,
        }
    )


def _compacted(p: Progress) -> str:
    said = f"{counted(p.extra['merged_files'], 'file')} merged into {p.extra['into']}"
    return said + (f" ({p.extra['yielded']})" if p.extra.get("yielded") else "")


# -- orphans: archived files nothing references ------------------------------------


async def _orphans(ctx: Context, run: JobRun, request: OrphansRequest) -> Progress:
    """Each table folder of the job's storage looked through; its orphans deleted."""

    if request.storage_url != str(ctx.storage().location):
        raise ArchiverError(
            f"orphans: files on {request.storage_url}, this worker writes to another storage"
        )
    found = await remove_orphans(ctx, None)
    for table in found:
        if table.found:
            log.warning(
                "job %s: %s: %s nothing references deleted (%s)",
                run.job.id, table.table, counted(len(table.found), "archived file"),
                ", ".join(o.name for o in table.found[:3]) + (", …" if len(table.found) > 3 else ""),
            )  # fmt: skip
        if table.foreign:
            log.warning(
                "job %s: %s: %s archiver did not name left as they are (%s)",
                run.job.id, table.table, counted(len(table.foreign), "object"),
                ", ".join(table.foreign[:3]),
            )  # fmt: skip
    return Progress(
        extra={
            "orphans_deleted": sum(len(t.found) for t in found),
            "orphan_bytes": sum(t.bytes for t in found),
            "tables": len(found),
        }
    )


def _swept(p: Progress) -> str:
    deleted, tables = p.extra["orphans_deleted"], p.extra["tables"]
    return f"{counted(deleted, 'orphan')} deleted in {counted(tables, 'table folder')}"


def _nothing(ctx: Context, run: JobRun, request: None) -> Progress:
    return Progress()


KINDS: dict[str, Kind[Any]] = {
    k.name: k
    for k in (
        Kind.of(ArchiveRequest, _archive, after=_publish_after),
        Kind.of(PublishRequest, _publish, done=_published),
        Kind.of(PurgeRequest, _purge, threaded=False),
        Kind.of(CompactRequest, _compact, done=_compacted, threaded=False),
        Kind.of(OrphansRequest, _orphans, done=_swept, threaded=False),
        Kind(jobs.NOOP_TASK, _nothing, lambda payload: None, batch=True),  # the bench's
    )
}


def kind_of(job: Job) -> Kind[Any]:
    """The job's kind; a task_name no kind has fails the attempt, naming it."""
    try:
        return KINDS[job.task_name]
    except KeyError:
        raise ArchiverError(
            f"job {job.id}: no job kind {job.task_name!r} (known: {', '.join(KINDS)})"
        ) from None
