"""Arrow batches from PostgreSQL into a Parquet file: type conversion, row groups sized by
bytes, and metadata that says exactly what each column was. No I/O beyond the file."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from archiver.pgtypes import PG_TEXT_SUFFIX

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


# What the ADBC driver (1.13) makes of values PostgreSQL holds but Arrow's types do not:
# +-infinity, and timestamps within ~30 years of PostgreSQL's maximum, wrap around int64
# (dates: int32) on the shift from the 2000 to the 1970 epoch, landing far below
# PostgreSQL's minimum (4714-11-24 BC); numeric NaN comes as 'nan', 24:00:00 as a full
# day of microseconds. Nothing real lies there, so each is found exactly, set NULL in
# its column and written as PostgreSQL text into the `<name>__pg_text` companion.
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970
_PG_MIN_TIMESTAMP_US = -210_866_803_200_000_000
_PG_MIN_DATE_DAYS = -2_440_588
_DAY_US = 86_400_000_000


def _wrapped(raw: int, bits: int, shift: int) -> int:
    """PostgreSQL's own value (2000 epoch) behind a driver value that wrapped around."""
    span = 1 << bits
    return (raw - shift + span // 2) % span - span // 2


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01, any year (H. Hinnant)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, doy - (153 * mp + 2) // 5 + 1


def _timestamp_text(raw: int, with_zone: bool) -> str:
    value = _wrapped(raw, 64, _PG_EPOCH_US)
    if value in (2**63 - 1, -(2**63)):
        return "infinity" if value > 0 else "-infinity"
    micros = value + _PG_EPOCH_US  # a finite timestamp past the driver's range
    days, rest = divmod(micros, _DAY_US)
    year, month, day = _civil(days)
    seconds, us = divmod(rest, 1_000_000)
    text = f"{year}-{month:02d}-{day:02d} {seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{us:06d}"
    return text + "+00" if with_zone else text


def _date_text(raw: int) -> str:
    return "infinity" if _wrapped(raw, 32, 10_957) > 0 else "-infinity"


_PY_MIN_DATE_DAYS, _PY_MAX_DATE_DAYS = -719_162, 2_932_896  # 0001-01-01, 9999-12-31
_PY_MIN_US = _PY_MIN_DATE_DAYS * _DAY_US
_PY_MAX_US = (_PY_MAX_DATE_DAYS + 1) * _DAY_US - 1


def within_python_range(array: pa.Array) -> pa.Array | None:
    """For a date or timestamp column: True where the value lies in years 1-9999 (what
    Python, and so the catalog's key and range text, can represent) or is NULL. None for
    any other type (nothing to check)."""
    if pa.types.is_date32(array.type):
        raw, lo, hi = array.view(pa.int32()), _PY_MIN_DATE_DAYS, _PY_MAX_DATE_DAYS
    elif pa.types.is_timestamp(array.type):
        raw, lo, hi = array.view(pa.int64()), _PY_MIN_US, _PY_MAX_US
    else:
        return None
    inside = pc.and_(pc.greater_equal(raw, lo), pc.less_equal(raw, hi))
    return pc.fill_null(inside, True)


def split_special(array: pa.Array, base_type: str) -> tuple[pa.Array, pa.Array]:
    """(the column with PostgreSQL-only values set NULL, their exact text or NULL)."""
    n = len(array)
    text: Callable[[int], str]
    if base_type in ("timestamp", "timestamptz"):
        raw = array.view(pa.int64())
        mask = pc.less(raw, _PG_MIN_TIMESTAMP_US)
        zone = base_type == "timestamptz"

        def text(i: int) -> str:
            return _timestamp_text(raw[i].as_py(), zone)

    elif base_type == "date":
        raw = array.view(pa.int32())
        mask = pc.less(raw, _PG_MIN_DATE_DAYS)

        def text(i: int) -> str:
            return _date_text(raw[i].as_py())

    elif base_type == "time":
        mask = pc.equal(array.view(pa.int64()), _DAY_US)

        def text(i: int) -> str:
            return "24:00:00"

    elif base_type == "numeric":
        mask = pc.equal(pc.utf8_lower(array.storage), "nan")

        def text(i: int) -> str:
            return "NaN"

    else:
        raise ValueError(f"no special values known for {base_type}")
    mask = pc.fill_null(mask, False)
    if not pc.any(mask).as_py():
        return array, pa.nulls(n, pa.string())
    where = pc.indices_nonzero(mask).to_pylist()
    texts: list[str | None] = [None] * n
    for i in where:
        texts[i] = text(i)
    if isinstance(array.type, pa.BaseExtensionType):
        clean_storage = pc.if_else(mask, pa.scalar(None, array.storage.type), array.storage)
        clean = pa.ExtensionArray.from_storage(array.type, clean_storage)
    else:
        clean = pc.if_else(mask, pa.scalar(None, array.type), array)
    return clean, pa.array(texts, pa.string())


class ParquetFileWriter:
    """Writes batches of one chunk to a local Parquet file (zstd), one row group per
    ~ROW_GROUP_BYTES of Arrow data, and stamps the file with archiver's metadata."""

    def __init__(
        self,
        path: Path,
        source_schema: pa.Schema,
        metadata: Mapping[str, str],
        row_group_bytes: int = ROW_GROUP_BYTES,
        companions: Sequence[str] = (),
        arrow_checked: Mapping[str, str] | None = None,
    ) -> None:
        """`companions`: every __pg_text column the file carries, in order, after the
        table's columns; those not in `source_schema` are filled here from the columns
        of `arrow_checked` (name -> base type, see split_special)."""
        self._arrow_checked = dict(arrow_checked or {})
        companion_names = set(companions)
        table_fields = [f for f in source_schema if f.name not in companion_names]
        pairs = [converter_for(f) for f in table_fields]
        self._converters = [c for _, c in pairs]
        present = {f.name: f for f in source_schema}
        schema = pa.schema(
            [f for f, _ in pairs]
            + [present.get(name, pa.field(name, pa.string())) for name in companions]
        )
        meta = {METADATA_PREFIX + k: v for k, v in metadata.items()}
        self.schema = schema.with_metadata(meta)
        self._writer = pq.ParquetWriter(
            str(path), self.schema, compression="zstd", write_statistics=True
        )
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._row_group_bytes = row_group_bytes
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
        self._pending.append(converted)
        self._pending_bytes += converted.nbytes
        self.rows += converted.num_rows
        if self._pending_bytes >= self._row_group_bytes:
            self._flush()
        return converted

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
