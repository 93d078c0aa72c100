"""The pure data of archiver: what an archive asks for, how far it got, what it wrote, and
the job that carries it. No I/O and no heavy imports (no pyarrow, no driver), so the queue,
the scheduler and every CLI command can use it cheaply."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol, TypeVar

from archiver.errors import InputError
from archiver.text import counted


class Mode(StrEnum):
    MOVE = "move"  # delete the rows in the chunk's transaction
    COPY = "copy"  # read from one snapshot; change nothing


class Status(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED = frozenset((Status.COMPLETED, Status.FAILED, Status.CANCELLED))


class FileState(StrEnum):
    COMMITTED = "committed"  # the file's rows left the source with it
    PENDING = "pending"  # recorded before a separate source database's COMMIT
    RETIRED = "retired"  # its rows left the archive (archiver.ledger); about to be deleted


@dataclass(frozen=True)
class KeyRange:
    """Keys in (after, through] of a one-column primary key, as PostgreSQL text; None
    is unbounded. One of `parts` of an archive split for parallel workers, each holding about
    as many rows older than the cutoff (None: a job queued before it was kept)."""

    after: str | None
    through: str | None
    parts: int | None = None
    # the smallest key older than the cutoff when the job started, inclusive; found by
    # the job (archive.job.bound_to_old_rows), never stored in its payload
    first: str | None = None


@dataclass(frozen=True)
class PageSpan:
    """Heap pages [first, end) of a table (None: to its end, pages added meanwhile
    included): one of `parts` of a backlog split for the workers free to take it
    (enqueue --parallel), each read by the backlog plan (archive.backlog)."""

    first: int
    end: int | None
    parts: int

    @classmethod
    def split(cls, pages: int, parts: int) -> list[PageSpan]:
        """A table's `pages` in `parts` spans (fewer for a table of fewer pages), the
        last open-ended."""
        per = max(1, -(-pages // max(1, min(parts, pages))))
        n = max(1, -(-pages // per))  # none past the table's pages (7 in 6 parts: 4 of 2)
        return [cls(i * per, None if i == n - 1 else (i + 1) * per, n) for i in range(n)]


@dataclass(frozen=True)
class Queueing:
    """How a job is queued (River's InsertOpts): its dedup key (one queued or running
    job of that work at a time), its lock key (one running of that key at a time), its
    priority, attempts, when it may run and its limits (archiver.limits)."""

    dedup_key: str
    lock_key: str | None
    priority: int = 0
    max_attempts: int = 5
    run_at: dt.datetime | None = None
    limits: dict[str, Any] | None = None


R_co = TypeVar("R_co", covariant=True)


class Request(Protocol[R_co]):
    """A job kind's request (archiver/kinds/<kind>.py; the archive's below, the input of
    the pipeline that runs it): its kind's name (the jobs' task_name), the payload it is
    queued with, and how a claimed job's payload is read back."""

    KIND: ClassVar[str]

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> R_co: ...

    def payload(self) -> dict[str, Any]: ...


class Queued(Request[R_co], Protocol[R_co]):
    """A request that says how it is queued: a job the workers queue for themselves
    (a publication, a sweep, a compaction, a purge), queued by store.jobs.enqueue_request."""

    def queueing(self) -> Queueing: ...


class Result(Protocol):
    """What a job kind's run returns: kept in the job's progress, said when it completes."""

    def to_json(self) -> dict[str, Any]: ...

    def said(self) -> str:
        """The words after "completed, " in the worker's log."""
        ...


@dataclass(frozen=True)
class ArchiveRequest:
    """What to archive, as stored in a job's payload."""

    KIND: ClassVar[str] = "archive"  # its jobs' task_name: archiver.kinds.archiving runs them

    table: str
    column: str
    cutoff: str  # ISO 8601 with offset; compared in the column's own type
    mode: Mode
    chunk_rows: int | None = None
    # One part of a split archive (enqueue --parallel): only keys in the range.
    # `group` ties the parts together.
    key_range: KeyRange | None = None
    pages: PageSpan | None = None  # or only rows in these pages (a backlog's move)
    group: str | None = None
    # Move mode: each chunk's transaction carries a logical decoding message (prefix
    # `archiver`) so CDC consumers can tell archival deletes from the application's.
    cdc_marker: bool = True
    vacuum: bool = False  # move mode: VACUUM (ANALYZE) the table when the job completes
    # Every row referencing a chunk's rows, transitively, goes with it (see aggregates).
    with_children: bool = False
    # Move mode on a range-partitioned table (see archiver.partitions): "drop" or "detach"
    # old partitions whole, "rows" as any table. `partition` (schema.name): this job
    # takes that one partition whole; without it, the rows of the other partitions.
    partitions: str = "rows"
    partition: str | None = None
    # Move mode: the files join their table's Delta table (archiver.delta); False with
    # enqueue --no-delta (a policy's `delta = false`, or ARCHIVER_DELTA=false)
    delta: bool = True
    tier: str = ""  # the access tier its files are written in ("": ARCHIVER_ACCESS_TIER)

    @property
    def publishes(self) -> bool:
        """The job's files join their tables' Delta tables: a move's, unless asked not
        to. A copy's are the same rows again, every run: a table that counted them
        would count rows twice, so they stay plain Parquet files."""
        return self.delta and self.mode == Mode.MOVE

    @property
    def reads_in_pairs(self) -> bool:
        """Copy mode on one table: two chunks at a time are read side by side, on two
        connections sharing the job's snapshot (archiver.archive.chunk.take_rows)."""
        return self.mode == Mode.COPY and not self.with_children

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> ArchiveRequest:
        bounds, span = payload.get("key_range"), payload.get("pages")
        return cls(
            table=payload["table"],
            column=payload["column"],
            cutoff=payload["cutoff"],
            mode=Mode(payload["mode"]),
            chunk_rows=payload.get("chunk_rows"),
            key_range=KeyRange(bounds["after"], bounds["through"], bounds.get("parts"))
            if bounds
            else None,
            pages=PageSpan(span["first"], span["end"], span["parts"]) if span else None,
            group=payload.get("group"),
            cdc_marker=payload.get("cdc_marker", True),
            vacuum=payload.get("vacuum", False),
            with_children=payload.get("with_children", False),
            partitions=payload.get("partitions", "rows"),
            partition=payload.get("partition"),
            delta=payload.get("delta", True),
            tier=payload.get("tier", ""),
        )

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "table": self.table,
            "column": self.column,
            "cutoff": self.cutoff,
            "mode": str(self.mode),
            "chunk_rows": self.chunk_rows,
        }
        if not self.cdc_marker:
            data["cdc_marker"] = False
        if self.vacuum:
            data["vacuum"] = True
        if self.with_children:
            data["with_children"] = True
        if self.partitions != "rows":
            data["partitions"] = self.partitions
        if self.partition is not None:
            data["partition"] = self.partition
        if not self.delta:
            data["delta"] = False
        if self.tier:
            data["tier"] = self.tier
        if self.key_range is not None:
            r = self.key_range
            data["key_range"] = {"after": r.after, "through": r.through, "parts": r.parts}
            data["group"] = self.group
        if self.pages is not None:
            p = self.pages
            data["pages"] = {"first": p.first, "end": p.end, "parts": p.parts}
            data["group"] = self.group
        return data

    def keys(self) -> tuple[str, str]:
        """(dedup_key, lock_key): the same archive is never queued or running twice, and
        two archives of one table never run at once."""
        return (
            f"archive:{self.table}:{self.column}:{self.cutoff}:{self.mode}",
            f"table:{self.table}",
        )

    def partition_keys(self) -> tuple[str, str]:
        """(dedup_key, lock_key) of a whole-partition job: partitions of one table leave
        in parallel, each by one job at a time."""
        dedup_key, lock_key = self.keys()
        return f"{dedup_key}:partition:{self.partition}", f"{lock_key}:partition:{self.partition}"

    def range_keys(self, index: int, parts: int) -> tuple[str, str]:
        """(dedup_key, lock_key) of part `index` of a split archive: the parts of one
        table run in parallel, each part never twice at once."""
        dedup_key, lock_key = self.keys()
        split = "pages" if self.pages is not None else "range"
        return f"{dedup_key}:{split}:{index}/{parts}", f"{lock_key}:range:{index}"


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
    min_cutoff_value: str | None  # None: unbounded (-infinity, or before year 1)
    max_cutoff_value: str | None
    # Delta Lake (archiver.files.facts): the file's columns as a Delta schema and its
    # add action's statistics, both JSON; "" for a file written before they were kept.
    delta_schema: str = ""
    delta_stats: str = ""
    # whether the file belongs to its table's Delta table: a move's file does; a copy's
    # (the same rows again, every run) and one of a job queued with --no-delta do not
    delta: bool = True
    tier: str = ""  # the access tier it was written in ("": the account's default)
    made_by: int | None = None  # the ledger operation that wrote it (a rewrite, a merge)


@dataclass(frozen=True, kw_only=True)
class CatalogFile(ArchivedFile):
    """A row of archive_files, as restore and verify read it."""

    state: FileState
    id: int = 0  # archive_files.id
    offline: bool = False  # in the Archive tier: unreadable until rehydrated
    immutable_until: dt.datetime | None = None  # a per-blob immutability policy's end
    legal_hold: bool = False

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CatalogFile:
        def bound(text: str | None) -> str | None:
            return None if text in (None, "-infinity", "infinity") else text

        return cls(
            job_id=str(row["job_id"]),
            part=int(row["part"]),
            source_table=row["source_table"],
            storage_url=row["storage_url"],
            path=row["path"],
            row_count=int(row["row_count"]),
            byte_size=int(row["byte_size"]),
            md5=row["md5"],
            key_columns=list(row["key_columns"]),
            min_key=list(row["min_key"]),
            max_key=list(row["max_key"]),
            cutoff_column=row["cutoff_column"],
            min_cutoff_value=bound(row["min_cutoff_value"]),
            max_cutoff_value=bound(row["max_cutoff_value"]),
            state=FileState(row["state"]),
            delta=bool(row.get("delta", True)),
            delta_schema=row.get("delta_schema") or "",
            id=int(row.get("id", 0)),
            tier=row.get("tier") or "",
            offline=bool(row.get("offline", False)),
            immutable_until=row.get("immutable_until"),
            legal_hold=bool(row.get("legal_hold", False)),
        )


@dataclass(frozen=True)
class PendingFile:
    """A file recorded before its source transaction committed (separate databases)."""

    part: int
    path: str
    source_xid: str


_COUNTS = ("last_key", "rows", "bytes", "files", "chunk_rows", "rows_estimated", "chunks_estimated")
_SAID = ("plan", "backlog", "dead_tuples", "vacuum_seconds")  # written when said (not None)


@dataclass
class Progress:
    """An archive job's progress, kept in background_jobs.progress and committed with each
    chunk: the archive kind's result (archiver.kinds.archiving)."""

    last_key: list[str] | None = None
    rows: int = 0
    bytes: int = 0
    files: int = 0
    chunk_rows: int = 0
    rows_estimated: int = 0
    chunks_estimated: int = 0
    plan: str | None = None  # archive.plan's KEY or BACKLOG, chosen when the job starts
    backlog: dict[str, Any] | None = None  # the backlog plan's page ranges (archive.backlog)
    dead_tuples: int | None = None  # a move's, once completed
    vacuum_seconds: float | None = None  # a move's VACUUM, when it asked for one
    # keys this version does not know (a newer worker's, in a mixed deploy), written
    # back as read: never read by this version's code
    unknown: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Progress:
        known = {k: data[k] for k in (*_COUNTS, *_SAID) if k in data}
        return cls(**known, unknown={k: v for k, v in data.items() if k not in known})

    def to_json(self) -> dict[str, Any]:
        said = {k: v for k in _SAID if (v := getattr(self, k)) is not None}
        return {**self.unknown, **said, **{k: getattr(self, k) for k in _COUNTS}}

    def after(self, f: ArchivedFile) -> Progress:
        """The progress once `f` is committed; estimates never fall below what was done."""
        rows, files = self.rows + f.row_count, self.files + 1
        return dataclasses.replace(
            self,
            last_key=f.max_key,
            rows=rows,
            bytes=self.bytes + f.byte_size,
            files=files,
            rows_estimated=max(self.rows_estimated, rows),
            chunks_estimated=max(self.chunks_estimated, files),
        )

    def finished(self) -> Progress:
        """Done: the estimates give way to what was counted."""
        return dataclasses.replace(self, rows_estimated=self.rows, chunks_estimated=self.files)

    def said(self) -> str:
        return f"{counted(self.rows, 'row')} in {counted(self.files, 'file')}"


@dataclass(frozen=True)
class Job:
    """A row of background_jobs."""

    id: uuid.UUID
    task_name: str
    payload: dict[str, Any]
    status: Status
    priority: int
    attempts: int
    max_attempts: int
    locked_by: str | None
    progress: dict[str, Any]
    last_error: str | None
    errors: list[dict[str, Any]]
    run_at: dt.datetime
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    heartbeat_at: dt.datetime | None
    cancel_requested_at: dt.datetime | None
    paused_at: dt.datetime | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    throttled_reason: str | None = None
    throttled_since: dt.datetime | None = None
    claims: int = 0  # every claim, never reset: the token in its file names

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        return cls(
            id=row["id"],
            task_name=row["task_name"],
            payload=json.loads(row["payload"]),
            status=Status(row["status"]),
            priority=row["priority"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            locked_by=row["locked_by"],
            progress=json.loads(row["progress"]),
            last_error=row["last_error"],
            errors=json.loads(row["errors"]),
            run_at=row["run_at"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            heartbeat_at=row["heartbeat_at"],
            cancel_requested_at=row["cancel_requested_at"],
            paused_at=row.get("paused_at"),
            limits=json.loads(row.get("limits") or "{}"),
            throttled_reason=row.get("throttled_reason"),
            throttled_since=row.get("throttled_since"),
            claims=row.get("claims", 0),
        )


def parse_job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InputError(f"{text!r} is not a job id (a UUID)") from None
