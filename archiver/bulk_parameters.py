"""The parameters archiver's ADBC statements bind, made into Arrow arrays from their
buffers. ADBC's DB-API converts a statement's Python parameters with pyarrow, whose
conversion asks pandas whether a value is one of its arrays, and so imports pandas in
every process of an environment that holds it (a second or more of CPU at each
command's and worker's start, where archiver uses no pandas at all). The values
archiver binds -- text, integers, floats, booleans, bytes, dates, timestamps, NULL --
are written here as pyarrow would have typed them; anything else goes the DB-API's own
way."""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from adbc_driver_manager import _dbapi_backend

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_DAY_ZERO = dt.date(1970, 1, 1)


class Binding(_dbapi_backend.DbapiBackend):
    """ADBC's pyarrow backend, but for positional parameters, which it makes from
    buffers (`arrays`)."""

    def __init__(self) -> None:
        self._arrow = _dbapi_backend.default_backend()

    def convert_bind_parameters(self, parameters: Any) -> Any:
        if isinstance(parameters, (list, tuple)):
            made = arrays(parameters)
            if made is not None:
                return pa.RecordBatch.from_arrays(made, names=[str(i) for i in range(len(made))])
        return self._arrow.convert_bind_parameters(parameters)

    def convert_executemany_parameters(self, parameters: Any) -> Any:
        return self._arrow.convert_executemany_parameters(parameters)

    def convert_description(self, schema: Any) -> Any:
        return self._arrow.convert_description(schema)

    def import_array_stream(self, handle: Any) -> Any:
        return self._arrow.import_array_stream(handle)

    def import_schema(self, handle: Any) -> Any:
        return self._arrow.import_schema(handle)


def arrays(values: Sequence[Any]) -> list[pa.Array] | None:
    """One single-value array per value, typed as pyarrow types it; None where a value
    is of a kind not written here."""
    out = []
    for value in values:
        one = _array(value)
        if one is None:
            return None
        out.append(one)
    return out


def _fixed(kind: pa.DataType, fmt: str, value: Any) -> pa.Array:
    return pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(struct.pack(fmt, value))])


def _array(value: Any) -> pa.Array | None:
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


def _sized(kind: pa.DataType, data: bytes) -> pa.Array:
    offsets = pa.py_buffer(struct.pack("<ii", 0, len(data)))
    return pa.Array.from_buffers(kind, 1, [None, offsets, pa.py_buffer(data)])


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
