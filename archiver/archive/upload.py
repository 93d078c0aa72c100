"""Steps 2-4 of a chunk for the rows a statement returns: stream them into a Parquet file
while it uploads (hashed on the way), then verify that the service holds what was sent
and the file every row taken."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from archiver import failpoints
from archiver.archive.context import FileOf, JobContext
from archiver.bulk import BulkConnection, BulkCursor, record_batches
from archiver.files.stats import ChunkStats
from archiver.files.written import Origin, Ranges, catalogued
from archiver.model import ArchivedFile
from archiver.parquet import ParquetFileWriter, file_metadata
from archiver.pgtypes import sql as pgtypes
from archiver.source.chunks import FIRST_KEY, LAST_KEY
from archiver.source.partitions import bound_range
from archiver.storage.seam import HashingSink, StoredObject, file_tags

# The driver's batches: half its default of 16 MiB. At most ENCODE_QUEUE of them wait for
# the encoder while the driver fills the next, so they are most of what a chunk holds
# beyond its row group. With malloc as Arrow's pool (see cli.main), 8 MiB lowers a copy
# job's peak RSS at the same CPU (docs/performance.md).
BATCH_BYTES = "adbc.postgresql.batch_size_hint_bytes"
READ_BATCH_BYTES = 8 * 1024 * 1024
ENCODE_QUEUE = 2  # batches read ahead of the Parquet encoder


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
    *,
    keep_empty: bool = False,
) -> ArchivedFile | None:
    """Steps 2-4 for the rows the statement just run returns: write, upload, verify.
    The file is uploaded while it is written (and hashed on the way); a local copy is
    kept for the verification. None when the statement returned no row, unless
    `keep_empty` (a whole partition with no rows: a file of none)."""
    local = tmp / f"part-{part}.parquet"
    name = job.object_name(part, of.table.qualified)
    upload = job.storage.upload(name)
    try:
        with local.open("wb") as f:
            sink = HashingSink(f, upload)
            stats, rows_taken = write_parquet(job, record_batches(cur), sink, part, of)
        if rows_taken == 0 and not keep_empty:
            return None
        failpoints.reach("before_upload")
        tags = file_tags(of.table.qualified, job.job_id, *stats.cutoff_range())
        stored = upload.commit(sink.md5, tags=tags, tier=job.request.tier)
    finally:
        upload.abort()
    return verify(job, name, local, sink.md5, stored, rows_taken, part, stats, of)


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
    if rows_taken:
        ranges = Ranges.of(stats)
    else:  # an empty partition's file: no key range; its cutoff range is its bound
        ranges = Ranges([], [], *bound_range(str(of.metadata.get("partition_bound", ""))))
    origin = Origin(
        job.job_id, part, of.table.qualified, str(job.storage.location), of.keys, of.cutoff,
        job.request.publishes, job.request.tier or job.storage.default_tier,
    )  # fmt: skip
    return catalogued(origin, name, local, md5, stored, rows_taken, ranges)


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
