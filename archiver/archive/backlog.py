"""The backlog plan: a job whose rows are most of its table (a first archive, years of
backlog) reads the table by ranges of its pages on several connections at once, each
range a file, where the key plan (archive.job) reads chunks one after another in key
order. Chosen by archive.plan.choose_plan; ARCHIVER_BACKLOG_CONNECTIONS connections
(the job's own one of them), each decoding and encoding on a core of its own.

What commits, and what a retry does:

- **Move**: each range is one transaction on its connection: DELETE the range's old
  rows ... RETURNING them (source.ctid.delete_pages), write and upload the file, record
  it and the job's progress, COMMIT, through the job's commit strategy as any chunk's
  (one range at a time commits: the progress each writes holds every range before it).
  A row is in the table or in the one committed file whose DELETE took it. A range that
  rolled back is taken again; a retry of the job takes again every range no commit
  marked done (progress.backlog, written in the commit that made it so), so the worst a
  crash costs is a second scan of ranges whose rows are gone. A row updated or inserted
  into a range already taken stays live, for the next archive (as a key-plan job
  leaves a row that turns old behind its last key).
- **Copy**: one exported snapshot (as pg_dump --jobs shares one), imported by every
  connection; each range read and uploaded, and all the files recorded in one catalog
  transaction at the end: a copy at one snapshot, or none. A retry starts over at a new
  snapshot (its earlier attempt's uploads swept as any attempt's are); a job whose one
  commit landed is done.

A file's key and cutoff ranges (the catalog's, read by query pruning, restore and erase)
are its rows' own, as every file's: files of one backlog job overlap in key, which none
of them assumes otherwise. Rate limits (rows or WAL per second) keep a job on the key
plan when it starts (a limit set later is not applied to a backlog job: said in its log);
the maintenance window and the replicas' lag are checked before every range."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from archiver import failpoints, memory
from archiver.archive.chunk import cdc_content, rollback_quietly
from archiver.archive.commit import CommitStrategy
from archiver.archive.context import FileOf, JobContext
from archiver.archive.pacing import Interrupt, Waited, back_off, pace, rate_limited
from archiver.archive.plan import BACKLOG
from archiver.archive.snapshot import import_snapshot, lock_tables, open_snapshot
from archiver.archive.upload import archive_file, chunk_cursor
from archiver.bulk import BulkConnection
from archiver.catalog import Catalog
from archiver.errors import LockBusy, StorageError
from archiver.model import ArchivedFile, Mode, PageSpan, Progress
from archiver.source.binding import bind_chunk, set_lock_timeout
from archiver.source.ctid import bind_pages, delete_pages, read_pages
from archiver.source.guardrails import (
    DEADLOCK_DETECTED,
    LOCK_NOT_AVAILABLE,
    emit_cdc_marker,
    lock_holders,
)

log = logging.getLogger(__name__)

ChunkDone = Callable[[int, int, float], None]


@dataclasses.dataclass(frozen=True)
class PageRanges:
    """The job's pages -- the table's, or [first, end) of them for a share of a split
    backlog -- cut into `count` ranges of `pages` each; the last ends where the job's
    pages end (or runs on to the table's end, pages added while the job runs), and
    `done` are those committed."""

    pages: int
    count: int
    done: frozenset[int] = frozenset()
    first: int = 0
    end: int | None = None

    @classmethod
    def plan(
        cls, pages: int, old_rows: int, chunk_rows: int, lanes: int, span: PageSpan | None = None
    ) -> PageRanges:
        """The job's share of the table's `pages` (all, or `span`) in ranges of about
        `chunk_rows` old rows each (the old rows taken as spread evenly over them), and
        at least one per connection."""
        first, end = (0, None) if span is None else (span.first, span.end)
        held = max(0, (pages if end is None else min(pages, end)) - first)
        per = held if old_rows <= 0 else -(-chunk_rows * held // old_rows)
        per = max(1, min(per, -(-held // max(1, lanes))))
        return cls(per, max(1, -(-held // per)), first=first, end=end)

    def bounds(self, i: int) -> tuple[int, int | None]:
        start = self.first + i * self.pages
        return start, self.end if i == self.count - 1 else start + self.pages

    def left(self) -> list[int]:
        return [i for i in range(self.count) if i not in self.done]

    def to_json(self) -> dict[str, Any]:
        data = {"pages": self.pages, "ranges": self.count, "done": sorted(self.done)}
        return {**data, "first": self.first, "end": self.end} if self.first or self.end else data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PageRanges:
        return cls(
            int(data["pages"]),
            int(data["ranges"]),
            frozenset(data.get("done", [])),
            int(data.get("first", 0)),
            data.get("end"),
        )


@dataclasses.dataclass
class _Run:
    """What the job's connections share while it runs; every field under `lock`."""

    ranges: PageRanges
    progress: Progress
    part: int  # the next file's part
    left: deque[int]
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    files: list[ArchivedFile] = dataclasses.field(default_factory=list)  # copy: uploaded
    ended: BaseException | None = None  # the first error, stop, cancel or lost lease

    def take(self) -> tuple[int, int] | None:
        """The next range and its file's part; None when none is left or the job ends."""
        with self.lock:
            if self.ended is not None or not self.left:
                return None
            return self.left.popleft(), self.next_part()

    def next_part(self) -> int:
        """A new file's part (under the lock)."""
        self.part += 1
        return self.part - 1

    def end(self, reason: BaseException) -> None:
        with self.lock:
            if self.ended is None:
                self.ended = reason


def run_backlog(
    job: JobContext,
    progress: Progress,
    pages: Callable[[], int],
    interrupt: Interrupt,
    on_chunk: ChunkDone | None = None,
    on_wait: Waited | None = None,
) -> Progress:
    """Archive every range of the job's table (`pages()`: how many it has now); the job's
    progress when all are done."""
    assert job.lanes is not None
    copy = job.request.mode == Mode.COPY
    if copy and progress.files:  # its one commit landed before the crash
        return progress
    if progress.backlog is not None and not copy:
        ranges = PageRanges.from_json(progress.backlog)
    else:
        old = max(0, progress.rows_estimated - progress.rows)
        lanes, span = job.backlog.connections, job.request.pages
        ranges = PageRanges.plan(pages(), old, progress.chunk_rows, lanes, span)
    progress = _with(progress, ranges)
    progress.chunks_estimated = ranges.count  # at most a file a range
    if not copy:  # the plan outlives a crash before the first commit: a retry keeps it
        job.catalog.checkpoint(progress)
        job.catalog.commit()
    if rate_limited(job.catalog.limits()):
        log.warning(
            "job %s: its rate limit is not applied: it reads by pages (the backlog plan, "
            "chosen when it started without one); its window and replica lag still are",
            job.job_id,
        )
    # (a copy's pair reader, ARCHIVER_COPY_CONNECTIONS=2, is left out: lanes read instead)
    snapshot = _snapshot(dataclasses.replace(job, reader=None), interrupt) if copy else None
    run = _Run(ranges, progress, job.next_part(), deque(ranges.left()))
    log.info(
        "job %s: the backlog plan, %d of %d ranges of %d pages left, on %d connections",
        job.job_id,
        len(run.left),
        ranges.count,
        ranges.pages,
        job.backlog.connections,
    )
    lanes = max(1, min(job.backlog.connections, len(run.left)))
    recorded = False  # a copy's files catalogued: from then on never discarded
    try:
        with ThreadPoolExecutor(max(1, lanes - 1), thread_name_prefix="backlog") as pool:
            others = [
                pool.submit(_lane, job, run, None, snapshot, interrupt, on_chunk, on_wait)
                for _ in range(lanes - 1)
            ]
            _lane(job, run, (job.source, job.commit), snapshot, interrupt, on_chunk, on_wait)
            for lane in others:
                lane.result()
        if run.ended is not None:
            raise run.ended
        if copy and run.files:
            recorded = True  # (a COMMIT that errored may still have committed)
            job.commit.commit_chunk(sorted(run.files, key=lambda f: f.part), run.progress)
            failpoints.reach("after_commit")
        return run.progress
    except BaseException:
        if copy and not recorded:  # uploaded, never to be recorded (a crash leaves them
            for f in run.files:  # to the next attempt's sweep)
                _discard(job, f.part)
        raise
    finally:
        if copy:
            rollback_quietly(job.source)


def _with(progress: Progress, ranges: PageRanges) -> Progress:
    return dataclasses.replace(progress, last_key=None, plan=BACKLOG, backlog=ranges.to_json())


def _snapshot(job: JobContext, interrupt: Interrupt) -> str:
    busy = 0
    while True:
        try:
            snapshot = open_snapshot(job, export=True)
            assert snapshot is not None
            failpoints.reach("copy_snapshot_open")
            return snapshot
        except LockBusy as exc:
            busy += 1
            back_off(job, busy, f"snapshot not taken: {exc}", interrupt)


def _lane(
    job: JobContext,
    run: _Run,
    own: tuple[BulkConnection, CommitStrategy] | None,
    snapshot: str | None,
    interrupt: Interrupt,
    on_chunk: ChunkDone | None,
    on_wait: Waited | None,
) -> None:
    """One connection's share: ranges taken one after another until none is left."""
    try:
        with contextlib.ExitStack() as stack:
            assert job.lanes is not None
            conn, commit = own if own is not None else job.lanes(stack)
            if snapshot is not None and own is None:
                import_snapshot(conn, snapshot)
                lock_tables(job, conn)  # a lock held past lock_timeout fails the attempt
            # pace() from a lane: the job's catalog connection under the run's lock for
            # each call, not for the waits between them (another lane may be committing)
            paced = dataclasses.replace(
                job, source=conn, catalog=cast(Catalog, _LockedCatalog(job.catalog, run.lock))
            )
            while (taken := run.take()) is not None:
                i, part = taken
                reason = interrupt()
                if reason is not None:
                    raise reason
                pace(paced, None, interrupt, on_wait)
                started = time.monotonic()
                f = _take_range(job, run, conn, commit, i, part, interrupt)
                if f is not None and on_chunk is not None:
                    on_chunk(f.row_count, f.byte_size, time.monotonic() - started)
                memory.give_back()
    except BaseException as exc:
        run.end(exc)


class _LockedCatalog:
    """What pace() asks of the job's catalog, each call under `lock`."""

    def __init__(self, catalog: Catalog, lock: threading.Lock) -> None:
        self.catalog, self.lock = catalog, lock

    def limits(self) -> dict[str, Any]:
        with self.lock:
            return self.catalog.limits()

    def set_throttled(self, reason: str | None) -> None:
        with self.lock:
            self.catalog.set_throttled(reason)


def _take_range(
    job: JobContext,
    run: _Run,
    conn: BulkConnection,
    commit: CommitStrategy,
    i: int,
    part: int,
    interrupt: Interrupt,
) -> ArchivedFile | None:
    """Range `i` into part `part`: taken, and for a move committed; a move's range that
    rolled back on a lock is taken again, under a new part. (A copy's lane never waits
    for a lock once its table is locked: an error there ends the attempt, never a read
    of the range again, which could only be at another snapshot.)"""
    busy = 0  # lock timeouts of this range in a row
    while True:
        try:
            return _range_once(job, run, conn, commit, i, part)
        except _RowLocks:  # the waiting DELETE ran out: skip locked rows from now on
            job.row_locks.skip = True
        except LockBusy as exc:
            busy += 1
            back_off(job, busy, f"range rolled back: {exc}", interrupt)
        with run.lock:
            part = run.next_part()


class _RowLocks(Exception):
    """The waiting DELETE of a range timed out on a row lock (or deadlocked)."""


def _range_once(
    job: JobContext, run: _Run, conn: BulkConnection, commit: CommitStrategy, i: int, part: int
) -> ArchivedFile | None:
    move = job.request.mode == Mode.MOVE
    first, end = run.ranges.bounds(i)
    waits = move and not job.row_locks.skip and job.limits.row_lock_wait > 0
    limits = job.limits
    timeouts = (limits.row_wait, limits.statement_timeout) if waits else limits.timeouts
    committing = False
    try:
        with chunk_cursor(conn) as cur, tempfile.TemporaryDirectory(dir=job.workdir) as tmp:
            bind_chunk(cur, job.request.cutoff, None, 1, None, timeouts)
            bind_pages(cur, first, end)
            bounded = end is not None
            if move:
                cur.execute(delete_pages(job.queries, bounded=bounded, skip_locked=not waits))
            else:
                cur.execute(read_pages(job.queries, bounded=bounded))
            f = archive_file(job, cur, Path(tmp), part, FileOf.root(job))
            if move and f is not None and job.request.cdc_marker:
                emit_cdc_marker(cur, cdc_content(job.job_id, [f]))
            if move:
                set_lock_timeout(cur, limits.lock_timeout)  # the commit waits as any chunk's
            with run.lock:
                done = dataclasses.replace(run.ranges, done=run.ranges.done | {i})
                progress = _with(run.progress if f is None else run.progress.after(f), done)
                committing = True
                if not move:  # recorded at the end; its progress shown meanwhile
                    if f is not None:
                        run.files.append(f)
                    job.catalog.checkpoint(progress)
                    job.catalog.commit()
                elif f is None:
                    conn.rollback()
                else:
                    commit.commit_chunk([f], progress)
                run.ranges, run.progress = done, progress
            if move and f is not None:
                failpoints.reach("after_commit")  # (outside the lock: other lanes go on)
            log.info(
                "job %s: range %d of %d (pages %d-%s), %s (%d of ~%d rows done)",
                job.job_id,
                i + 1,
                done.count,
                first,
                end - 1 if end is not None else "end",
                f"{f.row_count} rows, {f.byte_size} bytes -> {f.path}" if f else "no old row",
                progress.rows,
                progress.rows_estimated,
            )
            return f
    except BaseException as exc:
        if not move:
            raise
        state = getattr(exc, "sqlstate", None)
        rollback_quietly(conn)
        locked = state in (LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED)
        if locked and not committing:
            _discard(job, part)
        if locked and waits and not committing:
            raise _RowLocks from exc
        if state == LOCK_NOT_AVAILABLE:
            holders = lock_holders(conn, job.queries.table) or "no holder left"
            raise LockBusy(
                f"waited {limits.lock_timeout:g}s for a lock on "
                f"{job.queries.table.qualified} held by {holders}"
            ) from None
        if state == DEADLOCK_DETECTED:
            raise LockBusy(f"deadlock on rows of {job.queries.table.qualified}") from None
        raise


def _discard(job: JobContext, part: int) -> None:
    """A rolled-back range's upload: nobody will catalogue it."""
    try:
        job.storage.delete(job.object_name(part))
    except StorageError as exc:  # left for `archiver verify` to name, and the next attempt
        log.warning("job %s: a rolled-back range's upload stays: %s", job.job_id, exc)
