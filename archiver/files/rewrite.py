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

from archiver.config import ARCHIVE_TIER
from archiver.files.written import Origin, Ranges, catalogued, put_guarded, write_pieces
from archiver.ident import quote_ident
from archiver.model import ArchivedFile, CatalogFile
from archiver.parquet import METADATA_PREFIX, rows_at
from archiver.pgtypes.arrow import staging_table
from archiver.storage.seam import Storage, file_tags


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
    pieces = (piece for piece, _ in rows_at(source, keep))
    stats, _ = write_pieces(local, schema, pieces, keys, cutoff)
    if not stats.arrow_order:
        assert ordered_keys is not None, "keys Arrow does not order need PostgreSQL's ends"
        stats.min_key, stats.max_key = (tuple(k) for k in ordered_keys)
    ranges = Ranges.of(stats)  # a cutoff None: unbounded, or no cutoff column
    tags = file_tags(original.source_table, original.job_id, ranges.min_cutoff, ranges.max_cutoff)
    tier = "" if original.tier == ARCHIVE_TIER else original.tier  # as it was written
    points = ("rewrite_checked", "rewrite_uploaded")
    md5, stored = put_guarded(storage, name, local, tags, tier, guard, points)
    origin = Origin(
        original.job_id, original.part, original.source_table, original.storage_url,
        keys, cutoff, original.delta, tier, made_by=operation,
    )  # fmt: skip
    return catalogued(origin, name, local, md5, stored, len(keep), ranges)
