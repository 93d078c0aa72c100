"""Archived values as PostgreSQL's text: what its output function prints for the
original type, which its input function reads back exactly (a PostgreSQL-only value
from the column's `__pg_text` companion, as archived)."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable
from decimal import Decimal

import pyarrow as pa

from archiver.pgtypes.arrow import INTERVAL_STRUCT, civil
from archiver.serve.types import Column

_DAY_US = 86_400_000_000
_INFINITY_US = (2**63 - 1, -(2**63))  # DuckDB's ±infinity timestamps, as Arrow holds them


def date_text(days: int) -> str:
    """PostgreSQL's ISO text of a date (days since 1970), BC years as it prints them."""
    year, month, day = civil(days)
    bc = year <= 0
    return f"{1 - year if bc else year:04d}-{month:02d}-{day:02d}" + (" BC" if bc else "")


def clock(micros: int) -> str:
    seconds, us = divmod(micros, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{us:06d}".rstrip("0") if us else "")


def timestamp_text(micros: int, zone: bool) -> str:
    """PostgreSQL's ISO text of a timestamp (µs since 1970; with `zone`, in UTC)."""
    if micros in _INFINITY_US:
        return "infinity" if micros > 0 else "-infinity"
    days, rest = divmod(micros, _DAY_US)
    year, month, day = civil(days)
    bc = year <= 0
    text = f"{1 - year if bc else year:04d}-{month:02d}-{day:02d} {clock(rest)}"
    return text + ("+00" if zone else "") + (" BC" if bc else "")


def interval_text(months: int, days: int, micros: int) -> str:
    """PostgreSQL's text of an interval in its default style (`postgres`)."""
    parts = []
    years, mons = int(months / 12), months - int(months / 12) * 12  # truncated, as PostgreSQL
    for value, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        if value:
            parts.append(f"{value} {unit}{'' if abs(value) == 1 else 's'}")
    if micros or not parts:
        sign = "-" if micros < 0 else ""
        parts.append(sign + clock(abs(micros)))
    return " ".join(parts)


def float_text(value: float, single: bool) -> str:
    """PostgreSQL's shortest exact text of a float4 or float8: the fewest digits that
    read back the same value, in exponent form below 1e-4 and from 1e15 (float4: 1e6)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    shortest = repr(value)
    if single:
        for width in range(1, 10):
            shortest = f"{value:.{width}g}"
            if struct.unpack("f", struct.pack("f", float(shortest)))[0] == value:
                break
    sign, digits, exponent = Decimal(shortest).normalize().as_tuple()
    assert isinstance(exponent, int)
    places = "".join(map(str, digits))
    magnitude = len(places) + exponent - 1  # the exponent in scientific notation
    head = "-" if sign else ""
    if magnitude < -4 or magnitude >= (6 if single else 15):
        mantissa = places[0] + ("." + places[1:] if len(places) > 1 else "")
        return f"{head}{mantissa}e{'-' if magnitude < 0 else '+'}{abs(magnitude):02d}"
    return head + format(Decimal(places).scaleb(exponent), "f")


def numeric_text(value: Decimal, trim: bool) -> str:
    if trim:
        value = value.normalize()
    text = format(value, "f")
    return "0" if text in ("-0", "0") and trim else text


def bytea_text(value: bytes) -> str:
    return "\\x" + value.hex()


_NEEDS_QUOTES = re.compile(r'[\s{}",\\]')


def array_text(values: Iterable[str | None]) -> str:
    """PostgreSQL's text of a one-dimensional array of element texts."""
    out = []
    for v in values:
        if v is None:
            out.append("NULL")
        elif v == "" or v.upper() == "NULL" or _NEEDS_QUOTES.search(v):
            out.append('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            out.append(v)
    return "{" + ",".join(out) + "}"


def _texts(array: pa.Array, kind: str, trim: bool) -> list[str | None]:
    """Each value of `array` as PostgreSQL's text of `kind`."""
    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):  # archived as that text
        return array.cast(pa.string()).to_pylist()  # type: ignore[no-any-return]
    if kind.endswith("[]") and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        element = kind[:-2]
        flat = _texts(array.flatten(), element, trim)
        offsets = array.offsets.to_pylist()
        valid = array.is_valid().to_pylist()
        return [
            array_text(flat[offsets[i] - offsets[0] : offsets[i + 1] - offsets[0]])
            if valid[i]
            else None
            for i in range(len(array))
        ]
    if pa.types.is_timestamp(t):
        raw = array.cast(pa.timestamp("us", t.tz)).view(pa.int64()).to_pylist()
        zone = t.tz is not None
        return [None if v is None else timestamp_text(v, zone) for v in raw]
    if pa.types.is_date32(t):
        return [None if v is None else date_text(v) for v in array.view(pa.int32()).to_pylist()]
    if pa.types.is_time(t):
        raw = array.cast(pa.time64("us")).view(pa.int64()).to_pylist()
        return [None if v is None else clock(v) for v in raw]
    if t == pa.month_day_nano_interval():
        return [
            None if v is None else interval_text(v.months, v.days, v.nanoseconds // 1000)
            for v in array.to_pylist()
        ]
    if t == INTERVAL_STRUCT:
        return [
            None if v is None else interval_text(v["months"], v["days"], v["microseconds"])
            for v in array.to_pylist()
        ]
    if pa.types.is_boolean(t):
        return [None if v is None else ("t" if v else "f") for v in array.to_pylist()]
    if pa.types.is_floating(t):
        single = pa.types.is_float32(t) or kind == "real"
        return [None if v is None else float_text(v, single) for v in array.to_pylist()]
    if pa.types.is_decimal(t):
        return [None if v is None else numeric_text(v, trim) for v in array.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return [None if v is None else bytea_text(v) for v in array.to_pylist()]
    if pa.types.is_integer(t):
        return array.cast(pa.string()).to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_struct(t) or pa.types.is_map(t):
        import json

        return [None if v is None else json.dumps(v, default=str) for v in array.to_pylist()]
    return [None if v is None else str(v) for v in array.to_pylist()]


def text_values(array: pa.Array, column: Column, companion: pa.Array | None) -> list[bytes | None]:
    """Every value of one result column as PostgreSQL's text (UTF-8), a PostgreSQL-only
    value from its companion column where that has one."""
    texts = _texts(array, column.kind, column.trim_scale)
    if companion is not None:
        for i, special in enumerate(companion.to_pylist()):
            if special is not None:
                texts[i] = special
    return [None if v is None else v.encode() for v in texts]
