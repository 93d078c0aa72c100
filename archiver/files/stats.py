"""What a chunk's file holds, from its Arrow batches: the key range and the cutoff range
the catalog records, and the same key range `verify` recomputes from a stored file."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from archiver.arrow_values import python
from archiver.errors import InputError
from archiver.pgtypes.arrow import storage_view, within_python_range
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.source.chunks import FIRST_KEY, LAST_KEY


@dataclass
class ChunkStats:
    """`arrow_order`: the key's Arrow order is PostgreSQL's, so the key range is computed
    here. Otherwise it is PostgreSQL's: the move statement's own first and last key
    (`take_bounds`), or a copy's first and last row, which arrive in key order."""

    arrow_order: bool = True
    min_key: tuple[Any, ...] | None = None
    max_key: tuple[Any, ...] | None = None
    min_cutoff: Any = None  # None with cutoff_unbounded_low: catalogued as -infinity
    max_cutoff: Any = None
    cutoff_unbounded_low: bool = False
    cutoff_unbounded_high: bool = False
    bounded: bool = False  # the key range came from the statement

    def take_bounds(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch without the first/last-key columns a move statement of a PG-ordered
        key adds (see source.FIRST_KEY), their values kept as the chunk's key range."""
        if FIRST_KEY not in batch.schema.names:
            return batch
        if not self.bounded and batch.num_rows:
            self.min_key, self.max_key = (
                tuple(json.loads(batch.column(name)[0].as_py())) for name in (FIRST_KEY, LAST_KEY)
            )
            self.bounded = True
        return batch.drop_columns([FIRST_KEY, LAST_KEY])

    def observe(self, batch: pa.RecordBatch, keys: list[str], cutoff: str) -> None:
        """Key and cutoff ranges of a batch as written (special values already NULL in
        their columns and spelled out in the __pg_text companions)."""
        if self.arrow_order:
            for name in keys:
                inside = within_python_range(batch.column(name))
                if inside is not None and not pc.all(inside).as_py():
                    raise InputError(
                        f"primary key column {name!r} holds a value archiver cannot archive "
                        "exactly (+-infinity, or a year outside 1-9999); nothing was moved"
                    )
            lo, hi = key_range(batch, keys)
            self.min_key = lo if self.min_key is None else min(self.min_key, lo)
            self.max_key = hi if self.max_key is None else max(self.max_key, hi)
        elif not self.bounded:
            row = (0, batch.num_rows - 1)
            first, last = (tuple(python(batch.column(k)[i]) for k in keys) for i in row)
            self.min_key = first if self.min_key is None else self.min_key
            self.max_key = last
        if not cutoff:  # a table archived with its parents' rows: their cutoff range
            return
        column = batch.column(cutoff)
        companion = cutoff + PG_TEXT_SUFFIX
        if companion in batch.schema.names and batch.column(companion).null_count < batch.num_rows:
            self.cutoff_unbounded_low = True  # -infinity: the one special older than a cutoff
        inside = within_python_range(column)
        if inside is not None and not pc.all(inside).as_py():  # BC, or past 9999
            self.cutoff_unbounded_low = True
            column = pc.filter(column, inside)
        found = pc.min_max(column)
        mm = {"min": python(found["min"]), "max": python(found["max"])}
        if mm["min"] is not None:
            self.min_cutoff = (
                mm["min"] if self.min_cutoff is None else min(self.min_cutoff, mm["min"])
            )
            self.max_cutoff = (
                mm["max"] if self.max_cutoff is None else max(self.max_cutoff, mm["max"])
            )

    def cutoff_range(self) -> tuple[str | None, str | None]:
        """The cutoff column's range as UTC text for the catalog; None is unbounded."""
        return (
            None if self.cutoff_unbounded_low else _as_utc_text(self.min_cutoff),
            None if self.cutoff_unbounded_high else _as_utc_text(self.max_cutoff),
        )


def key_range(
    batch: pa.RecordBatch | pa.Table, keys: list[str]
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The smallest and largest primary key in `batch`, in PostgreSQL's order."""
    columns = [batch.column(k) for k in keys]
    if len(columns) == 1:
        mm = pc.min_max(storage_view(columns[0]))
        lo, hi = python(mm["min"]), python(mm["max"])
        if isinstance(columns[0].type, pa.BaseExtensionType):  # uuid: back from bytes
            lo, hi = uuid.UUID(bytes=lo), uuid.UUID(bytes=hi)
        return (lo,), (hi,)
    view = pa.table({str(i): storage_view(c) for i, c in enumerate(columns)})
    order = pc.sort_indices(view, sort_keys=[(str(i), "ascending") for i in range(len(columns))])
    first, last = order[0].as_py(), order[-1].as_py()
    return tuple(python(c[first]) for c in columns), tuple(python(c[last]) for c in columns)


def in_arrow_order(types: list[pa.DataType]) -> bool:
    """Arrow orders keys of these types as PostgreSQL does (integers, uuid, dates and
    timestamps; not text, which has a collation, nor numeric)."""
    return all(
        pa.types.is_integer(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or isinstance(t, pa.BaseExtensionType)  # uuid
        for t in types
    )


def key_text(value: Any) -> str:
    """PostgreSQL-readable text of a key value (int, UUID, date, datetime)."""
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def _as_utc_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return str(value.isoformat())
