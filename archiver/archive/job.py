"""One archive job, from its first chunk to its last, on connections of its own (a worker
thread). Knows nothing of the queue: it is handed a catalog, a storage and a way to ask,
between chunks, whether to stop."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from archiver import failpoints
from archiver.archive.backlog import ChunkDone, run_backlog
from archiver.archive.chunk import archive_chunk, rollback_quietly
from archiver.archive.commit import CommitStrategy, CopyOnly, SameDatabase, SeparateDatabase
from archiver.archive.context import ChunkLimits, JobContext, numeric_kept_text
from archiver.archive.pacing import (
    WAL_LIMIT,
    Interrupt,
    Last,
    Waited,
    back_off,
    check_window,
    pace,
    rate_limited,
)
from archiver.archive.plan import BACKLOG, NO_BACKLOG, BacklogRule, plan_archive
from archiver.archive.snapshot import open_snapshot
from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.catalog import PgCatalog
from archiver.errors import LockBusy
from archiver.files import names
from archiver.model import ArchiveRequest, KeyRange, Mode, Progress
from archiver.source.aggregates import describe_aggregate
from archiver.source.binding import session_lock_timeout
from archiver.source.chunks import describe_archive
from archiver.source.crossing import PgSource
from archiver.source.ctid import table_pages
from archiver.source.guardrails import (
    LOCK_NOT_AVAILABLE,
    dead_tuples,
    lock_holders,
    vacuum,
    wal_position,
)
from archiver.source.partitions import PartitionAction, WholePartition
from archiver.storage.seam import Storage

log = logging.getLogger(__name__)
T = TypeVar("T")

# fewer rows estimated old: the job's bounds are read from the old rows alone
WALK_MIN = 1_000


Connect = Callable[[], contextlib.AbstractContextManager[BulkConnection]]


def open_job(
    src: BulkConnection,
    catalog_conn: BulkConnection,
    *,
    job_id: str,
    worker: str,
    attempt: int,
    request: ArchiveRequest,
    storage: Storage,
    same_database: bool,
    workdir: Path,
    limits: ChunkLimits,
    reader: BulkConnection | None = None,
    connect: Connect | None = None,
    backlog: BacklogRule = NO_BACKLOG,
) -> JobContext:
    """The job's context on its connections (a copy job's `reader` reads every other
    chunk on its snapshot), with the commit strategy its mode and databases call for.
    `connect()`: a new connection to the source, for the backlog plan's further
    connections, as `backlog` rules. Their chunks commit one at a time, so with the
    catalog elsewhere they share the job's catalog connection."""
    catalog = PgCatalog(catalog_conn, job_id, worker)

    def strategy(src: BulkConnection, catalog: PgCatalog) -> CommitStrategy:
        if request.mode == Mode.COPY:
            return CopyOnly(PgSource(src), catalog)
        if same_database:
            return SameDatabase(PgSource(src), catalog, PgCatalog(src, job_id, worker))
        return SeparateDatabase(PgSource(src), catalog)

    def lane(stack: contextlib.ExitStack[bool | None]) -> tuple[BulkConnection, CommitStrategy]:
        assert connect is not None
        conn = stack.enter_context(connect())
        return conn, strategy(conn, catalog)

    commit = strategy(src, catalog)
    queries = describe_archive(
        src, request.table, request.column, request.mode, request.with_children
    )
    aggregate = describe_aggregate(src, queries) if request.with_children else None
    whole, parent = None, None
    if request.partition is not None:  # one partition: whole, or its rows
        parent = queries.table
        if request.partitions == PartitionAction.ROWS:
            queries = describe_archive(src, request.partition, request.column, Mode.MOVE)
        else:
            whole = WholePartition(parent, request.partition, PartitionAction(request.partitions))
            if whole.attached(src) is not None:  # else an earlier attempt took it
                queries = describe_archive(src, request.partition, request.column, Mode.COPY)
    queries, aggregate = numeric_kept_text(catalog, request.table, queries, aggregate)
    return JobContext(
        job_id,
        attempt,
        request,
        queries,
        src,
        storage,
        catalog,
        commit,
        workdir,
        limits,
        aggregate=aggregate,
        partition=whole,
        parent=parent,
        reader=reader,
        key_range=request.key_range,
        backlog=backlog,
        lanes=lane if connect is not None else None,
    )


def bound_to_old_rows(job: JobContext, estimated: int) -> JobContext | None:
    """The job with its key range narrowed to the keys of rows older than the cutoff,
    from the smallest to the largest, so that no chunk, and no last look for more, walks
    the keys of newer rows: unbounded, a day's job on a table of years read every key
    before or after the old ones. Where at least WALK_MIN rows are `estimated` old, each end is first
    looked for among as many keys from its end of the key's index: where most rows are
    old (a first archive, a backlog), both are found at once. Else, or when an end is
    not found so, the old rows are read once, by the cutoff column's index where there
    is one: the bounds cost at most twice the old rows. None: no row is older than the cutoff. A row
    that turns old outside the bounds while the job runs (one inserted dated in the
    past) is left for the next archive. A copy job reads them on its snapshot, which it
    keeps open; a partition taken whole needs none."""
    if job.partition is not None:
        return job

    def ends(walk: int | None) -> tuple[Any, Any]:
        statement, params = job.queries.old_key_bounds(job.request.cutoff, job.key_range, walk=walk)
        if job.request.mode == Mode.COPY:
            with job.source.cursor() as cur:
                cur.execute(statement, params)
                first, last = cur.fetchall()[0]
        else:
            first, last = fetch_and_rollback(job.source, statement, params)[0]
        return first, last

    first = last = None
    if estimated >= WALK_MIN:
        first, last = ends(estimated)
    if first is None or last is None:
        first, last = ends(None)
    if last is None:
        return None
    bounds = dataclasses.replace(
        job.key_range or KeyRange(None, None), first=str(first), through=str(last)
    )
    return dataclasses.replace(job, key_range=bounds)


def start_job(job: JobContext, saved: Progress) -> Progress:
    """Everything a (re)started job does before its first chunk, in this order:
    reconcile what a crash left pending, resume from the committed files, sweep uploads
    no attempt will ever catalogue, and estimate a new job's size."""
    for settled in job.commit.reconcile():
        outcome = "committed" if settled.committed else "aborted"
        log.warning("job %s: part %d was %s before a crash", job.job_id, settled.part, outcome)
        if not settled.committed:
            job.storage.delete(settled.path)
    progress = job.catalog.committed_progress(saved)
    sweep_stale_uploads(job)
    if not progress.chunk_rows:  # a new job: estimate once; a resumed one keeps its figures
        plan = plan_archive(
            job.source,
            job.request,
            job.queries,
            aggregate=job.aggregate,
            backlog=job.backlog if job.lanes is not None else NO_BACKLOG,
            throttled=rate_limited(job.catalog.limits()),
        )
        progress.plan = plan.plan
        log.info("job %s: %s", job.job_id, plan.plan_reason)
        progress.chunk_rows = plan.chunk_rows
        progress.rows_estimated = max(progress.rows_estimated, plan.rows_archived)
        progress.chunks_estimated = max(progress.chunks_estimated, plan.files, 1)
    return progress


def sweep_stale_uploads(job: JobContext) -> None:
    """Delete what earlier attempts of this job uploaded but never catalogued, and what
    their uploads left unfinished.

    An earlier attempt's upload can never be catalogued, since recording a file requires
    holding the job (see files.names on fencing), so it is garbage. One uploaded after
    this sweep stays until `archiver verify` reports it."""
    catalogued = job.catalog.catalogued_paths()
    for table in job.tables:
        prefix = job.storage.object_name(names.job_prefix(table, job.job_id))
        job.storage.discard_unfinished(prefix)  # this attempt has not started one yet
        for stored in job.storage.list(prefix):
            attempt = names.attempt_of(stored.name)
            if attempt is not None and attempt < job.attempt and stored.name not in catalogued:
                log.warning(
                    "job %s: deleting %s, left by an earlier attempt", job.job_id, stored.name
                )
                job.storage.delete(stored.name)


def _politely(job: JobContext, interrupt: Interrupt, step: Callable[[], T]) -> T:
    """`step`, a job's set-up before its chunks (the size estimate, the key bounds), with
    the job's lock timeout on the source: a lock held longer (a migration's ACCESS
    EXCLUSIVE) is waited out politely, as a chunk's is, the attempt not spent."""
    busy = 0
    while True:
        try:
            with session_lock_timeout(job.source, job.limits.lock_timeout):
                return step()
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            rollback_quietly(job.source)
            table = job.queries.table
            holders = lock_holders(job.source, table) or "no holder left"
            busy += 1
            what = f"not started: waited {job.limits.lock_timeout:g}s for a lock on "
            back_off(job, busy, f"{what}{table.qualified} held by {holders}", interrupt)


def _finished(job: JobContext, progress: Progress) -> Progress:
    """Done: the estimates give way to what was counted; after a move, what it left for
    vacuum (and VACUUM itself when asked)."""
    done = progress.finished()
    if job.request.mode == Mode.MOVE and job.partition is None:  # a partition left no rows
        if job.request.vacuum:
            seconds = vacuum(job.source, job.queries.table)
            log.info("job %s: VACUUM (ANALYZE) took %.1fs", job.job_id, seconds)
            done.vacuum_seconds = round(seconds, 3)
        done.dead_tuples = dead_tuples(job.source, job.queries.table)
    return done


def run_job(
    job: JobContext,
    saved: Progress,
    interrupt: Interrupt,
    on_chunk: ChunkDone | None = None,
    on_wait: Waited | None = None,
) -> Progress:
    """Start the job, then archive chunks until none is left. `interrupt()` is asked
    between chunks and whatever it returns (stop, cancel, lease lost) is raised there;
    `on_chunk(rows, bytes, seconds)` hears of every committed chunk and `on_wait(reason,
    seconds)` of every wait on a limit (metrics). Outside the job's maintenance window it
    raises OutsideWindow, before its first chunk or at the boundary of the next."""
    check_window(job, job.catalog.limits())
    progress = _politely(job, interrupt, lambda: start_job(job, saved))
    if progress.plan == BACKLOG:

        def pages() -> int:  # (pg_relation_size waits for a lock as the set-up does)
            return _politely(job, interrupt, lambda: table_pages(job.source, job.queries))

        return _finished(job, run_backlog(job, progress, pages, interrupt, on_chunk, on_wait))
    copy = job.request.mode == Mode.COPY
    busy = 0  # lock timeouts in a row
    last: Last | None = None
    try:
        while copy:  # every chunk of this job reads the same consistent snapshot
            try:
                open_snapshot(job)
            except LockBusy as exc:
                busy += 1
                back_off(job, busy, f"snapshot not taken: {exc}", interrupt)
                continue
            busy = 0
            failpoints.reach("copy_snapshot_open")
            break
        old = progress.rows_estimated - progress.rows
        if copy:  # inside the snapshot, whose tables are locked already (and which a
            bounded = bound_to_old_rows(job, old)  # commit or rollback here would end)
        else:
            bounded = _politely(job, interrupt, lambda: bound_to_old_rows(job, old))
        if bounded is None:
            return _finished(job, progress)
        job = bounded
        while True:
            reason = interrupt()
            if reason is not None:
                raise reason
            allowed, limits = pace(job, last, interrupt, on_wait)
            measure_wal = job.request.mode == Mode.MOVE and bool(limits.get(WAL_LIMIT))
            wal_before = wal_position(job.source) if measure_wal else 0
            started = time.monotonic()
            chunk = progress
            if allowed is not None and allowed < progress.chunk_rows:
                chunk = dataclasses.replace(progress, chunk_rows=allowed)
            try:
                advanced = archive_chunk(job, chunk, pair=allowed is None)
            except LockBusy as exc:
                if copy:  # its rollback ended the snapshot (a table not locked at the start)
                    raise
                busy += 1
                back_off(job, busy, f"chunk rolled back: {exc}", interrupt)
                continue
            busy = 0
            if advanced is None:
                return _finished(job, progress)
            advanced.chunk_rows = progress.chunk_rows  # the planned size, not the paced one
            wal = wal_position(job.source) - wal_before if measure_wal else 0
            last = (started, advanced.rows - progress.rows, wal)
            if on_chunk is not None:
                on_chunk(
                    advanced.rows - progress.rows,
                    advanced.bytes - progress.bytes,
                    time.monotonic() - started,
                )
            progress = advanced
    finally:
        if copy:
            rollback_quietly(job.source)
            if job.reader is not None:
                rollback_quietly(job.reader)
