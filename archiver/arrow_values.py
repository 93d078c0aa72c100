"""Python values made into Arrow arrays and scalars from their buffers. pyarrow's own
conversion of a Python value (`pa.array`, `pa.scalar`, a constant handed to a compute
function) asks pandas whether the value is one of its arrays, and so imports pandas in
every process of an environment that holds it: a second or more of CPU at each
command's and worker's start, where archiver uses no pandas at all. The values archiver
hands Arrow -- text, integers, floats, booleans, bytes, dates, timestamps, NULL -- are
written here as pyarrow would have typed them."""

from __future__ import annotations

import array as typed
import datetime as dt
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_DAY_ZERO = dt.date(1970, 1, 1)


def one(value: Any) -> pa.Array | None:
    """A single-value array of `value`, typed as pyarrow types it; None where it is of
    a kind not written here (a datetime of a zone other than UTC, an int past int64)."""
    if value is None:
        return pa.nulls(1, pa.null())
    if isinstance(value, bool):
        return _fixed(pa.bool_(), "<B", 1 if value else 0)
    if isinstance(value, int):
        return _fixed(pa.int64(), "<q", value) if -(2**63) <= value < 2**63 else None
    if isinstance(value, float):
        return _fixed(pa.float64(), "<d", value)
    if isinstance(value, str):
        return _sized(pa.string(), value.encode())
    if isinstance(value, bytes):
        return _sized(pa.binary(), value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return _fixed(pa.timestamp("us"), "<q", _micros(value - _EPOCH))
        if value.tzinfo is dt.UTC:
            return _fixed(pa.timestamp("us", "UTC"), "<q", _micros(value - _EPOCH_UTC))
        return None  # another zone: pyarrow names it; its own way
    if isinstance(value, dt.date):
        return _fixed(pa.date32(), "<i", (value - _DAY_ZERO).days)
    return None


def scalar(value: Any, kind: pa.DataType | None = None) -> pa.Scalar:
    """`value` as an Arrow scalar (of `kind` where given: NULL of it for None, else
    cast to it), for a compute function's constant."""
    if value is None and kind is not None:
        return pa.nulls(1, kind)[0]
    made = one(value)
    if made is None:
        raise TypeError(f"no Arrow scalar written for {type(value).__name__}")
    return (made if kind is None or made.type == kind else made.cast(kind))[0]


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def python(value: pa.Scalar) -> Any:
    """`value.as_py()`, but a timestamp's made here from its integer (`instant`):
    pyarrow's own asks pandas whether to make a pandas Timestamp."""
    if not isinstance(value, pa.TimestampScalar) or value.value is None:
        return value.as_py()
    if value.type.tz not in (None, "UTC", "+00:00"):
        return value.as_py()  # the zone's name kept: pyarrow's way
    return instant(value.value, value.type)


def instant(raw: int, kind: pa.TimestampType) -> dt.datetime:
    """A timestamp's integer as a datetime (naive, or in UTC where `kind` has a zone);
    nanoseconds cut to microseconds, as datetime holds them. OverflowError past year
    9999."""
    micros = raw * 1_000_000 // _PER_SECOND[kind.unit]
    return (_EPOCH if kind.tz is None else _EPOCH_UTC) + dt.timedelta(microseconds=micros)


def int64s(start: int, stop: int) -> pa.Array:
    """range(start, stop) as an int64 array."""
    data = typed.array("q", range(start, stop))
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def strings(values: Sequence[str | None]) -> pa.Array:
    """A string array of `values` (None: NULL)."""
    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = typed.array("i", [0])
    for item in encoded:
        offsets.append(offsets[-1] + len(item))
    valid = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            valid[i // 8] |= 1 << (i % 8)
    buffers = [pa.py_buffer(bytes(valid)), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(values), buffers)


def _fixed(kind: pa.DataType, fmt: str, value: Any) -> pa.Array:
    return pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(struct.pack(fmt, value))])


def _sized(kind: pa.DataType, data: bytes) -> pa.Array:
    offsets = pa.py_buffer(struct.pack("<ii", 0, len(data)))
    return pa.Array.from_buffers(kind, 1, [None, offsets, pa.py_buffer(data)])


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
