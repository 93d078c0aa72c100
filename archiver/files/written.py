"""One way a written file becomes a catalogued one, for a chunk's file (archive.upload),
a rewrite (files.rewrite) and a merge (lifecycle.merge): the blob service holds what was
sent, the file holds the rows it should, its Delta facts are read, and its catalog row
is made. A file written before it is sent (a rewrite, a merge) is written here too, a
piece at a time, and uploaded between two checks of its operation's guard."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from archiver import failpoints
from archiver.errors import VerificationError
from archiver.files.facts import NotDeltaType, file_facts
from archiver.files.stats import ChunkStats, in_arrow_order, key_text
from archiver.model import ArchivedFile
from archiver.parquet import Pending, read_metadata, writer_options
from archiver.storage.seam import Storage, StoredObject, check_stored, file_md5, put_file


@dataclass(frozen=True)
class Ranges:
    """A file's key ends (PostgreSQL's text of each value) and cutoff range (None:
    unbounded), as its catalog row keeps them."""

    min_key: list[str]
    max_key: list[str]
    min_cutoff: str | None
    max_cutoff: str | None

    @classmethod
    def of(cls, stats: ChunkStats, cutoff: tuple[str | None, str | None] | None = None) -> Ranges:
        """The ranges `stats` observed (its key ends set, by it or by PostgreSQL), or
        the `cutoff` range given."""
        assert stats.min_key is not None and stats.max_key is not None
        low, high = cutoff if cutoff is not None else stats.cutoff_range()
        return cls([key_text(v) for v in stats.min_key], [key_text(v) for v in stats.max_key],
                   low, high)  # fmt: skip


@dataclass(frozen=True)
class Origin:
    """Whose a file is: what its catalog row says beside what the file holds."""

    job_id: str
    part: int
    source_table: str
    storage_url: str
    key_columns: list[str]
    cutoff_column: str
    delta: bool
    tier: str
    made_by: int | None = None  # the ledger operation that wrote it (a rewrite, a merge)


def write_pieces(
    local: Path, schema: pa.Schema, pieces: Iterable[pa.Table], keys: list[str], cutoff: str
) -> tuple[ChunkStats, int]:
    """The pieces, one after another (never all in memory), into the Parquet file
    `local` with archiver's writer options: the ranges observed (the key's where Arrow
    orders it as PostgreSQL does) and how many rows."""
    stats = ChunkStats(arrow_order=in_arrow_order([schema.field(k).type for k in keys]))
    dictionary = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    rows = 0
    with pq.ParquetWriter(local, schema, **writer_options(schema, dictionary)) as writer:
        pending = Pending(writer)
        for piece in pieces:
            for batch in piece.to_batches():
                if batch.num_rows:
                    stats.observe(batch, keys, cutoff)
            rows += piece.num_rows
            pending.add(piece)
        pending.flush()
    return stats, rows


def put_guarded(
    storage: Storage,
    name: str,
    local: Path,
    tags: dict[str, str],
    tier: str,
    guard: Callable[[], None],
    points: tuple[str, str],
) -> tuple[str, StoredObject]:
    """`local` stored as `name` while `guard` (ledger.guard) holds: it raises once the
    operation's session is gone, checked before the upload and after it, when the blob
    just stored is deleted again (what a process killed in between leaves, the orphan
    sweep deletes); the failpoints `points` reached before the upload and after it. Its
    MD5 and what the service says it stored."""
    md5 = file_md5(local)
    guard()
    failpoints.reach(points[0])
    stored = put_file(storage, name, local, tags, tier)
    failpoints.reach(points[1])
    try:
        guard()
    except BaseException:
        storage.delete(name)
        raise
    return md5, stored


def catalogued(
    origin: Origin,
    name: str,
    local: Path,
    md5: str,
    stored: StoredObject,
    rows: int,
    ranges: Ranges,
) -> ArchivedFile:
    """The file's catalog row, once the service holds what was sent (`md5`) and the
    file the `rows` it should."""
    size = check_stored(name, local, md5, stored)
    held, _ = read_metadata(local)
    if held != rows:
        raise VerificationError(f"{name}: file holds {held} rows, {rows} were written")
    try:
        delta_schema, delta_stats = file_facts(local)
    except NotDeltaType:  # the file is archived; the publisher names what it leaves out
        delta_schema = delta_stats = ""
    return ArchivedFile(
        job_id=origin.job_id,
        part=origin.part,
        source_table=origin.source_table,
        storage_url=origin.storage_url,
        path=name,
        row_count=rows,
        byte_size=size,
        md5=md5,
        key_columns=origin.key_columns,
        min_key=ranges.min_key,
        max_key=ranges.max_key,
        cutoff_column=origin.cutoff_column,
        min_cutoff_value=ranges.min_cutoff,
        max_cutoff_value=ranges.max_cutoff,
        delta_schema=delta_schema,
        delta_stats=delta_stats,
        delta=origin.delta,
        tier=origin.tier,
        made_by=origin.made_by,
    )
