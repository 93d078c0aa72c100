"""Compaction: a table's small committed files merged into files of a target size.

A year of nightly jobs leaves a file a day per table, and every file costs every command
that reads the table (a footer to bind, a request to Azure) and every erasure that
matches it (a rewrite). Compaction merges them in cutoff order, so a merged file holds
consecutive days and keeps a narrow cutoff range, into files of about the target size.

It merges whole chunks. A chunk of a table archived `--with-children` is its root file
and the files of its children (one job, consecutive parts, the root's last: restore and
purge find a root's children by that): a merge of chunks is one merged root file and,
before it, each child table's files merged, all under one new (job, part) sequence. A
child table is never compacted on its own.

Each merge is a ledger operation ('compact', archiver.ledger): its row and lock
committed, the merged files written under names of their own (`compact-<operation>-
<part>.parquet`, each upload guarded by the lock), then ONE catalog transaction retires
the inputs and catalogues the merge (refused when any input left the archive
meanwhile). A crash anywhere leaves the inputs or the merge catalogued, never both,
never neither; its Delta commit removes the inputs and adds the merge with `dataChange:
false`. The inputs stay on storage for the readers' retention after they leave the Delta
log (ARCHIVER_READER_RETENTION), for readers that opened it before.

What is merged (`plan`): chunks of one table on one storage, committed, in their Delta
tables (or, with publishing off, never to be), smaller than half the target, online,
under no immutability policy or legal hold, with rows, their columns known to the
catalog; grouped by their root's columns, tier, key and cutoff column and, where the
table keeps a retention, calendar month (`period`), so purge still drops whole files. A
group is merged once it holds half the target or MIN_FILES chunks. What is left, and
why, a dry run says."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from archiver.model import CatalogFile

DEFAULT_TARGET = 128 * 1024 * 1024
MIN_FILES = 8  # small chunks a group merges once it holds this many, whatever their size
PERIODS = ("month", "year", "none")


@dataclass(frozen=True)
class Chunk:
    """A root file with the files of its children archived in the same chunk."""

    root: CatalogFile
    children: tuple[CatalogFile, ...] = ()

    @property
    def files(self) -> list[CatalogFile]:
        return [*self.children, self.root]

    @property
    def bytes(self) -> int:
        return sum(f.byte_size for f in self.files)


def chunks_of(table: str, files: list[CatalogFile]) -> list[Chunk]:
    """The chunks of `table` among `files` (committed files of the jobs that archived
    it): within a job, parts before a root part of `table` are its children's."""
    by_job: dict[str, list[CatalogFile]] = {}
    for f in files:
        by_job.setdefault(f.job_id, []).append(f)
    found = []
    for job_files in by_job.values():
        pending: list[CatalogFile] = []
        for f in sorted(job_files, key=lambda f: f.part):
            if f.source_table == table and f.cutoff_column:
                found.append(Chunk(f, tuple(pending)))
                pending = []
            else:
                pending.append(f)
    return found


@dataclass(frozen=True)
class Left:
    """A small chunk compaction leaves as it is, and why."""

    chunk: Chunk
    why: str


@dataclass
class Plan:
    """The groups of chunks to merge, each into one chunk, in cutoff order; the small
    chunks left and why; how many are of a good size already."""

    groups: list[list[Chunk]] = field(default_factory=list)
    left: list[Left] = field(default_factory=list)
    sized: int = 0

    @property
    def files(self) -> int:
        return sum(len(c.files) for g in self.groups for c in g)

    @property
    def bytes(self) -> int:
        return sum(c.bytes for g in self.groups for c in g)

    @property
    def rows(self) -> int:
        return sum(f.row_count for g in self.groups for c in g for f in c.files)


def plan(
    chunks: list[Chunk],
    logged: set[int],
    *,
    target: int,
    period: str,
    now: dt.datetime,
    in_log: bool = True,
) -> Plan:
    """Groups of `chunks` to merge into chunks of about `target` bytes. `logged`: the
    ids of files in their Delta log; `in_log`: take chunks whose files all are in it
    (publishing on), or none (off)."""
    result = Plan()
    runs: dict[tuple[Any, ...], list[Chunk]] = {}
    for chunk in chunks:
        why = _why_left(chunk, logged, in_log, now)
        if why is None and chunk.bytes >= target // 2:
            result.sized += 1
            continue
        bucket = _bucket(chunk.root, period) if why is None else None
        if why is None and bucket is None:
            why = f"its rows span more than one {period}"
        if why is not None:
            result.left.append(Left(chunk, why))
            continue
        root = chunk.root
        key = (bucket, root.tier, root.delta_schema, tuple(root.key_columns), root.cutoff_column)
        runs.setdefault(key, []).append(chunk)
    for run in runs.values():
        run.sort(key=lambda c: (instant(c.root.min_cutoff_value), c.root.id))
        group: list[Chunk] = []
        size = 0  # the group's bytes, kept as chunks join (summed again: quadratic)
        for chunk in run:
            group.append(chunk)
            size += chunk.bytes
            if size >= target:
                result.groups.append(group)
                group, size = [], 0
        if len(group) >= 2 and (len(group) >= MIN_FILES or size >= target // 2):
            result.groups.append(group)
        else:
            result.left += [Left(c, "too few small files beside it yet") for c in group]
    result.groups = [g for g in result.groups if len(g) >= 2]
    result.groups.sort(key=lambda g: (instant(g[0].root.min_cutoff_value), g[0].root.id))
    return result


def _why_left(chunk: Chunk, logged: set[int], in_log: bool, now: dt.datetime) -> str | None:
    for f in chunk.files:
        if f.offline:
            return f"{f.path}: offline, in the Archive tier"
        if f.legal_hold:
            return f"{f.path}: under a legal hold"
        if f.immutable_until is not None and f.immutable_until > now:
            return f"{f.path}: under an immutability policy until {f.immutable_until.isoformat()}"
        if not f.delta:
            return f"{f.path}: outside the Delta table (a copy's, or a move's with --no-delta)"
        if not f.delta_schema:
            return f"{f.path}: its columns are not in the catalog (older than Delta publishing)"
        if (f.id in logged) != in_log:
            return f"{f.path}: {'not in its Delta table yet' if in_log else 'in a Delta table'}"
    if not chunk.root.row_count:
        return "a whole partition's file of no rows (restore recreates the partition from it)"
    return None


def _bucket(f: CatalogFile, period: str) -> str | None:
    """The period `f`'s rows lie in ('' for none); None when they span two."""
    if period == "none":
        return ""
    if f.min_cutoff_value is None or f.max_cutoff_value is None:
        return None
    if instant(f.max_cutoff_value) == dt.datetime.max.replace(tzinfo=dt.UTC):
        return None  # beyond the year 9999
    size = 7 if period == "month" else 4  # YYYY-MM / YYYY of ISO 8601 UTC text
    low, high = _utc(f.min_cutoff_value)[:size], _utc(f.max_cutoff_value)[:size]
    return low if low == high else None


def instant(text: str | None) -> dt.datetime:
    """A catalogued cutoff bound as an instant (None: the start of time; a year past
    Python's 9999, as PostgreSQL has them: the end of time)."""
    if text is None:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        return dt.datetime.max.replace(tzinfo=dt.UTC)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _utc(text: str) -> str:
    return instant(text).astimezone(dt.UTC).isoformat()
