"""archiver.bulk_parameters: each parameter archiver binds made from buffers is the array
pyarrow's own conversion makes of it (so the driver binds the same value of the same
type), and anything else is left to that conversion."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from archiver.bulk_parameters import Binding, arrays

VALUES = [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, -0.0, 1e308, "", "héllo, 'x'\\n",
    "a" * 10_000, b"", b"\x00\xff", dt.date(1970, 1, 1), dt.date(1, 1, 1), dt.date(9999, 12, 31),
    dt.date(1969, 12, 31), dt.datetime(2024, 1, 1, 12, 30, 0, 123456), dt.datetime(1, 1, 1),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 2, 29, tzinfo=dt.UTC),
    dt.datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_parameter_is_the_array_pyarrow_makes_of_it(value: object) -> None:
    made = arrays([value])
    assert made is not None
    (one,) = made
    want = pa.array([value])
    assert one.type == want.type and one.equals(want), (one, want)


@pytest.mark.parametrize(
    "value",
    [dt.time(12, 30), dt.timedelta(days=1), decimal.Decimal("1.5"), [1, 2], dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))],
    ids=repr,
)  # fmt: skip
def test_another_kind_goes_pyarrows_way(value: object) -> None:
    assert arrays([1, value]) is None
    batch = Binding().convert_bind_parameters((1, value))
    assert batch.num_rows == 1 and batch.column(1).equals(pa.array([value]))


def test_a_statements_parameters_are_one_record_batch() -> None:
    batch = Binding().convert_bind_parameters(("orders", 5, None))
    assert batch.schema.names == ["0", "1", "2"] and batch.to_pylist() == [
        {"0": "orders", "1": 5, "2": None}
    ]
    named = Binding().convert_bind_parameters({"table": "orders"})  # by name: pyarrow's
    assert named.to_pylist() == [{"table": "orders"}]
