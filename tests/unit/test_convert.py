"""delta.convert.as_delta_types: an older release's columns as PostgreSQL's text."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pyarrow as pa

from archiver.delta.convert import as_delta_types


def test_each_type_delta_has_none_for_becomes_postgresqls_text() -> None:
    u = uuid.UUID("c9f0f895-fb98-ab91-59f5-1fd0297e236d")
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "u": pa.ExtensionArray.from_storage(
                pa.uuid(), pa.array([u.bytes, None, u.bytes], pa.binary(16))
            ),
            "j": pa.ExtensionArray.from_storage(pa.json_(), pa.array(['{"a": 1}', None, "[]"])),
            "tm": pa.array([dt.time(12, 0), dt.time(1, 2, 3, 450000), None], pa.time64("us")),
            "big": pa.array(
                [decimal.Decimal("1.50"), None, decimal.Decimal("-2.00")], pa.decimal256(50, 2)
            ),
            "tm__pg_text": pa.array([None, None, "24:00:00"]),
            "big__pg_text": pa.array([None, "NaN", None]),
            "at__pg_text": pa.array([None, "infinity", None]),
        },
        metadata={"archiver.columns": "[]"},
    )
    converted = as_delta_types(table)
    assert converted is not None
    out, changed = converted
    assert changed == ["u", "j", "tm", "big"]
    assert out.column_names == ["id", "u", "j", "tm", "big", "at__pg_text"]  # its own kept
    assert out.to_pylist() == [
        {
            "id": 1,
            "u": str(u),
            "j": '{"a": 1}',
            "tm": "12:00:00",
            "big": "1.50",
            "at__pg_text": None,
        },
        {
            "id": 2,
            "u": None,
            "j": None,
            "tm": "01:02:03.45",
            "big": "NaN",
            "at__pg_text": "infinity",
        },
        {"id": 3, "u": str(u), "j": "[]", "tm": "24:00:00", "big": "-2.00", "at__pg_text": None},
    ]
    assert out.schema.metadata == {b"archiver.columns": b"[]"}
    assert all(out.schema.field(c).type == pa.string() for c in changed)


def test_a_file_delta_reads_is_left_as_it_is() -> None:
    assert as_delta_types(pa.table({"id": [1], "s": ["x"], "t__pg_text": [None]})) is None
