"""What one Parquet file brings to its Delta table, read when it is written: its columns
as a Delta schema and the add action's statistics (numRecords, minValues, maxValues,
nullCount), from the file's own footer. No Delta library here: this runs in every chunk.

Types follow the Delta protocol's: Arrow's integers, floats, booleans, strings, binary,
dates, decimal128 and structs and lists of them map one to one; a UTC timestamp is
`timestamp`, a timestamp without a zone `timestamp_ntz` (the table then needs the
timestampNtz feature, see delta.publish). The `__pg_text` companions are not the
table's columns: readers of the Delta table do not see them (restore reads them from
the files)."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from archiver.arrow_values import instant
from archiver.errors import ArchiverError
from archiver.pgtypes.sql import PG_TEXT_SUFFIX

STRING_STATS = 32  # characters of a string kept as its minimum; longer maxima are left out
DeltaType = str | dict[str, Any]

_PRIMITIVE: dict[pa.DataType, str] = {
    pa.int8(): "byte",
    pa.int16(): "short",
    pa.int32(): "integer",
    pa.int64(): "long",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.date32(): "date",
}


class NotDeltaType(ArchiverError):
    """A column whose Arrow type Delta Lake has no type for (a file written before
    archiver wrote Delta's types)."""


def delta_type(name: str, t: pa.DataType) -> DeltaType:
    """The Delta type of an Arrow type."""
    if isinstance(t, pa.BaseExtensionType):
        raise NotDeltaType(f"column {name!r}: {t} has no Delta Lake type")
    if t in _PRIMITIVE:
        return _PRIMITIVE[t]
    if pa.types.is_dictionary(t):
        return delta_type(name, t.value_type)
    if pa.types.is_timestamp(t) and t.unit == "us":
        if t.tz is None:
            return "timestamp_ntz"
        if t.tz in ("UTC", "+00:00", "Etc/UTC"):
            return "timestamp"
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = delta_type(name, t.value_type)
        return {"type": "array", "elementType": element, "containsNull": True}
    if pa.types.is_struct(t):
        return struct_type([t.field(i) for i in range(t.num_fields)])
    raise NotDeltaType(f"column {name!r}: {t} has no Delta Lake type")


def struct_type(fields: list[pa.Field]) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [
            {"name": f.name, "type": delta_type(f.name, f.type), "nullable": True, "metadata": {}}
            for f in fields
        ],
    }


def table_fields(schema: pa.Schema) -> list[pa.Field]:
    """The fields a Delta reader sees: the table's columns, without companions."""
    return [f for f in schema if not f.name.endswith(PG_TEXT_SUFFIX)]


def file_facts(local: Path) -> tuple[str, str]:
    """(the file's Delta schema as JSON, the add action's stats as JSON) of a written file."""
    parquet = pq.ParquetFile(local)
    fields = table_fields(parquet.schema_arrow)
    schema = json.dumps(struct_type(fields), separators=(",", ":"))
    return schema, json.dumps(stats(parquet.metadata, fields), separators=(",", ":"))


def stats(meta: pq.FileMetaData, fields: list[pa.Field]) -> dict[str, Any]:
    """Delta's per-file statistics from the row groups' own: minimum, maximum and null
    count of every top-level column of a primitive type that has them. Values a JSON
    number cannot hold exactly (decimals, NaN) and maxima that had to be cut are left
    out: a reader then reads the file rather than skip it wrongly."""
    wanted = {f.name: f.type for f in fields if not pa.types.is_nested(f.type)}
    columns: dict[str, list[Any]] = {}  # name -> [min, max, nulls, complete]
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            name = chunk.path_in_schema
            if name not in wanted:
                continue
            s = chunk.statistics
            entry = columns.setdefault(name, [None, None, 0, True])
            if s is None or not s.has_null_count:
                entry[3] = False
                continue
            entry[2] += s.null_count
            if not s.has_min_max:
                if s.null_count < group.num_rows:
                    entry[0] = entry[1] = _UNKNOWN
                continue
            try:  # a timestamp's from its integers: pyarrow's conversion imports pandas
                kind = wanted[name]
                if pa.types.is_timestamp(kind):
                    lo, hi = instant(s.min_raw, kind), instant(s.max_raw, kind)
                else:
                    lo, hi = s.min, s.max
            except (ValueError, OverflowError):  # a date past Python's year 9999
                entry[0] = entry[1] = _UNKNOWN
                continue
            entry[0] = lo if entry[0] is None else _pick(min, entry[0], lo)
            entry[1] = hi if entry[1] is None else _pick(max, entry[1], hi)
    out: dict[str, Any] = {"numRecords": meta.num_rows, "minValues": {}, "maxValues": {},
                           "nullCount": {}}  # fmt: skip
    for name, (lo, hi, nulls, complete) in columns.items():
        if not complete:
            continue
        out["nullCount"][name] = nulls
        t = wanted[name]
        for key, value, upper in (("minValues", lo, False), ("maxValues", hi, True)):
            text = _json_value(t, value, upper)
            if text is not None:
                out[key][name] = text
    return out


_UNKNOWN = object()  # a row group with values but no minimum or maximum


def _pick(choose: Any, a: Any, b: Any) -> Any:
    return _UNKNOWN if _UNKNOWN in (a, b) else choose(a, b)


def _json_value(t: pa.DataType, value: Any, upper: bool) -> Any:
    """The statistic as Delta writes it in JSON, or None to leave it out."""
    if value is None or value is _UNKNOWN:
        return None
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t):
        return int(value)
    if pa.types.is_floating(t):
        # no maximum: Parquet's statistics leave NaN out, which PostgreSQL and DuckDB
        # sort above every number, so a finite maximum could hide a NaN row
        return float(value) if math.isfinite(value) and not upper else None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if len(value) <= STRING_STATS:
            return str(value)
        return None if upper else str(value[:STRING_STATS])  # a prefix is still a minimum
    if pa.types.is_date32(t):
        return value.isoformat()
    if pa.types.is_timestamp(t):
        return _timestamp(value, upper, t.tz is not None)
    return None  # booleans, binary, decimals


def _timestamp(value: dt.datetime, upper: bool, utc: bool) -> str:
    """Milliseconds, as Delta's statistics hold them: a maximum rounded up, so that no
    reader skips a file holding the microseconds past it."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    cut = value.replace(microsecond=value.microsecond // 1000 * 1000)
    if upper and cut != value:
        cut += dt.timedelta(milliseconds=1)
    text = cut.isoformat(timespec="milliseconds")
    return text + "Z" if utc else text
