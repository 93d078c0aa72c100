"""One chunk, top to bottom, as design.md states the invariant: take (and lock) the rows,
write Parquet, upload under the job's, attempt's and part's name, verify, then record and
COMMIT through the job's commit strategy. Anything failing before the COMMIT rolls the
source back, and the rows are still in the table."""

from __future__ import annotations

import json
import logging
import queue
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from archiver import failpoints, pgtypes
from archiver.archive import names
from archiver.archive.commit import CommitStrategy
from archiver.archive.stats import ChunkStats, key_text
from archiver.catalog import Catalog
from archiver.db import BulkConnection, BulkCursor
from archiver.errors import LockBusy, VerificationError
from archiver.guardrails import LOCK_NOT_AVAILABLE, emit_cdc_marker, lock_holders
from archiver.model import ArchivedFile, ArchiveRequest, Mode, Progress
from archiver.parquet import ParquetFileWriter, file_metadata, read_metadata
from archiver.source import ChunkQueries, bind_chunk
from archiver.storage import Storage, StoredObject, file_md5

log = logging.getLogger(__name__)

ENCODE_QUEUE = 2  # batches read ahead of the Parquet encoder (~13 MB each on orders)


@dataclass(frozen=True)
class ChunkLimits:
    """How long a chunk statement waits for locks and runs (seconds; 0: no limit), and
    how often a chunk that timed out on a lock is retried before the attempt fails."""

    lock_timeout: float = 5.0
    statement_timeout: float = 0.0
    lock_retries: int = 10


@dataclass(frozen=True)
class JobContext:
    """What every chunk of one job shares."""

    job_id: str
    attempt: int
    request: ArchiveRequest
    queries: ChunkQueries
    source: BulkConnection
    storage: Storage
    catalog: Catalog
    commit: CommitStrategy
    workdir: Path
    limits: ChunkLimits = ChunkLimits()

    @property
    def key_names(self) -> list[str]:
        return [c.name for c in self.queries.table.key]

    def object_name(self, part: int) -> str:
        table = self.queries.table.qualified
        return self.storage.object_name(names.file_name(table, self.job_id, self.attempt, part))


def archive_chunk(job: JobContext, progress: Progress) -> Progress | None:
    """Move (or copy) the next chunk after progress.last_key; None when none is left."""
    part = job.catalog.next_part()
    name = job.object_name(part)
    move = job.request.mode == Mode.MOVE
    try:
        with job.source.cursor() as cur, tempfile.TemporaryDirectory(dir=job.workdir) as tmp:
            local = Path(tmp) / "chunk.parquet"
            # 1. take the chunk's rows (locked, or from the snapshot)
            take_rows(job, cur, progress)
            # 2. stream them into a Parquet file
            stats, rows_taken = write_parquet(job, cur.fetch_record_batch(), local, part)
            if rows_taken == 0:
                if move:
                    job.source.rollback()
                return None
            # 3. upload under the job's, attempt's and part's name
            md5 = file_md5(local)
            failpoints.reach("before_upload")
            stored = job.storage.put_file(name, local, md5)
            # 4. verify what the service holds, and that the file holds every row taken
            archived = verify(job, name, local, md5, stored, rows_taken, part, stats)
            new_progress = progress.after(archived)
            if move and job.request.cdc_marker:
                emit_cdc_marker(cur, cdc_content(archived))
            # 5. record the file and the job's progress; 6. COMMIT
            job.commit.commit_chunk(archived, new_progress)
            failpoints.reach("after_commit")
    except BaseException as exc:
        if move or getattr(exc, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            rollback_quietly(job.source)
        if getattr(exc, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            holders = lock_holders(job.source, job.queries.table) or "no holder left"
            raise LockBusy(
                f"waited {job.limits.lock_timeout:g}s for a lock on "
                f"{job.queries.table.qualified} held by {holders}"
            ) from None
        raise
    log.info(
        "job %s: chunk %d of ~%d, %d rows, %d bytes -> %s (%d of ~%d rows done)",
        job.job_id,
        part,
        new_progress.chunks_estimated,
        archived.row_count,
        archived.byte_size,
        name,
        new_progress.rows,
        new_progress.rows_estimated,
    )
    return new_progress


def take_rows(job: JobContext, cur: BulkCursor, progress: Progress) -> None:
    """Run the chunk's statement: DELETE ... RETURNING in move mode, a read in copy mode."""
    key_range = job.request.key_range
    limits = (job.limits.lock_timeout, job.limits.statement_timeout)
    bind_chunk(cur, job.request.cutoff, progress.last_key, progress.chunk_rows, key_range, limits)
    after = progress.last_key is not None
    if job.request.mode == Mode.MOVE:
        cur.execute(job.queries.take(after_key=after, key_range=key_range))
    else:
        cur.execute(job.queries.read(after_key=after, key_range=key_range))


def write_parquet(
    job: JobContext, reader: pa.RecordBatchReader, local: Path, part: int
) -> tuple[ChunkStats, int]:
    table = job.queries.table
    metadata = file_metadata(
        table.qualified,
        [(c.name, c.type_sql) for c in table.columns],
        job.key_names,
        job.queries.cutoff_column.name,
        job.request.cutoff,
        job.job_id,
        part,
        job.request.mode,
    )
    plans = job.queries.plans
    writer = ParquetFileWriter(
        local,
        reader.schema,
        metadata,
        companions=pgtypes.companions(plans),
        arrow_checked=pgtypes.arrow_checked(plans),
    )
    stats = ChunkStats()
    keys, cutoff = job.key_names, job.queries.cutoff_column.name

    def encode(batch: pa.RecordBatch) -> None:
        # Statistics of the batch as written: a -infinity cutoff value is NULL there.
        stats.observe(writer.write(batch), keys, cutoff)

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
        source_table=job.queries.table.qualified,
        storage_url=str(job.storage.location),
        path=name,
        row_count=rows_taken,
        byte_size=size,
        md5=md5,
        key_columns=job.key_names,
        min_key=[key_text(v) for v in stats.min_key],
        max_key=[key_text(v) for v in stats.max_key],
        cutoff_column=job.queries.cutoff_column.name,
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


def cdc_content(f: ArchivedFile) -> str:
    """What a CDC consumer reads in the marker of a chunk's deletes."""
    return json.dumps(
        {
            "job_id": f.job_id,
            "table": f.source_table,
            "part": f.part,
            "rows": f.row_count,
            "path": f.path,
        }
    )


def rollback_quietly(conn: BulkConnection) -> None:
    try:
        conn.rollback()
    except Exception:  # the backend may be gone; PostgreSQL rolls back on its own then
        log.debug("rollback failed", exc_info=True)
