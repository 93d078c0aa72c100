"""Values made into Arrow from their buffers (archiver.arrow_values) are what pyarrow's
own conversion makes of them, and timestamps read back as pyarrow reads them."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from archiver.arrow_values import instant, int64s, python, scalar, strings

UTC = dt.UTC


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -(2**63), 2**63 - 1, 1.5, "", "é€", b"\x00\xff",
     dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
     dt.datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC)],
)  # fmt: skip
def test_a_scalar_is_pyarrows_own(value: object) -> None:
    mine, theirs = scalar(value), pa.scalar(value)
    assert mine.type == theirs.type and mine.equals(theirs)


def test_typed_scalars_nulls_and_arrays() -> None:
    assert scalar(5, pa.int32()).equals(pa.scalar(5, pa.int32()))
    assert scalar(None, pa.string()).equals(pa.scalar(None, pa.string()))
    assert int64s(3, 7).equals(pa.array(range(3, 7), pa.int64()))
    assert int64s(0, 0).equals(pa.array([], pa.int64()))
    texts = ["a", None, "", "ünï", None, "x" * 300, "b", "c", None]
    assert strings(texts).equals(pa.array(texts, pa.string()))
    with pytest.raises(TypeError):
        scalar(object())


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC"])
def test_a_timestamp_reads_back_as_pyarrow_reads_it(unit: str, tz: str | None) -> None:
    kind = pa.timestamp(unit, tz)
    per = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    year_one = -62_135_596_800 * per if unit != "ns" else -(2**62)  # ns: ±292 years
    for raw in (0, -1, 1, 1_709_251_199 * per + per // 3, year_one):
        value = pa.array([raw], pa.int64()).cast(kind)[0]
        if unit == "ns":  # pyarrow's own keeps nanoseconds only in a pandas Timestamp
            expected = (dt.datetime(1970, 1, 1, tzinfo=UTC if tz else None)
                        + dt.timedelta(microseconds=raw // 1000))  # fmt: skip
        else:
            expected = value.as_py()
        assert python(value) == expected == instant(raw, kind)
    assert python(pa.scalar(None, kind)) is None
    assert python(pa.scalar(7)) == 7
