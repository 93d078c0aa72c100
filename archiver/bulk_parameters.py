"""The parameters archiver's ADBC statements bind, made into Arrow arrays from their
buffers (archiver.arrow_values): ADBC's DB-API converts a statement's Python parameters
with pyarrow, whose conversion imports pandas wherever it is installed. Anything not
written there goes the DB-API's own way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from adbc_driver_manager import _dbapi_backend

from archiver import arrow_values


class Binding(_dbapi_backend.DbapiBackend):
    """ADBC's pyarrow backend, but for positional parameters, which it makes from
    buffers (`arrays`)."""

    def __init__(self) -> None:
        self._arrow = _dbapi_backend.default_backend()

    def convert_bind_parameters(self, parameters: Any) -> Any:
        made = batch(parameters) if isinstance(parameters, (list, tuple)) else None
        return made if made is not None else self._arrow.convert_bind_parameters(parameters)

    def convert_executemany_parameters(self, parameters: Any) -> Any:
        return self._arrow.convert_executemany_parameters(parameters)

    def convert_description(self, schema: Any) -> Any:
        return self._arrow.convert_description(schema)

    def import_array_stream(self, handle: Any) -> Any:
        return self._arrow.import_array_stream(handle)

    def import_schema(self, handle: Any) -> Any:
        return self._arrow.import_schema(handle)


def batch(values: Sequence[Any]) -> pa.RecordBatch | None:
    """The values as one row of positional parameters; None as `arrays`."""
    made = arrays(values)
    if made is None:
        return None
    return pa.RecordBatch.from_arrays(made, names=[str(i) for i in range(len(made))])


def arrays(values: Sequence[Any]) -> list[pa.Array] | None:
    """One single-value array per value, typed as pyarrow types it; None where a value
    is of a kind not written here."""
    out = []
    for value in values:
        made = arrow_values.one(value)
        if made is None:
            return None
        out.append(made)
    return out
