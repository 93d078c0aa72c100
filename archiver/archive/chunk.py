"""One chunk, top to bottom, as design.md states the invariant: take (and lock) the rows,
write Parquet, upload under the job's, attempt's and part's name, verify, then record and
COMMIT through the job's commit strategy. Anything failing before the COMMIT rolls the
source back, and the rows are still in the table."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import queue
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from archiver import failpoints, pgtypes
from archiver.archive import names
from archiver.archive.commit import CommitStrategy
from archiver.archive.stats import ChunkStats, key_text
from archiver.catalog import Catalog
from archiver.console import counted
from archiver.db import BulkConnection, BulkCursor, record_batches
from archiver.errors import LockBusy, VerificationError
from archiver.guardrails import (
    DEADLOCK_DETECTED,
    LOCK_NOT_AVAILABLE,
    emit_cdc_marker,
    lock_holders,
)
from archiver.model import ArchivedFile, ArchiveRequest, KeyRange, Mode, Progress
from archiver.parquet import ParquetFileWriter, file_metadata, read_metadata
from archiver.partitions import PartitionAction, WholePartition
from archiver.source import (
    FIRST_KEY,
    LAST_KEY,
    ChunkQueries,
    TableInfo,
    bind_chunk,
    set_lock_timeout,
)
from archiver.storage import HashingSink, Storage, StoredObject

if TYPE_CHECKING:
    from archiver.aggregates import AggregateQueries

log = logging.getLogger(__name__)

# The driver's batches: half its default of 16 MiB. At most ENCODE_QUEUE of them wait for
# the encoder while the driver fills the next, so they are most of what a chunk holds
# beyond its row group. With malloc as Arrow's pool (see cli.main), 8 MiB took a copy
# job's peak RSS 200-204 -> 194-199 MB at 1M reference rows and 221-229 -> 202-207 MB
# at 3M (three interleaved runs each), at the same CPU (README, "Memory").
BATCH_BYTES = "adbc.postgresql.batch_size_hint_bytes"
READ_BATCH_BYTES = 8 * 1024 * 1024
ENCODE_QUEUE = 2  # batches read ahead of the Parquet encoder (~7 MB each on orders)


@dataclass(frozen=True)
class ChunkLimits:
    """How long a chunk statement waits for locks and runs (seconds; 0: no limit), and
    how often a chunk that timed out on a lock is retried before the attempt fails."""

    lock_timeout: float = 5.0
    statement_timeout: float = 0.0
    lock_retries: int = 10
    row_lock_wait: float = 0.1  # a move chunk's wait for a row lock; 0: skip locked rows

    @property
    def timeouts(self) -> tuple[float, float]:
        """(lock_timeout, statement_timeout), as source.bind_chunk sets them."""
        return self.lock_timeout, self.statement_timeout

    @property
    def row_wait(self) -> float:
        """The lock timeout of a chunk's DELETE that waits for row locks: never longer
        than any chunk's."""
        return min(self.row_lock_wait, self.lock_timeout)


@dataclass
class RowLocks:
    """How a job's move chunks find their rows, for the rest of the attempt. They wait
    (briefly) for rows others hold until the first wait runs out, then skip locked rows
    (`skip`). Waiting, they take key ranges until the next row is not older than the
    cutoff or a range is less than 90% old rows, then choose each chunk's rows in key
    order (`sparse`)."""

    skip: bool = False
    sparse: bool = False


@dataclass(frozen=True)
class JobContext:
    """What every chunk of one job shares."""

    job_id: str
    attempt: int  # the job's claim count: the fencing token in its file names
    request: ArchiveRequest
    queries: ChunkQueries
    source: BulkConnection
    storage: Storage
    catalog: Catalog
    commit: CommitStrategy
    workdir: Path
    limits: ChunkLimits = ChunkLimits()
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)  # maintenance windows
    aggregate: AggregateQueries | None = None  # --with-children
    partition: WholePartition | None = None  # this job takes one partition whole
    # copy mode on one table: a second connection on the job's snapshot (see take_rows)
    reader: BulkConnection | None = None
    parent: TableInfo | None = None  # a partition's job: its files are the parent's
    row_locks: RowLocks = field(default_factory=RowLocks)

    def object_name(self, part: int, table: str | None = None) -> str:
        table = table or self.tables[0]
        return self.storage.object_name(names.file_name(table, self.job_id, self.attempt, part))

    @property
    def waits_for_row_locks(self) -> bool:
        """The next chunk's DELETE waits up to limits.row_wait for a row another
        transaction holds instead of skipping locked rows (source.ChunkQueries.take):
        move mode on a plain table whose key Arrow orders, until a wait first runs out."""
        t = self.queries.table
        return (
            self.request.mode == Mode.MOVE
            and self.aggregate is None
            and self.partition is None
            and not t.partitioned
            and t.key_in_arrow_order
            and self.limits.row_lock_wait > 0
            and not self.row_locks.skip
        )

    @property
    def takes_key_ranges(self) -> bool:
        """The next waiting chunk deletes a key range (source.ChunkQueries.take with
        by_key_range): a one-column key, while old rows have been dense in key order."""
        return (
            self.waits_for_row_locks
            and len(self.queries.table.key) == 1
            and not self.row_locks.sparse
        )

    @property
    def tables(self) -> list[str]:
        """Every table this job writes files of: its own, then its aggregate's."""
        if self.parent is not None:
            return [self.parent.qualified]
        if self.aggregate is None:
            return [self.queries.table.qualified]
        return [m.table.qualified for m in self.aggregate.members]


class _RowLockWaitOver(Exception):
    """A chunk's DELETE that waited for row locks timed out on one (or deadlocked)."""


def archive_chunk(job: JobContext, progress: Progress, *, pair: bool = True) -> Progress | None:
    """Move (or copy) the next chunk after progress.last_key; None when none is left.
    `pair`: a job with a reader (copy mode) reads the next two chunks at once."""
    try:
        return _archive_chunk(job, progress, pair=pair)
    except _RowLockWaitOver as exc:  # rolled back; taken again below, out of the handler
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
    part = job.catalog.next_part()
    move = job.request.mode == Mode.MOVE
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
            job.commit.commit_chunk(files, new_progress)
            failpoints.reach("after_commit")
    except BaseException as exc:
        state = getattr(exc, "sqlstate", None)
        if move or state in (LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED):
            rollback_quietly(job.source)
        if state == LOCK_NOT_AVAILABLE:
            holders = lock_holders(job.source, job.queries.table) or "no holder left"
            raise LockBusy(
                f"waited {job.limits.lock_timeout:g}s for a lock on "
                f"{job.queries.table.qualified} held by {holders}"
            ) from None
        if state == DEADLOCK_DETECTED:  # two chunks locking shared children in turn
            raise LockBusy(f"deadlock on rows of {job.queries.table.qualified}") from None
        raise
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


@contextlib.contextmanager
def chunk_cursor(conn: BulkConnection) -> Iterator[BulkCursor]:
    """A cursor whose statements stream in READ_BATCH_BYTES batches."""
    with conn.cursor() as cur:
        cur.adbc_statement.set_options(**{BATCH_BYTES: str(READ_BATCH_BYTES)})
        yield cur


def archive_file(
    job: JobContext,
    cur: BulkCursor,
    tmp: Path,
    part: int,
    of: FileOf,
) -> ArchivedFile | None:
    """Steps 2-4 for the rows the statement just run returns: write, upload, verify.
    The file is uploaded while it is written (and hashed on the way); a local copy is
    kept for the verification. None when the statement returned no row."""
    local = tmp / f"part-{part}.parquet"
    name = job.object_name(part, of.table.qualified)
    upload = job.storage.upload(name)
    try:
        with local.open("wb") as f:
            sink = HashingSink(f, upload)
            stats, rows_taken = write_parquet(job, record_batches(cur), sink, part, of)
        if rows_taken == 0:
            return None
        failpoints.reach("before_upload")
        stored = upload.commit(sink.md5)
    finally:
        upload.abort()
    return verify(job, name, local, sink.md5, stored, rows_taken, part, stats, of)


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
        taken = archive_file(job, cur, tmp, part + len(files), of)
        if taken is None:
            break
        files.append(taken)
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
    key_range = job.request.key_range
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
    (measured in the README's "Performance" section). Where fewer than two chunks' rows
    are estimated to be left, the two share them evenly."""
    reader = job.reader if pair else None
    rows = progress.chunk_rows
    left = progress.rows_estimated - progress.rows
    if reader is not None and 0 < left < 2 * rows:
        rows = -(-left // 2)
    key_range = job.request.key_range
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
                raise _RowLockWaitOver from exc
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
    queries, key_range = job.queries, job.request.key_range
    table = queries.table.qualified
    if first_old is None:
        return None, False
    if not first_old:
        _sparse(job, f"the next row of {table} is not older than the cutoff")
        return None, True
    key_range = KeyRange(key_range.after if key_range else None, nth or last)
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


@dataclass(frozen=True)
class FileOf:
    """The table a chunk's file holds rows of: the job's, or one of its aggregate's."""

    table: TableInfo
    plans: list[pgtypes.ColumnPlan]
    cutoff: str  # its cutoff column; "" for a table archived with its parents' rows
    metadata: dict[str, str] = field(default_factory=dict)  # more of the file's metadata

    @classmethod
    def root(cls, job: JobContext) -> FileOf:
        """The job's own table -- a partition's rows named and catalogued as its parent's,
        so restore routes them."""
        q, table = job.queries, job.queries.table
        if job.parent is not None:
            table = dataclasses.replace(table, schema=job.parent.schema, name=job.parent.name)
        return cls(table, q.plans, q.cutoff_column.name)

    @property
    def keys(self) -> list[str]:
        return [c.name for c in self.table.key]


def write_parquet(
    job: JobContext,
    reader: pa.RecordBatchReader,
    sink: HashingSink,
    part: int,
    of: FileOf,
) -> tuple[ChunkStats, int]:
    table = of.table
    metadata = file_metadata(
        table.qualified,
        [(c.name, c.type_sql) for c in table.columns],
        of.keys,
        of.cutoff,
        job.request.cutoff,
        job.job_id,
        part,
        job.request.mode,
        of.metadata,
    )
    plans = of.plans
    schema = reader.schema
    for name in (FIRST_KEY, LAST_KEY):  # not part of the row
        if name in schema.names:
            schema = schema.remove(schema.get_field_index(name))
    writer = ParquetFileWriter(
        sink,
        schema,
        metadata,
        companions=pgtypes.companions(plans),
        arrow_checked=pgtypes.arrow_checked(plans),
        unscaled=pgtypes.unscaled(plans),
        dictionary=pgtypes.dictionary_encoded(plans),
    )
    stats = ChunkStats(arrow_order=table.key_in_arrow_order)
    keys, cutoff = of.keys, of.cutoff

    def encode(batch: pa.RecordBatch) -> None:
        # Statistics of the batch as written: a -infinity cutoff value is NULL there.
        stats.observe(writer.write(stats.take_bounds(batch)), keys, cutoff)

    try:
        _overlapped(reader, encode)
    except BaseException:
        writer.abort()
        raise
    rows = writer.close({"row_count": str(writer.rows)})
    return stats, rows


def verify(
    job: JobContext,
    name: str,
    local: Path,
    md5: str,
    stored: StoredObject,
    rows_taken: int,
    part: int,
    stats: ChunkStats,
    of: FileOf,
) -> ArchivedFile:
    """What the service holds equals what was sent; the file holds every row taken."""
    size = local.stat().st_size
    if stored.size != size or stored.md5 != md5:
        raise VerificationError(
            f"{name}: storage reports {stored.size} bytes md5 {stored.md5}, "
            f"sent {size} bytes md5 {md5}"
        )
    file_rows, _ = read_metadata(local)
    if file_rows != rows_taken:
        raise VerificationError(f"{name}: file holds {file_rows} rows, {rows_taken} were taken")
    assert stats.min_key is not None and stats.max_key is not None
    min_cutoff, max_cutoff = stats.cutoff_range()
    return ArchivedFile(
        job_id=job.job_id,
        part=part,
        source_table=of.table.qualified,
        storage_url=str(job.storage.location),
        path=name,
        row_count=rows_taken,
        byte_size=size,
        md5=md5,
        key_columns=of.keys,
        min_key=[key_text(v) for v in stats.min_key],
        max_key=[key_text(v) for v in stats.max_key],
        cutoff_column=of.cutoff,
        min_cutoff_value=min_cutoff,
        max_cutoff_value=max_cutoff,
    )


def _overlapped(reader: pa.RecordBatchReader, encode: Callable[[pa.RecordBatch], None]) -> None:
    """Read batches in this thread while another encodes them: the ADBC driver and
    pyarrow release the GIL, so decoding COPY and writing Parquet run side by side.
    At most ENCODE_QUEUE batches wait (memory stays flat however big the chunk)."""
    pending: queue.Queue[pa.RecordBatch | None] = queue.Queue(ENCODE_QUEUE)
    failed: list[BaseException] = []

    def run() -> None:
        while (batch := pending.get()) is not None:
            if not failed:
                try:
                    encode(batch)
                except BaseException as exc:  # re-raised in the reading thread
                    failed.append(exc)

    encoder = threading.Thread(target=run, name="parquet-encode", daemon=True)
    encoder.start()
    try:
        for batch in reader:
            if failed:
                break
            if batch.num_rows:
                pending.put(batch)
    finally:
        pending.put(None)
        encoder.join()
    if failed:
        raise failed[0]


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
