"""Arrow batches from PostgreSQL into a Parquet file: type conversion, row groups sized by
bytes, and metadata that says exactly what each column was. No I/O beyond the file."""

from __future__ import annotations

import bisect
import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from archiver.arrow_values import scalar
from archiver.pgtypes.arrow import converter_for, split_special, unscaled_column
from archiver.pgtypes.sql import PG_TEXT_SUFFIX

# Of Arrow data; each write call ends a row group, and a row group's batches wait in
# memory until it is written (about DuckDB's default group on the reference table). With
# only enums dictionary-encoded (pgtypes.dictionary_encoded) 32 MB groups encode as fast
# as 64 MB ones, into files as small, for a lower peak RSS (docs/performance.md).
ROW_GROUP_BYTES = 32 * 1024 * 1024
METADATA_PREFIX = "archiver."


def writer_options(schema: pa.Schema, dictionary: Sequence[str]) -> dict[str, Any]:
    """How every archive file is written (a chunk, a rewrite, a merge): zstd at its
    default level; dictionaries for the `dictionary` columns alone; decimals of up to 18
    digits stored as integers (the Parquet spec's INT32/INT64 decimals); and the columns
    of integers, timestamps, dates, times and those decimals DELTA_BINARY_PACKED, which
    for keys and times in rising order stores little more than their differences, and
    for random integers about as small as PLAIN under zstd, and cheaper to encode
    (docs/performance.md, the footprint). Every reader the tests run reads both
    (tests/integration/test_readers.py); Spark's vectorized reader decodes DELTA_BINARY_PACKED itself
    from 3.3 (SPARK-36879), through parquet-mr's decoder before that."""
    wanted = set(dictionary)
    delta = {
        f.name: "DELTA_BINARY_PACKED"
        for f in schema
        if f.name not in wanted and _integer_like(f.type)
    }
    return {
        "compression": "zstd",
        "use_dictionary": list(dictionary),
        "write_statistics": True,
        "store_decimal_as_integer": True,
        "column_encoding": delta or None,
    }


def _integer_like(t: pa.DataType) -> bool:
    """A type Parquet stores as INT32 or INT64 (decimals: with store_decimal_as_integer)."""
    if pa.types.is_decimal(t):
        return bool(t.precision <= 18)
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
    )


class BinaryStream(Protocol):
    """Where a file's bytes go, in order (pyarrow asks for no more)."""

    closed: bool

    def write(self, data: bytes) -> int: ...

    def tell(self) -> int: ...


class ParquetFileWriter:
    """Writes batches of one chunk to a Parquet file or stream (zstd), one row group per
    ~ROW_GROUP_BYTES of Arrow data, dictionary-encoding only the `dictionary` columns,
    and stamps the file with archiver's metadata."""

    def __init__(
        self,
        sink: BinaryStream,
        source_schema: pa.Schema,
        metadata: Mapping[str, str],
        companions: Sequence[str] = (),
        dictionary: Sequence[str] = (),
        arrow_checked: Mapping[str, str] | None = None,
        unscaled: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        """`companions`: every __pg_text column the file carries, in order, after the
        table's columns; those not in `source_schema` are filled here from the columns
        of `arrow_checked` (name -> base type, see split_special). `unscaled`: numeric
        columns selected as unscaled int64 (name -> precision, scale)."""
        self._arrow_checked = dict(arrow_checked or {})
        companion_names = set(companions)
        table_fields = [f for f in source_schema if f.name not in companion_names]
        decimals = dict(unscaled or {})
        pairs = [
            unscaled_column(f, *decimals[f.name]) if f.name in decimals else converter_for(f)
            for f in table_fields
        ]
        self._converters = [c for _, c in pairs]
        present = {f.name: f for f in source_schema}
        schema = pa.schema(
            [f for f, _ in pairs]
            + [present.get(name, pa.field(name, pa.string())) for name in companions]
        )
        meta = {METADATA_PREFIX + k: v for k, v in metadata.items()}
        self.schema = schema.with_metadata(meta)
        self._writer = pq.ParquetWriter(
            sink, self.schema, **writer_options(self.schema, dictionary)
        )
        self._pending = Pending(self._writer)
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Convert and buffer one batch; returns it as written (specials set NULL)."""
        arrays: dict[str, pa.Array] = {}
        for conv, name in zip(self._converters, self.schema.names, strict=False):
            col = batch.column(name)
            if name in self._arrow_checked:
                col, arrays[name + PG_TEXT_SUFFIX] = split_special(col, self._arrow_checked[name])
            arrays[name] = conv(col) if conv else col
        columns = [arrays[n] if n in arrays else batch.column(n) for n in self.schema.names]
        converted = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._pending.add(pa.Table.from_batches([converted]))
        self.rows += converted.num_rows
        return converted

    def close(self, extra_metadata: Mapping[str, str]) -> int:
        """Finish the file; returns its row count."""
        self._pending.flush()
        self._writer.add_key_value_metadata(
            {METADATA_PREFIX + k: v for k, v in extra_metadata.items()}
        )
        self._writer.close()
        return self.rows

    def abort(self) -> None:
        # The file is thrown away: the error that stopped it is the one raised.
        with contextlib.suppress(Exception):
            self._writer.close()


class Pending:
    """Pieces of rows buffered into row groups of ~ROW_GROUP_BYTES of Arrow data for
    `writer` (each write call ends a row group): a chunk's batches, a rewrite's or a
    merge's pieces. The total is kept as pieces come, never summed again (a merge of
    3,650 daily files did, per piece: quadratic)."""

    def __init__(self, writer: pq.ParquetWriter) -> None:
        self.writer = writer
        self.pieces: list[pa.Table] = []
        self.bytes = 0

    def add(self, piece: pa.Table) -> None:
        self.pieces.append(piece)
        self.bytes += piece.nbytes
        if self.bytes >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.pieces:
            group = pa.concat_tables(self.pieces)
            self.writer.write_table(group, row_group_size=group.num_rows + 1)
            self.pieces, self.bytes = [], 0


def rows_at(
    source: pq.ParquetFile | pa.Table, positions: pa.Array
) -> Iterator[tuple[pa.Table, pa.Array]]:
    """The rows of `source` at `positions` (int64, ascending), each piece with its
    positions: a file a row group at a time, so a file of a million rows is never all in
    memory (reading it whole to restore a day out of it is not bounded); a table in one
    piece."""
    if isinstance(source, pa.Table):
        yield source.take(positions), positions
        return
    start = 0
    for group in range(source.num_row_groups):
        end = start + source.metadata.row_group(group).num_rows
        lo = bisect.bisect_left(positions, start, key=_as_int)
        hi = bisect.bisect_left(positions, end, lo, key=_as_int)
        if hi > lo:
            mine = positions[lo:hi]
            rows = source.read_row_group(group)
            yield rows.take(pc.subtract(mine, scalar(start))), mine
        start = end


def _as_int(value: pa.Scalar) -> int:
    return int(value.as_py())


def file_metadata(
    source_table: str,
    columns: list[tuple[str, str]],
    key_columns: list[str],
    cutoff_column: str,
    cutoff: str,
    job_id: str,
    part: int,
    mode: str,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    return {
        **(extra or {}),
        "source_table": source_table,
        "columns": json.dumps([{"name": n, "type": t} for n, t in columns]),
        "key_columns": json.dumps(key_columns),
        "cutoff_column": cutoff_column,
        "cutoff": cutoff,
        "job_id": job_id,
        "part": str(part),
        "mode": mode,
    }


def read_metadata(path: Path) -> tuple[int, dict[str, str]]:
    """(row count from the footer, archiver's metadata) of a Parquet file."""
    meta = pq.read_metadata(str(path))
    kv = {
        k.decode(): v.decode()
        for k, v in (meta.metadata or {}).items()
        if k.decode().startswith(METADATA_PREFIX)
    }
    return meta.num_rows, {k[len(METADATA_PREFIX) :]: v for k, v in kv.items()}
