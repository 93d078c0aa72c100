"""Arrow batches from PostgreSQL into a Parquet file: type conversion, row groups sized by
bytes, and metadata that says exactly what each column was. No I/O beyond the file."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROW_GROUP_BYTES = 64 * 1024 * 1024  # of Arrow data; each write call ends a row group
METADATA_PREFIX = "archiver."

Converter = Callable[[pa.Array], pa.Array]


def _numeric_type(typmod: int) -> pa.DataType | None:
    """decimal128/256 for numeric(p,s); None for unconstrained numeric (no exact decimal)."""
    if typmod < 4:
        return None
    precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
    if scale > precision:  # numeric(p, s>p) has no Parquet DECIMAL form
        return None
    return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)


def _field_meta(field: pa.Field, key: str) -> str | None:
    meta = field.metadata or {}
    value = meta.get(key.encode())
    return value.decode() if value is not None else None


def _interval_to_struct(array: pa.Array) -> pa.Array:
    """month_day_nano (Parquet cannot store it) as {months, days, microseconds}, kept
    apart. Vectorized: the 16-byte values are read as int32/int32/int64 views of the
    same buffer (PostgreSQL intervals hold whole microseconds)."""
    n, offset = len(array), array.offset
    data = array.buffers()[1]
    as_int32 = pa.Array.from_buffers(pa.int32(), 4 * (n + offset), [None, data])
    as_int64 = pa.Array.from_buffers(pa.int64(), 2 * (n + offset), [None, data])
    starts = pa.array(range(offset, offset + n), pa.int64())
    months = pc.take(as_int32, pc.multiply(starts, 4))
    days = pc.take(as_int32, pc.add(pc.multiply(starts, 4), 1))
    nanos = pc.take(as_int64, pc.add(pc.multiply(starts, 2), 1))
    micros = pc.divide(nanos, 1000)
    return pa.StructArray.from_arrays(
        [months, days, micros], fields=list(INTERVAL_STRUCT), mask=array.is_null()
    )


INTERVAL_STRUCT = pa.struct(
    [("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())]
)


def converter_for(field: pa.Field) -> tuple[pa.Field, Converter | None]:
    """The Parquet-side field for one column, and how to convert its arrays (None: as is)."""
    t = field.type
    if isinstance(t, pa.OpaqueType):
        target: pa.DataType | None = None
        if t.type_name == "numeric":
            typmod = _field_meta(field, "POSTGRESQL:typmod")
            target = _numeric_type(int(typmod)) if typmod else None
        if target is not None:
            decimal = target
            return field.with_type(decimal), lambda a: pc.cast(a.storage, decimal)
        # Exact text form; the column's PostgreSQL type is in the file's metadata.
        return field.with_type(t.storage_type), lambda a: a.storage
    if t == pa.month_day_nano_interval():
        return field.with_type(INTERVAL_STRUCT), _interval_to_struct
    return field, None


class ParquetFileWriter:
    """Writes batches of one chunk to a local Parquet file (zstd), one row group per
    ~ROW_GROUP_BYTES of Arrow data, and stamps the file with archiver's metadata."""

    def __init__(
        self,
        path: Path,
        source_schema: pa.Schema,
        metadata: Mapping[str, str],
        row_group_bytes: int = ROW_GROUP_BYTES,
    ) -> None:
        pairs = [converter_for(f) for f in source_schema]
        self._converters = [c for _, c in pairs]
        schema = pa.schema([f for f, _ in pairs])
        meta = {METADATA_PREFIX + k: v for k, v in metadata.items()}
        self.schema = schema.with_metadata(meta)
        self._writer = pq.ParquetWriter(
            str(path), self.schema, compression="zstd", write_statistics=True
        )
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._row_group_bytes = row_group_bytes
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        columns = [
            conv(col) if conv else col
            for conv, col in zip(self._converters, batch.columns, strict=True)
        ]
        converted = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._pending.append(converted)
        self._pending_bytes += converted.nbytes
        self.rows += converted.num_rows
        if self._pending_bytes >= self._row_group_bytes:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(
                pa.Table.from_batches(self._pending), row_group_size=self.rows + 1
            )
            self._pending, self._pending_bytes = [], 0

    def close(self, extra_metadata: Mapping[str, str]) -> int:
        """Finish the file; returns its row count."""
        self._flush()
        self._writer.add_key_value_metadata(
            {METADATA_PREFIX + k: v for k, v in extra_metadata.items()}
        )
        self._writer.close()
        return self.rows

    def abort(self) -> None:
        self._writer.close()


def file_metadata(
    source_table: str,
    columns: list[tuple[str, str]],
    key_columns: list[str],
    cutoff_column: str,
    cutoff: str,
    job_id: str,
    part: int,
    mode: str,
) -> dict[str, str]:
    return {
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
