"""A compaction's merge (archiver.lifecycle.compact says what is merged): a group's
files downloaded and checked to be of one kind, then merged, a row group of one input at
a time (memory flat in the table's size), into files named after the ledger operation,
each upload guarded by its lock, each described for the catalog and the Delta log as a
chunk's file is."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from archiver.bulk import BulkConnection
from archiver.db import query
from archiver.errors import VerificationError
from archiver.files import names
from archiver.files.rewrite import key_ends
from archiver.files.written import Origin, Ranges, catalogued, put_guarded, write_pieces
from archiver.ident import TableName, quote_ident
from archiver.lifecycle.compact import Chunk, instant
from archiver.model import ArchivedFile, CatalogFile
from archiver.parquet import METADATA_PREFIX, read_metadata
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.storage.seam import Storage, file_tags

# what a file's metadata says of how its columns were archived: merged only where equal
ARCHIVED_AS = ("columns", "key_columns", "cutoff_column", "partition", "partition_bound")


@dataclass(frozen=True)
class Inputs:
    """Files of one table to merge into one, downloaded: the merge's columns are theirs
    with every special-value companion any of them has (NULL in the others)."""

    files: list[CatalogFile]
    local: list[Path]
    schema: pa.Schema
    metadata: dict[str, str]


class Apart(Exception):
    """A group's root files differ in how their columns were archived (a type changed,
    the same in Delta's terms): left as they are."""


def fetch(storage: Storage, group: list[Chunk], tmp: Path) -> tuple[list[Inputs], list[Inputs]]:
    """Download a group's files: each child table's, split where their columns were
    archived differently (a child table's schema changed: a merged file each), and the
    roots'. Chunks with children must merge into one root (Apart otherwise: their
    children's files are merged before their root, in one sequence); roots alone are
    split the same way, each kind of two files or more merged (Apart when none is)."""
    children: dict[str, list[CatalogFile]] = {}
    for chunk in group:
        for f in chunk.children:
            children.setdefault(f.source_table, []).append(f)
    count = itertools.count()
    merged_children = []
    for table in sorted(children):
        merged_children += _kinds(storage, children[table], tmp, count)
    roots = _kinds(storage, [c.root for c in group], tmp, count)
    if not children:
        roots = [kind for kind in roots if len(kind.files) >= 2]
    if len(roots) != 1 and (children or not roots):
        raise Apart(
            f"{group[0].root.source_table}: the group's files were archived with different columns"
        )
    return merged_children, roots


def _kinds(
    storage: Storage, files: list[CatalogFile], tmp: Path, count: Iterator[int]
) -> list[Inputs]:
    by_kind: dict[str, list[tuple[CatalogFile, Path, pa.Schema, dict[str, str]]]] = {}
    for f in files:
        local = tmp / f"in-{next(count)}.parquet"
        storage.download(f.path, local)
        schema = pq.read_schema(local)
        _, meta = read_metadata(local)
        base = [(x.name, str(x.type)) for x in schema if not x.name.endswith(PG_TEXT_SUFFIX)]
        archived = [meta.get(k) for k in ARCHIVED_AS]
        kind = json.dumps([base, *archived])
        by_kind.setdefault(kind, []).append((f, local, schema, meta))
    out = []
    for members in by_kind.values():
        first = members[0][2]
        companions = {
            x.name: x for _, _, s, _ in members for x in s if x.name.endswith(PG_TEXT_SUFFIX)
        }
        fields = [x for x in first if not x.name.endswith(PG_TEXT_SUFFIX)]
        fields += [companions[n] for n in sorted(companions)]
        out.append(
            Inputs(
                [m[0] for m in members],
                [m[1] for m in members],
                pa.schema(fields, metadata=first.metadata),
                members[0][3],
            )
        )
    return out


def merged_job(storage_url: str, operation: int) -> str:
    """The (job, part) sequence a merge's files take: its own, one per operation."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"archiver:compact:{storage_url}:{operation}"))


def merge(
    conn: BulkConnection,
    storage: Storage,
    inputs: Inputs,
    operation: int,
    part: int,
    local: Path,
    guard: Callable[[], None],
) -> ArchivedFile:
    """The inputs' rows, one row group of one input at a time (memory flat in the
    table's size), into `local`, stored as part `part` of the merge of `operation`:
    its catalog row."""
    first = inputs.files[0]
    table = first.source_table
    expected = sum(f.row_count for f in inputs.files)
    extra = {
        "row_count": str(expected),
        "job_id": merged_job(first.storage_url, operation),
        "part": str(part),
        "compacted_jobs": json.dumps(sorted({f.job_id for f in inputs.files})),
        "compacted_files": str(len(inputs.files)),
    }
    meta = {
        (METADATA_PREFIX + k).encode(): v.encode() for k, v in {**inputs.metadata, **extra}.items()
    }
    schema = inputs.schema.with_metadata({**(inputs.schema.metadata or {}), **meta})
    keys, cutoff = first.key_columns, first.cutoff_column
    stats, rows = write_pieces(local, schema, _pieces(inputs, schema), keys, cutoff)
    if rows != expected:
        raise VerificationError(f"{table}: the merge read {rows} rows, the catalog says {expected}")
    if not stats.arrow_order:  # keys PostgreSQL orders by a collation: the inputs' ends
        stats.min_key, stats.max_key = (tuple(k) for k in _key_ends(conn, inputs.files))
    ranges = Ranges.of(stats, _cutoff_range(inputs.files))
    name = storage.object_name(names.merged_name(table, operation, part))
    tags = file_tags(table, extra["job_id"], ranges.min_cutoff, ranges.max_cutoff)
    points = ("compact_merged", "compact_uploaded")
    md5, stored = put_guarded(storage, name, local, tags, first.tier, guard, points)
    origin = Origin(
        extra["job_id"], part, table, first.storage_url, keys, cutoff, first.delta, first.tier,
        made_by=operation,
    )  # fmt: skip
    return catalogued(origin, name, local, md5, stored, expected, ranges)


def _pieces(inputs: Inputs, schema: pa.Schema) -> Iterator[pa.Table]:
    """Each input's row groups in turn, as the merge's columns (a companion an input
    lacks is NULL there)."""
    for local in inputs.local:
        with pq.ParquetFile(local) as source:
            for group in range(source.num_row_groups):
                rows = source.read_row_group(group)
                columns = [
                    rows.column(x.name)
                    if x.name in rows.column_names
                    else pa.nulls(rows.num_rows, x.type)
                    for x in schema
                ]
                yield pa.Table.from_arrays(columns, schema=schema)


def _cutoff_range(files: list[CatalogFile]) -> tuple[str | None, str | None]:
    """From the smallest input start to the largest end (None, unbounded, if any input's
    is; "" for a table archived with its parents: no cutoff column)."""
    lows = [f.min_cutoff_value for f in files]
    highs = [f.max_cutoff_value for f in files]
    low = min((v for v in lows if v is not None), key=instant, default=None)
    high = max((v for v in highs if v is not None), key=instant, default=None)
    return (None if None in lows else low), (None if None in highs else high)


def _key_ends(conn: BulkConnection, files: list[CatalogFile]) -> tuple[list[Any], list[Any]]:
    """The smallest and largest of the inputs' catalogued key ends, each key column cast
    to its type and compared under its collation in the table (as the catalog keeps
    them): a sort of two rows per input."""
    keys = files[0].key_columns
    ends = [f.min_key for f in files] + [f.max_key for f in files]
    staged = pa.table({k: [e[i] for e in ends] for i, k in enumerate(keys)})
    with conn.cursor() as cur:
        cur.execute(query("key_types"), (TableName.stored(files[0].source_table).quoted,))
        typed = {name: (kind, collation) for name, kind, collation in cur.fetchall()}
        columns = []
        for k in keys:
            kind, collation = typed.get(k, (None, None))
            value = f"s.{quote_ident(k)}"
            columns.append((f"({value})::{kind}" if kind else value, collation))
        return key_ends(cur, staged, columns, "archiver_compact_keys")
