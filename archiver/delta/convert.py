"""Files an older release wrote with Parquet types Delta Lake has none for — uuid and
json as Parquet's UUID and JSON annotations, time as TIME, numeric wider than 38 digits
as a 256-bit decimal (before 008_delta.sql) — made readable by every Delta reader: each
is rewritten once, through the ledger (archiver.ledger: under a new name, one
transaction retiring it and cataloguing the rewrite, the original then reaped), with
those columns as PostgreSQL's text of their values: the types this release writes
(pgtypes.sql.AS_TEXT). Every row and every other column is kept as it was, and the
file's own description of its PostgreSQL columns too, so restore reads it as before.
The publisher runs this for a file whose footer it cannot publish (delta.publish)."""

from __future__ import annotations

import logging
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from archiver import ledger
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.files import names
from archiver.files.facts import NotDeltaType, delta_type, table_fields
from archiver.files.rewrite import rewrite
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.store import archive_files

log = logging.getLogger(__name__)

TEXT_FIELD = {b"POSTGRESQL:type": b"text"}  # as a column selected as its text says


def _uuid_text(array: pa.Array) -> pa.Array:
    storage = array.storage if isinstance(array, pa.ExtensionArray) else array
    return pa.array(
        [None if b is None else str(uuid.UUID(bytes=b)) for b in storage.to_pylist()], pa.string()
    )


def _time_text(array: pa.Array) -> pa.Array:
    """PostgreSQL's text of a time: seconds' trailing zeros and a bare point left out."""
    text = pc.cast(array, pa.string())
    text = pc.replace_substring_regex(text, r"(\.\d*?)0+$", r"\1")
    return pc.replace_substring_regex(text, r"\.$", "")


def _as_text(t: pa.DataType) -> Any:
    """How a column of type `t` becomes its PostgreSQL text, or None: Delta reads it."""
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == "arrow.uuid":
            return _uuid_text
        if t.extension_name == "arrow.json":
            return lambda a: pc.cast(a.storage, pa.string())
        return None
    if pa.types.is_time(t):
        return _time_text
    if pa.types.is_decimal256(t):
        return lambda a: pc.cast(a, pa.string())
    return None


def as_delta_types(data: pa.Table) -> tuple[pa.Table, list[str]] | None:
    """`data` with each column of a type Delta has none for as its PostgreSQL text (its
    `__pg_text` companion, which held the values that type could not, folded in), and
    the columns changed; None when no column needs it."""
    columns, fields, changed = [], [], []
    folded = set()
    for field, column in zip(data.schema, data.columns, strict=True):
        to_text = _as_text(field.type)
        if to_text is None:
            continue
        text = pa.chunked_array([to_text(c) for c in column.chunks], pa.string())
        companion = field.name + PG_TEXT_SUFFIX
        if companion in data.column_names:
            special = data.column(companion)
            text = pc.if_else(pc.is_valid(special), special, text)
            folded.add(companion)
        changed.append(field.name)
        columns.append(text)
        fields.append(pa.field(field.name, pa.string(), metadata=TEXT_FIELD))
    if not changed:
        return None
    out = data
    for name, f, column in zip(changed, fields, columns, strict=True):
        out = out.set_column(out.schema.get_field_index(name), f, column)
    out = out.drop_columns(sorted(folded))
    return out.replace_schema_metadata(data.schema.metadata), changed


def convert(ctx: Context, conn: BulkConnection, file_id: int) -> list[str] | None:
    """Rewrite committed file `file_id` with Delta's types (a ledger operation,
    'convert'): the columns converted, or None when some type is left that this cannot
    convert (the file stays as it is, for the publisher to leave out and name)."""
    storage, original = ctx.storage(), archive_files.catalog_file(conn, file_id)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "original.parquet"
        storage.download(original.path, local)
        data = pq.read_table(local)
        converted = as_delta_types(data)
        if converted is None:
            return None
        table, columns = converted
        try:
            for f in table_fields(table.schema):
                delta_type(f.name, f.type)
        except NotDeltaType:
            return None

        def rewrite_one(operation: int) -> ledger.TakenOut:
            # never added to the Delta log (it could not be): no removal to publish
            archive_files.unnumber(conn, file_id)
            name = names.rewritten_name(original.path, operation)
            ends = (original.min_key, original.max_key)  # every row kept: the same ends
            kept = pa.array(range(table.num_rows), pa.int64())
            guard = ledger.guard(conn, operation)
            local = Path(tmp) / "new"
            written = rewrite(storage, original, table, kept, name, local, ends, guard, operation)
            return ledger.TakenOut([file_id], [written], 0, {"columns": columns})

        request = {"file": original.path, "columns": columns}
        ledger.take_out(ctx, conn, "convert", [original.source_table], request, rewrite_one)
    log.info(
        "%s: %s rewritten with Delta Lake's types (%s as text)",
        original.source_table,
        original.path,
        ", ".join(columns),
    )
    return columns
