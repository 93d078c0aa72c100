"""Step 1 of a chunk, the four ways of taking its rows: a table's rows (a DELETE that
chooses them, a key range, or a read in copy mode), an aggregate's, or a whole
partition."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from archiver import failpoints
from archiver.archive.context import FileOf, JobContext
from archiver.archive.upload import archive_file, chunk_cursor
from archiver.bulk import BulkConnection, BulkCursor
from archiver.model import ArchivedFile, KeyRange, Mode, Progress
from archiver.source.binding import bind_chunk, set_lock_timeout
from archiver.source.guardrails import DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE

log = logging.getLogger(__name__)


class RowLockWaitOver(Exception):
    """A chunk's DELETE that waited for row locks timed out on one (or deadlocked)."""


def take_partition(
    job: JobContext, cur: BulkCursor, tmp: Path, part: int, progress: Progress
) -> list[ArchivedFile] | None:
    """A whole partition (see archiver.partitions) in this one transaction: locked against
    writes, read in key order into files, then detached and dropped (or renamed). None
    when it is no longer attached: an earlier attempt committed it."""
    whole = job.partition
    assert whole is not None
    bound = whole.attached(job.source)  # (read and rolled back: before anything else)
    if bound is None:
        return None
    limits = job.limits.timeouts
    bind_chunk(cur, job.request.cutoff, None, 1, None, limits)
    # Writes wait from here to COMMIT: the rows read are the rows dropped. Self-conflicting,
    # so two attempts never read one partition at once.
    cur.execute(f"LOCK TABLE {whole.quoted} IN SHARE ROW EXCLUSIVE MODE")
    of = dataclasses.replace(
        FileOf.root(job), metadata={"partition": whole.name, "partition_bound": bound}
    )
    files: list[ArchivedFile] = []
    last_key = None
    while True:
        bind_chunk(cur, job.request.cutoff, last_key, progress.chunk_rows, None, limits)
        cur.execute(job.queries.read(after_key=last_key is not None))
        # an empty partition leaves a file too, holding no rows but its name and bound:
        # restore recreates the partition from it (else rows of its range land in DEFAULT)
        taken = archive_file(job, cur, tmp, part + len(files), of, keep_empty=not files)
        if taken is None:
            break
        files.append(taken)
        if not taken.row_count:
            break
        last_key = taken.max_key
    failpoints.reach("before_detach")
    for statement in whole.statements():
        cur.execute(statement)
    return files


def take_aggregate(
    job: JobContext, cur: BulkCursor, tmp: Path, part: int, progress: Progress
) -> list[ArchivedFile]:
    """An aggregate's chunk (see archiver.aggregates): collect parents first, then take
    leaves first, one file per table with rows; the root's file comes last. Empty when
    the root has no row left."""
    agg = job.aggregate
    assert agg is not None
    key_range = job.key_range
    limits = job.limits.timeouts
    bind_chunk(cur, job.request.cutoff, progress.last_key, progress.chunk_rows, key_range, limits)
    move = job.request.mode == Mode.MOVE
    for statement in agg.collect(
        after_key=progress.last_key is not None, key_range=key_range, move=move
    ):
        cur.execute(statement)
    cur.execute(agg.count_root())
    if not cur.fetchall()[0][0]:
        return []
    files: list[ArchivedFile] = []
    for m in reversed(agg.members):
        cur.execute(agg.take(m, move=move))
        cutoff = job.queries.cutoff_column.name if m.index == 0 else ""
        taken = archive_file(job, cur, tmp, part + len(files), FileOf(m.table, m.plans, cutoff))
        if taken is not None:
            files.append(taken)
    return files


def take_rows(
    job: JobContext, cur: BulkCursor, tmp: Path, part: int, progress: Progress, *, pair: bool
) -> list[ArchivedFile]:
    """A table's chunk: DELETE ... RETURNING in move mode, a read in copy mode. A copy job
    with a reader reads this chunk and the next side by side, a file each: decoding the
    driver's rows is the job's longest thread, and two of them split it over two cores
    (docs/performance.md). Where fewer than two chunks' rows
    are estimated to be left, the two share them evenly."""
    reader = job.reader if pair else None
    rows = progress.chunk_rows
    left = progress.rows_estimated - progress.rows
    if reader is not None and 0 < left < 2 * rows:
        rows = -(-left // 2)
    key_range = job.key_range
    after = progress.last_key is not None

    def run(
        cur: BulkCursor,
        statement: str,
        timeouts: tuple[float, float],
        key_range: KeyRange | None = key_range,
    ) -> None:
        bind_chunk(cur, job.request.cutoff, progress.last_key, rows, key_range, timeouts)
        cur.execute(statement)

    limits, of = job.limits, FileOf.root(job)
    if job.waits_for_row_locks:  # move mode, the DELETE waiting briefly for row locks
        waits = (limits.row_wait, limits.statement_timeout)

        def delete(statement: str, bound: KeyRange | None = key_range) -> ArchivedFile | None:
            run(cur, statement, waits, bound)
            return archive_file(job, cur, tmp, part, of)

        try:
            taken, choose_rows = None, not job.takes_key_ranges
            if not choose_rows:
                run(cur, job.queries.chunk_end(after_key=after, key_range=key_range), waits)
                found = cur.fetchall()[0]
                taken, choose_rows = take_key_range(job, found, delete, rows, after)
            if choose_rows:
                taken = delete(
                    job.queries.take(after_key=after, key_range=key_range, skip_locked=False)
                )
        except Exception as exc:
            if getattr(exc, "sqlstate", None) in (LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED):
                raise RowLockWaitOver from exc
            raise
        # the rest of the transaction (the catalog, the job's progress) waits as any chunk
        set_lock_timeout(cur, limits.lock_timeout)
        return [taken] if taken is not None else []
    if job.request.mode == Mode.MOVE:
        run(cur, job.queries.take(after_key=after, key_range=key_range), limits.timeouts)
    else:
        run(cur, job.queries.read(after_key=after, key_range=key_range), limits.timeouts)
    if reader is None:
        taken = archive_file(job, cur, tmp, part, of)
        return [taken] if taken is not None else []

    def read_next(reader: BulkConnection) -> ArchivedFile | None:
        with chunk_cursor(reader) as cur:
            run(cur, job.queries.read_next(after_key=after, key_range=key_range), limits.timeouts)
            return archive_file(job, cur, tmp, part + 1, of)

    with ThreadPoolExecutor(1, thread_name_prefix="copy-next") as pool:
        later = pool.submit(read_next, reader)
        taken = archive_file(job, cur, tmp, part, of)
        return [f for f in (taken, later.result()) if f is not None]


def take_key_range(
    job: JobContext,
    found: tuple[bool | None, str | None, str | None],
    delete: Callable[[str, KeyRange], ArchivedFile | None],
    rows: int,
    after: bool,
) -> tuple[ArchivedFile | None, bool]:
    """A waiting move chunk of `rows` (after the last key, or not) as one key range, from
    what `chunk_end` `found`: its end is the key `rows` keys on, or the last key; every
    row older than the cutoff up to it is deleted (`delete` runs the statement and writes
    its file). Returns the file (None: no old row taken) and whether the chunk is still
    to be taken by choosing its rows. Where old rows are sparse in key order, key ranges
    would be thin, and so would their files: when the next row is not old, or a full
    range is less than 90% old rows, the job chooses each chunk's rows for the rest of
    the attempt; a range that took no old row then is no sign that the job is done, so
    that chunk is taken again at once. A job is done when no row is left after the last
    key, or when its last range took no old row."""
    first_old, nth, last = found
    queries, key_range = job.queries, job.key_range
    table = queries.table.qualified
    if first_old is None:
        return None, False
    if not first_old:
        _sparse(job, f"the next row of {table} is not older than the cutoff")
        return None, True
    key_range = dataclasses.replace(key_range or KeyRange(None, None), through=nth or last)
    log.debug("job %s: a key range of %s, through key %s", job.job_id, table, key_range.through)
    taken = delete(
        queries.take(after_key=after, key_range=key_range, skip_locked=False, by_key_range=True),
        key_range,
    )
    old = taken.row_count if taken else 0
    if nth is not None and old < 0.9 * rows:
        _sparse(job, f"{old:,} of the next {rows:,} keys of {table} are rows older than the cutoff")
        return taken, taken is None
    return taken, False


def _sparse(job: JobContext, found: str) -> None:
    job.row_locks.sparse = True
    log.info(
        "job %s: %s; choosing each chunk's rows in key order for the rest of the attempt",
        job.job_id,
        found,
    )
