"""A catalogued file written again with only some of its rows (archiver.ledger, step 2):
the rows kept, byte for byte the same values and the same columns, types and metadata,
under a new name; uploaded, checked as a chunk's file is, and described for the
catalog and the Delta log as the original was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from archiver import failpoints
from archiver.config import ARCHIVE_TIER
from archiver.errors import VerificationError
from archiver.files.facts import NotDeltaType, file_facts
from archiver.files.stats import ChunkStats, in_arrow_order, key_text
from archiver.ident import quote_ident
from archiver.model import ArchivedFile, CatalogFile
from archiver.parquet import METADATA_PREFIX, Pending, read_metadata, rows_at, writer_options
from archiver.pgtypes.arrow import staging_table
from archiver.storage.seam import (
    Storage,
    check_stored,
    file_md5,
    file_tags,
    put_file,
)


def key_ends(
    cur: Any, kept: pa.Table, columns: list[tuple[str, str | None]], stage: str
) -> tuple[list[Any], list[Any]]:
    """The smallest and largest key of the `kept` rows in PostgreSQL's order, as the
    catalog keeps key ends (PostgreSQL's text of each value), for keys Arrow orders
    otherwise (text, numeric). `kept` is staged as temporary table `stage` (alias `s`);
    `columns` gives each key column's value over a staged row `s` in SQL and its
    collation (or None). A top-1 sort each way: linear in the rows."""
    cur.adbc_ingest(stage, staging_table(kept), mode="create", temporary=True)
    ordered = [f"({value}) COLLATE {c}" if c else f"({value})" for value, c in columns]
    text = ", ".join(f"({value})::text" for value, _ in columns)
    ends = []
    for direction in ("ASC", "DESC"):
        order = ", ".join(f"{o} {direction}" for o in ordered)
        cur.execute(f"SELECT {text} FROM {quote_ident(stage)} s ORDER BY {order} LIMIT 1")
        ends.append(list(cur.fetchall()[0]))
    cur.execute(f"DROP TABLE {quote_ident(stage)}")
    return ends[0], ends[1]


def rewrite(
    storage: Storage,
    original: CatalogFile,
    source: pq.ParquetFile | pa.Table,
    keep: pa.Array,
    name: str,
    local: Path,
    ordered_keys: tuple[list[Any], list[Any]] | None,
    guard: Callable[[], None],
    operation: int,
) -> ArchivedFile:
    """Write rows `keep` (int64 positions in `source`, the original file, ascending) to
    `local`, a row group of the original at a time (parquet.rows_at: a file of a million
    rows is never all in memory), store it as `name`, and return its catalog row.
    `ordered_keys`: the smallest and largest kept key in PostgreSQL's order, for keys
    Arrow orders differently (text, numeric); None: computed here. `guard`
    (ledger.guard) raises once the operation's session is gone: checked before the
    upload, and after it, when the blob just stored is deleted again (what a process
    killed in between leaves, the orphan sweep deletes). `operation`: the ledger
    operation writing it (its catalog row's made_by)."""
    schema = source.schema_arrow if isinstance(source, pq.ParquetFile) else source.schema
    meta = dict(schema.metadata or {})
    meta[(METADATA_PREFIX + "row_count").encode()] = str(len(keep)).encode()
    meta[(METADATA_PREFIX + "rewrite_of").encode()] = original.path.encode()
    schema = schema.with_metadata(meta)
    keys, cutoff = original.key_columns, original.cutoff_column
    stats = ChunkStats(arrow_order=in_arrow_order([schema.field(k).type for k in keys]))
    dictionary = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    with pq.ParquetWriter(local, schema, **writer_options(schema, dictionary)) as writer:
        pending = Pending(writer)
        for piece, _ in rows_at(source, keep):
            for batch in piece.to_batches():
                if batch.num_rows:
                    stats.observe(batch, keys, cutoff)
            pending.add(piece)
        pending.flush()
    if not stats.arrow_order:
        assert ordered_keys is not None, "keys Arrow does not order need PostgreSQL's ends"
        stats.min_key, stats.max_key = (tuple(k) for k in ordered_keys)
    assert stats.min_key is not None and stats.max_key is not None
    min_cutoff, max_cutoff = stats.cutoff_range()  # None: unbounded, or no cutoff column
    md5 = file_md5(local)
    tags = file_tags(original.source_table, original.job_id, min_cutoff, max_cutoff)
    tier = "" if original.tier == ARCHIVE_TIER else original.tier  # as it was written
    guard()
    failpoints.reach("rewrite_checked")
    stored = put_file(storage, name, local, tags, tier)
    failpoints.reach("rewrite_uploaded")
    try:
        guard()
    except BaseException:
        storage.delete(name)
        raise
    size = check_stored(name, local, md5, stored)
    rows, _ = read_metadata(local)
    if rows != len(keep):
        raise VerificationError(f"{name}: file holds {rows} rows, {len(keep)} were kept")
    try:
        delta_schema, delta_stats = file_facts(local)
    except NotDeltaType:  # as for a chunk's file: the publisher names what it leaves out
        delta_schema = delta_stats = ""
    return ArchivedFile(
        job_id=original.job_id,
        part=original.part,
        source_table=original.source_table,
        storage_url=original.storage_url,
        path=name,
        row_count=len(keep),
        byte_size=size,
        md5=md5,
        key_columns=keys,
        min_key=[key_text(v) for v in stats.min_key],
        max_key=[key_text(v) for v in stats.max_key],
        cutoff_column=cutoff,
        min_cutoff_value=min_cutoff,
        max_cutoff_value=max_cutoff,
        delta_schema=delta_schema,
        delta_stats=delta_stats,
        delta=original.delta,
        tier=tier,
        made_by=operation,
    )
