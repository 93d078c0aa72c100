"""The archive pipeline: one chunk at a time, each chunk one source transaction.

It reads top to bottom like the invariant in design.md -- take (and lock) the rows, write
Parquet, upload under the job's, attempt's and part's name, verify, record, COMMIT -- and knows nothing of
the queue: the job's bookkeeping reaches it through the `Ledger` seam.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from archiver import failpoints, pgtypes, source
from archiver.errors import InputError, VerificationError
from archiver.ident import TableName
from archiver.parquet import (
    ParquetFileWriter,
    file_metadata,
    read_metadata,
    within_python_range,
)
from archiver.storage import Storage, file_md5

log = logging.getLogger(__name__)

_ATTEMPT = re.compile(r"-a(\d+)-part-\d+\.parquet$")
TARGET_CHUNK_BYTES = 160 * 1024 * 1024  # of table data; Arrow is about the same size
DEFAULT_CHUNK_ROWS = 100_000  # when the table has no statistics yet
MIN_CHUNK_ROWS, MAX_CHUNK_ROWS = 1_000, 2_000_000
# zstd Parquet bytes per byte of PostgreSQL table (heap + TOAST), measured on the reference
# orders table (100k rows: 190 table bytes, 40 Parquet bytes per row). A rough guide only.
PARQUET_RATIO = 0.21
ENCODE_QUEUE = 2  # batches read ahead of the Parquet encoder (~13 MB each on orders)


@dataclass(frozen=True)
class ArchiveRequest:
    """What to archive: pure data, as stored in a job's payload."""

    table: str
    column: str
    cutoff: str  # ISO 8601 with offset; compared in the column's own type
    mode: str  # "move" or "copy"
    chunk_rows: int | None = None
    # One part of a split archive (enqueue --parallel): only keys in (after, through];
    # None on either side is unbounded. `group` ties the parts together.
    key_range: source.KeyRange | None = None
    group: str | None = None

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ArchiveRequest:
        bounds = payload.get("key_range")
        return cls(
            table=payload["table"],
            column=payload["column"],
            cutoff=payload["cutoff"],
            mode=payload["mode"],
            chunk_rows=payload.get("chunk_rows"),
            key_range=source.KeyRange(bounds["after"], bounds["through"]) if bounds else None,
            group=payload.get("group"),
        )

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "table": self.table,
            "column": self.column,
            "cutoff": self.cutoff,
            "mode": self.mode,
            "chunk_rows": self.chunk_rows,
        }
        if self.key_range is not None:
            data["key_range"] = {"after": self.key_range.after, "through": self.key_range.through}
            data["group"] = self.group
        return data


@dataclass(frozen=True)
class ArchivedFile:
    """One verified Parquet file, as the catalog records it."""

    job_id: str
    part: int
    source_table: str
    storage_url: str
    path: str
    row_count: int
    byte_size: int
    md5: str
    key_columns: list[str]
    min_key: list[str]
    max_key: list[str]
    cutoff_column: str
    min_cutoff_value: str | None
    max_cutoff_value: str | None


@dataclass
class Progress:
    """A job's progress, kept in background_jobs.progress and committed with each chunk."""

    last_key: list[str] | None = None
    rows: int = 0
    bytes: int = 0
    files: int = 0
    chunk_rows: int = 0
    rows_estimated: int = 0
    chunks_estimated: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Progress:
        known = {
            k: data[k]
            for k in (
                "last_key",
                "rows",
                "bytes",
                "files",
                "chunk_rows",
                "rows_estimated",
                "chunks_estimated",
            )
            if k in data
        }
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "last_key": self.last_key,
            "rows": self.rows,
            "bytes": self.bytes,
            "files": self.files,
            "chunk_rows": self.chunk_rows,
            "rows_estimated": self.rows_estimated,
            "chunks_estimated": self.chunks_estimated,
        }

    def after(self, f: ArchivedFile) -> Progress:
        return Progress(
            last_key=f.max_key,
            rows=self.rows + f.row_count,
            bytes=self.bytes + f.byte_size,
            files=self.files + 1,
            chunk_rows=self.chunk_rows,
            rows_estimated=max(self.rows_estimated, self.rows + f.row_count),
            chunks_estimated=max(self.chunks_estimated, self.files + 1),
            extra=self.extra,
        )


class Ledger(Protocol):
    """Where the pipeline records files and progress (implemented by the queue).

    `in_transaction` is called with the source transaction's cursor when the catalog
    shares the source database, so the file, the progress and the delete commit as one.
    When the source is another database, the file is recorded `pending` with the source
    transaction id before the source COMMIT and confirmed after it. Copy mode changes
    nothing in the source, so its files are simply recorded. Each raises LeaseLost when
    the job is no longer this worker's, which rolls the chunk back.
    """

    def next_part(self) -> int: ...
    def catalogued_paths(self) -> set[str]: ...
    def in_transaction(self, cur: Any, f: ArchivedFile, progress: Progress) -> None: ...
    def record(self, f: ArchivedFile, progress: Progress) -> None: ...
    def record_pending(self, f: ArchivedFile, source_xid: str) -> None: ...
    def confirm(self, f: ArchivedFile, progress: Progress) -> None: ...


@dataclass
class _ChunkStats:
    min_key: tuple[Any, ...] | None = None
    max_key: tuple[Any, ...] | None = None
    min_cutoff: Any = None  # None with cutoff_unbounded_low: catalogued as -infinity
    max_cutoff: Any = None
    cutoff_unbounded_low: bool = False
    cutoff_unbounded_high: bool = False

    def observe(self, batch: pa.RecordBatch, keys: list[str], cutoff: str) -> None:
        """Key and cutoff ranges of a batch as written (special values already NULL in
        their columns and spelled out in the __pg_text companions)."""
        for name in keys:
            inside = within_python_range(batch.column(name))
            if inside is not None and not pc.all(inside).as_py():
                raise InputError(
                    f"primary key column {name!r} holds a value archiver cannot archive "
                    "exactly (+-infinity, or a year outside 1-9999); nothing was moved"
                )
        lo, hi = _key_range(batch, keys)
        self.min_key = lo if self.min_key is None else min(self.min_key, lo)
        self.max_key = hi if self.max_key is None else max(self.max_key, hi)
        column = batch.column(cutoff)
        companion = cutoff + pgtypes.PG_TEXT_SUFFIX
        if companion in batch.schema.names and batch.column(companion).null_count < batch.num_rows:
            self.cutoff_unbounded_low = True  # -infinity: the one special older than a cutoff
        inside = within_python_range(column)
        if inside is not None and not pc.all(inside).as_py():  # BC, or past 9999
            self.cutoff_unbounded_low = True
            column = pc.filter(column, inside)
        mm = pc.min_max(column).as_py()
        if mm["min"] is not None:
            self.min_cutoff = (
                mm["min"] if self.min_cutoff is None else min(self.min_cutoff, mm["min"])
            )
            self.max_cutoff = (
                mm["max"] if self.max_cutoff is None else max(self.max_cutoff, mm["max"])
            )


def _key_range(batch: pa.RecordBatch, keys: list[str]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    columns = [batch.column(k) for k in keys]
    if len(columns) == 1:
        mm = pc.min_max(source.storage_view(columns[0]))
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if isinstance(columns[0].type, pa.BaseExtensionType):  # uuid: back from bytes
            lo, hi = uuid.UUID(bytes=lo), uuid.UUID(bytes=hi)
        return (lo,), (hi,)
    view = pa.table({str(i): source.storage_view(c) for i, c in enumerate(columns)})
    order = pc.sort_indices(view, sort_keys=[(str(i), "ascending") for i in range(len(columns))])
    first, last = order[0].as_py(), order[-1].as_py()
    return tuple(c[first].as_py() for c in columns), tuple(c[last].as_py() for c in columns)


def _as_utc_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return str(value.isoformat())


def chunk_rows_for_width(width: int) -> int:
    """Rows per chunk for rows of `width` table bytes: chunks of about TARGET_CHUNK_BYTES."""
    if width <= 0:
        return DEFAULT_CHUNK_ROWS
    return max(MIN_CHUNK_ROWS, min(MAX_CHUNK_ROWS, TARGET_CHUNK_BYTES // width))


@dataclass(frozen=True)
class ArchivePlan:
    """What an archive would do, from the planner's statistics, before it does anything:
    what `enqueue --dry-run` prints and what a job's progress starts from."""

    table: str
    rows: int  # rows older than the cutoff, as the planner estimates them
    chunk_rows: int
    chunks: int
    parquet_bytes: int | None  # rough: table bytes per row x PARQUET_RATIO; None without stats
    indexes: tuple[str, ...]  # indexes the chunk statement uses
    sequential_scan: bool  # the chunk statement scans the whole table

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": self.rows,
            "chunk_rows": self.chunk_rows,
            "chunks": self.chunks,
            "parquet_bytes": self.parquet_bytes,
            "uses_index": bool(self.indexes),
            "indexes": list(self.indexes),
            "sequential_scan": self.sequential_scan,
        }


def plan_archive(
    conn: Any, request: ArchiveRequest, queries: source.ChunkQueries | None = None
) -> ArchivePlan:
    """EXPLAIN the archive on the source connection; writes nothing."""
    if queries is None:
        table = source.describe_table(conn, TableName.parse(request.table))
        queries = source.ChunkQueries(table, source.check_cutoff_column(table, request.column))
    _, width = source.estimate_rows(conn, queries.table)
    chunk_rows = request.chunk_rows or chunk_rows_for_width(width)
    plan = source.explain_archive(
        conn, queries, request.cutoff, chunk_rows, move=request.mode == "move"
    )
    return ArchivePlan(
        table=queries.table.qualified,
        rows=plan.rows_older,
        chunk_rows=chunk_rows,
        chunks=-(-plan.rows_older // chunk_rows),
        parquet_bytes=int(plan.rows_older * width * PARQUET_RATIO) if width > 0 else None,
        indexes=plan.indexes,
        sequential_scan=plan.sequential_scan,
    )


class ChunkArchiver:
    """Archives one table for one job, chunk by chunk, on one source connection."""

    def __init__(
        self,
        conn: Any,
        job_id: str,
        request: ArchiveRequest,
        storage: Storage,
        ledger: Ledger,
        same_database: bool,
        workdir: Path,
        attempt: int = 1,
    ) -> None:
        self.conn, self.job_id, self.request = conn, job_id, request
        self.storage, self.ledger, self.same_database = storage, ledger, same_database
        self.workdir, self.attempt = workdir, attempt
        self.table = source.describe_table(conn, TableName.parse(request.table))
        self.cutoff_column = source.check_cutoff_column(self.table, request.column)
        self.queries = source.ChunkQueries(self.table, self.cutoff_column)
        self.key_names = [c.name for c in self.table.key]

    def drop_stale_uploads(self) -> None:
        """Delete what earlier attempts of this job uploaded but never catalogued.

        The attempt number in every object name is a fencing token: a worker that lost
        the job while paused mid-upload (SIGSTOP, a VM pause) and then resumes writes its
        own attempt's name, never the rescuer's. Its upload can never be catalogued
        either, since recording a file requires holding the job, so an earlier
        attempt's uncatalogued object is garbage. (One uploaded after this sweep stays
        until `archiver verify` reports it.)"""
        catalogued = self.ledger.catalogued_paths()
        prefix = self.storage.object_name(f"{self.table.qualified}/job-{self.job_id}-a")
        for stored in self.storage.list(prefix):
            match = _ATTEMPT.search(stored.name)
            if match and int(match.group(1)) < self.attempt and stored.name not in catalogued:
                log.warning(
                    "job %s: deleting %s, left by an earlier attempt", self.job_id, stored.name
                )
                self.storage.delete(stored.name)

    def object_name(self, part: int) -> str:
        return self.storage.object_name(
            f"{self.table.qualified}/job-{self.job_id}-a{self.attempt:03d}-part-{part:05d}.parquet"
        )

    def begin_snapshot(self) -> None:
        """Copy mode: every chunk of this job reads the same consistent snapshot."""
        with self.conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def archive_chunk(self, progress: Progress) -> Progress | None:
        """Move (or copy) the next chunk after progress.last_key; None when none is left."""
        part = self.ledger.next_part()
        name = self.object_name(part)
        move = self.request.mode == "move"
        try:
            with self.conn.cursor() as cur, tempfile.TemporaryDirectory(dir=self.workdir) as tmp:
                local = Path(tmp) / "chunk.parquet"
                # 1. take the chunk's rows (locked, or from the snapshot)
                key_range = self.request.key_range
                source.bind_chunk(
                    cur, self.request.cutoff, progress.last_key, progress.chunk_rows, key_range
                )
                after = progress.last_key is not None
                cur.execute(
                    self.queries.take(after_key=after, key_range=key_range)
                    if move
                    else self.queries.read(after_key=after, key_range=key_range)
                )
                # 2. stream them into a Parquet file
                stats, rows_taken = self._write(cur.fetch_record_batch(), local, part)
                if rows_taken == 0:
                    if move:
                        self.conn.rollback()
                    return None
                # 3. upload under the job's, attempt's and part's name
                md5 = file_md5(local)
                failpoints.reach("before_upload")
                stored = self.storage.put_file(name, local, md5)
                # 4. verify what the service holds, and that the file holds every row taken
                archived = self._verify(
                    name, local, md5, stored.size, stored.md5, rows_taken, part, stats
                )
                new_progress = progress.after(archived)
                # 5. record the file and the job's progress; 6. COMMIT
                if not move:  # nothing to commit in the source: record it, done
                    self.ledger.record(archived, new_progress)
                elif self.same_database:
                    self.ledger.in_transaction(cur, archived, new_progress)
                    failpoints.reach("before_commit")
                    self.conn.commit()
                else:
                    cur.execute("SELECT pg_current_xact_id()::text")
                    xid = cur.fetchall()[0][0]
                    self.ledger.record_pending(archived, xid)
                    failpoints.reach("before_commit")
                    self.conn.commit()
                    failpoints.reach("source_committed")  # the window confirm() closes
                    self.ledger.confirm(archived, new_progress)
                failpoints.reach("after_commit")
        except BaseException:
            if move:
                _rollback_quietly(self.conn)
            raise
        log.info(
            "job %s: chunk %d of ~%d, %d rows, %d bytes -> %s (%d of ~%d rows done)",
            self.job_id,
            part,
            new_progress.chunks_estimated,
            archived.row_count,
            archived.byte_size,
            name,
            new_progress.rows,
            new_progress.rows_estimated,
        )
        return new_progress

    def _write(
        self, reader: pa.RecordBatchReader, local: Path, part: int
    ) -> tuple[_ChunkStats, int]:
        metadata = file_metadata(
            self.table.qualified,
            [(c.name, c.type_sql) for c in self.table.columns],
            self.key_names,
            self.cutoff_column.name,
            self.request.cutoff,
            self.job_id,
            part,
            self.request.mode,
        )
        plans = self.queries.plans
        writer = ParquetFileWriter(
            local,
            reader.schema,
            metadata,
            companions=pgtypes.companions(plans),
            arrow_checked=pgtypes.arrow_checked(plans),
        )
        stats = _ChunkStats()

        def encode(batch: pa.RecordBatch) -> None:
            # Statistics of the batch as written: a -infinity cutoff value is NULL there.
            stats.observe(writer.write(batch), self.key_names, self.cutoff_column.name)

        try:
            _overlapped(reader, encode)
        except BaseException:
            writer.abort()
            raise
        rows = writer.close({"row_count": str(writer.rows)})
        return stats, rows

    def _verify(
        self,
        name: str,
        local: Path,
        md5: str,
        stored_size: int,
        stored_md5: str | None,
        rows_taken: int,
        part: int,
        stats: _ChunkStats,
    ) -> ArchivedFile:
        size = local.stat().st_size
        if stored_size != size or stored_md5 != md5:
            raise VerificationError(
                f"{name}: storage reports {stored_size} bytes md5 {stored_md5}, "
                f"sent {size} bytes md5 {md5}"
            )
        file_rows, _ = read_metadata(local)
        if file_rows != rows_taken:
            raise VerificationError(f"{name}: file holds {file_rows} rows, {rows_taken} were taken")
        assert stats.min_key is not None and stats.max_key is not None
        return ArchivedFile(
            job_id=self.job_id,
            part=part,
            source_table=self.table.qualified,
            storage_url=str(self.storage.location),
            path=name,
            row_count=rows_taken,
            byte_size=size,
            md5=md5,
            key_columns=self.key_names,
            min_key=[source.key_text(v) for v in stats.min_key],
            max_key=[source.key_text(v) for v in stats.max_key],
            cutoff_column=self.cutoff_column.name,
            min_cutoff_value=None if stats.cutoff_unbounded_low else _as_utc_text(stats.min_cutoff),
            max_cutoff_value=None
            if stats.cutoff_unbounded_high
            else _as_utc_text(stats.max_cutoff),
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


def _rollback_quietly(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # the backend may be gone; PostgreSQL rolls back on its own then
        log.debug("rollback failed", exc_info=True)


Interrupt = Callable[[], BaseException | None]
ChunkDone = Callable[[int, int, float], None]


def archive_job(
    conn: Any,
    job_id: str,
    request: ArchiveRequest,
    progress: Progress,
    storage: Storage,
    ledger: Ledger,
    same_database: bool,
    workdir: Path,
    interrupt: Interrupt,
    on_chunk: ChunkDone | None = None,
    attempt: int = 1,
) -> Progress:
    """Archive chunks until none is left; `interrupt()` is asked between chunks and
    whatever it returns (stop, cancel, lease lost) is raised there; `on_chunk(rows,
    bytes, seconds)` hears of every committed chunk (metrics)."""
    archiver = ChunkArchiver(
        conn, job_id, request, storage, ledger, same_database, workdir, attempt
    )
    archiver.drop_stale_uploads()
    if not progress.chunk_rows:  # a new job: estimate once; a resumed one keeps its figures
        plan = plan_archive(conn, request, archiver.queries)
        progress.chunk_rows = plan.chunk_rows
        progress.rows_estimated = max(progress.rows_estimated, plan.rows)
        progress.chunks_estimated = max(progress.chunks_estimated, plan.chunks, 1)
    if request.mode == "copy":
        archiver.begin_snapshot()
    try:
        while True:
            reason = interrupt()
            if reason is not None:
                raise reason
            started = time.monotonic()
            advanced = archiver.archive_chunk(progress)
            if advanced is None:  # done: the estimates give way to what was counted
                progress.rows_estimated, progress.chunks_estimated = progress.rows, progress.files
                return progress
            if on_chunk is not None:
                on_chunk(
                    advanced.rows - progress.rows,
                    advanced.bytes - progress.bytes,
                    time.monotonic() - started,
                )
            progress = advanced
    finally:
        if request.mode == "copy":
            _rollback_quietly(conn)
