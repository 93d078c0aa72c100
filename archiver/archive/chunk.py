"""One chunk, top to bottom, as design.md states the invariant: take (and lock) the rows,
write Parquet, upload under the job's, attempt's and part's name, verify, then record and
COMMIT through the job's commit strategy. Anything failing before the COMMIT rolls the
source back, and the rows are still in the table."""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from archiver import failpoints, memory
from archiver.archive.context import JobContext
from archiver.archive.take import (
    RowLockWaitOver,
    take_aggregate,
    take_partition,
    take_rows,
)
from archiver.archive.upload import chunk_cursor
from archiver.bulk import BulkConnection
from archiver.errors import LockBusy, StorageError
from archiver.model import ArchivedFile, Mode, Progress
from archiver.source.guardrails import (
    DEADLOCK_DETECTED,
    LOCK_NOT_AVAILABLE,
    emit_cdc_marker,
    lock_holders,
)
from archiver.source.partitions import PartitionAction, WholePartition
from archiver.text import counted

log = logging.getLogger(__name__)


def archive_chunk(job: JobContext, progress: Progress, *, pair: bool = True) -> Progress | None:
    """Move (or copy) the next chunk after progress.last_key; None when none is left.
    `pair`: a job with a reader (copy mode) reads the next two chunks at once."""
    try:
        return _archive_chunk(job, progress, pair=pair)
    except RowLockWaitOver as exc:  # rolled back; taken again below, out of the handler
        job.row_locks.skip = True
        cause = exc.__cause__
    log.info(
        "job %s: %s on %s (a row another transaction holds, or the table); taking the "
        "chunk again, skipping locked rows for the rest of the attempt",
        job.job_id,
        "deadlocked waiting for a lock"
        if getattr(cause, "sqlstate", None) == DEADLOCK_DETECTED
        else f"waited {job.limits.row_wait:g}s for a lock",
        job.queries.table.qualified,
    )
    # At once, not after the stop check and pacing of the next chunk: once per attempt,
    # this can redo up to a whole chunk's work inside the shutdown deadline.
    return _archive_chunk(job, progress, pair=pair)


def _archive_chunk(job: JobContext, progress: Progress, *, pair: bool) -> Progress | None:
    part = job.next_part()
    move = job.request.mode == Mode.MOVE
    committing = False
    try:
        with chunk_cursor(job.source) as cur, tempfile.TemporaryDirectory(dir=job.workdir) as tmp:
            # 1. take the chunk's rows (locked, or from the snapshot); 2.-4. for each
            # table's rows: stream them into a Parquet file, upload it under the job's,
            # attempt's and part's name, verify it
            if job.partition is not None:
                files = take_partition(job, cur, Path(tmp), part, progress)
                if files is None:  # gone: taken by an earlier attempt
                    return None
            elif job.aggregate is None:
                files = take_rows(job, cur, Path(tmp), part, progress, pair=pair)
            else:
                files = take_aggregate(job, cur, Path(tmp), part, progress)
            if not files and job.partition is None:
                if move:
                    job.source.rollback()
                return None
            new_progress = progress
            for f in files:  # the root's file last: its last key is where the job resumes
                new_progress = new_progress.after(f)
            if move and job.request.cdc_marker:
                emit_cdc_marker(cur, cdc_content(job.job_id, files, job.partition))
            # 5. record the files and the job's progress; 6. COMMIT
            committing = True  # from here a file may be catalogued: never discarded
            job.commit.commit_chunk(files, new_progress)
            failpoints.reach("after_commit")
    except BaseException as exc:
        state = getattr(exc, "sqlstate", None)
        if move or state in (LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED):
            rollback_quietly(job.source)
        lock = state in (LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED) or isinstance(exc, RowLockWaitOver)
        if lock and not committing:  # taking the rows: nothing of the chunk catalogued
            _discard_uploads(job, part)
        if state == LOCK_NOT_AVAILABLE:
            holders = lock_holders(job.source, job.queries.table) or "no holder left"
            raise LockBusy(
                f"waited {job.limits.lock_timeout:g}s for a lock on "
                f"{job.queries.table.qualified} held by {holders}"
            ) from None
        if state == DEADLOCK_DETECTED:  # two chunks locking shared children in turn
            raise LockBusy(f"deadlock on rows of {job.queries.table.qualified}") from None
        raise
    memory.give_back()  # a chunk's buffers, before the next chunk's
    if job.partition is not None:
        log.info(
            "job %s: partition %s archived whole (%s in %s) and %s",
            job.job_id,
            job.partition.name,
            counted(new_progress.rows, "row"),
            counted(len(files), "file"),
            "dropped" if job.partition.action == PartitionAction.DROP else "detached",
        )
        return new_progress
    root = files[-1]
    log.info(
        "job %s: chunk %d of ~%d, %d rows, %d bytes -> %s (%d of ~%d rows done)",
        job.job_id,
        root.part,
        new_progress.chunks_estimated,
        sum(f.row_count for f in files),
        sum(f.byte_size for f in files),
        root.path if len(files) == 1 else f"{len(files)} files",
        new_progress.rows,
        new_progress.rows_estimated,
    )
    return new_progress


def cdc_content(
    job_id: str, files: list[ArchivedFile], partition: WholePartition | None = None
) -> str:
    """What a CDC consumer reads in the marker of a chunk's deletes: the job's table's
    file (the last), with children the rows taken from each table, and for a whole
    partition (whose DROP decodes as nothing) its name and rows."""
    if partition is not None:
        return json.dumps(
            {
                "job_id": job_id,
                "table": partition.parent.qualified,
                "partition": partition.name,
                "action": str(partition.action),
                "rows": sum(f.row_count for f in files),
            }
        )
    f = files[-1]
    content: dict[str, Any] = {
        "job_id": job_id,
        "table": f.source_table,
        "part": f.part,
        "rows": f.row_count,
        "path": f.path,
    }
    if len(files) > 1:
        content["tables"] = {c.source_table: c.row_count for c in files}
    return json.dumps(content)


def rollback_quietly(conn: BulkConnection) -> None:
    try:
        conn.rollback()
    except Exception:  # the backend may be gone; PostgreSQL rolls back on its own then
        log.debug("rollback failed", exc_info=True)


def _discard_uploads(job: JobContext, first: int) -> None:
    """The files a chunk uploaded before it rolled back waiting for a lock: nobody will
    catalogue them, and the chunk taken again names its files after them."""
    try:
        for part in range(first, job.named.highest + 1):
            for table in job.tables:
                job.storage.delete(job.object_name(part, table))
    except StorageError as exc:  # left for `archiver verify` to name, and the next attempt
        log.warning("job %s: a rolled-back chunk's upload stays: %s", job.job_id, exc)
