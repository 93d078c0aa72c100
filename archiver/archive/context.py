"""What every chunk of one job shares: the job's request, connections, storage, catalog
and limits, and how its move chunks find rows for the rest of the attempt."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from archiver.archive.commit import CommitStrategy
from archiver.archive.plan import NO_BACKLOG, BacklogRule
from archiver.bulk import BulkConnection
from archiver.catalog import Catalog
from archiver.files import names
from archiver.model import ArchiveRequest, KeyRange, Mode
from archiver.pgtypes import sql as pgtypes
from archiver.source.chunks import ChunkQueries
from archiver.source.partitions import WholePartition
from archiver.source.tables import TableInfo
from archiver.storage.seam import Storage

if TYPE_CHECKING:
    from archiver.catalog import PgCatalog
    from archiver.source.aggregates import AggregateQueries


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


@dataclass
class NamedParts:
    """The highest part this attempt has named a file for: a chunk taken again after a
    rollback numbers its files after it, so no name is ever written twice (write-once
    storage; uploads are refused over an existing name)."""

    highest: int = 0


# A backlog job's further connection to its source, opened on the stack, with the commit
# strategy of chunks taken on it (archive.job.open_job builds it; archive.backlog uses it)
Lanes = Callable[[contextlib.ExitStack[bool | None]], tuple[BulkConnection, CommitStrategy]]


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
    named: NamedParts = field(default_factory=NamedParts)
    # the keys its chunks take: the request's range, its end bound to the largest key
    # older than the cutoff when the job starts (archive.job.bound_to_old_rows)
    key_range: KeyRange | None = None
    backlog: BacklogRule = NO_BACKLOG  # when it takes the backlog plan
    lanes: Lanes | None = None  # how it opens more connections (None: it never does)

    def object_name(self, part: int, table: str | None = None) -> str:
        table = table or self.tables[0]
        self.named.highest = max(self.named.highest, part)
        return self.storage.object_name(names.file_name(table, self.job_id, self.attempt, part))

    def next_part(self) -> int:
        """The next chunk's first part: after the catalog's, and after every part this
        attempt named (a rolled-back chunk's uploads keep their names)."""
        return max(self.catalog.next_part(), self.named.highest + 1)

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


def text_numeric(info: TableInfo, file_schemas: Callable[[], list[str | None]]) -> TableInfo:
    """`info` with the unconstrained numeric columns its archived files hold as text
    (their Delta schemas, read from `file_schemas` only for a table that has such a
    column; None: a file from before Delta publishing, whose numeric was text): they stay
    text, since a Delta table cannot hold text and decimal in one column
    (pgtypes.sql.OPEN_NUMERIC)."""
    wanted = {c.name for c in info.columns if pgtypes.open_numeric(c)}
    if not wanted:
        return info
    kept: set[str] = set()
    for schema in file_schemas():
        if schema is None:
            kept = wanted
            break
        if schema:
            fields = json.loads(schema)["fields"]
            kept |= {f["name"] for f in fields if f["name"] in wanted and f["type"] == "string"}
    return dataclasses.replace(info, numeric_as_text=frozenset(kept))


def numeric_kept_text(
    catalog: PgCatalog, table: str, queries: ChunkQueries, aggregate: AggregateQueries | None
) -> tuple[ChunkQueries, AggregateQueries | None]:
    """A job's statements with text_numeric applied to its table (`table`, as archiver
    records it) and to each table of its aggregate."""

    def kept(info: TableInfo, recorded: str) -> TableInfo:
        return text_numeric(info, lambda: catalog.file_schemas(recorded))

    queries = dataclasses.replace(queries, table=kept(queries.table, table))
    if aggregate is None:
        return queries, None
    members = tuple(
        dataclasses.replace(m, table=kept(m.table, m.table.qualified)) for m in aggregate.members
    )
    return queries, dataclasses.replace(aggregate, root=queries, members=members)
