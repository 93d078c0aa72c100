"""Restore's Arrow pre-filter: never leaves out a row PostgreSQL could find in range."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from archiver.restore.rows import maybe_in_range

UTC = dt.UTC
DAYS = [dt.datetime(2024, 1, d, 12, tzinfo=UTC) for d in range(1, 31)]


def positions(data: pa.Table, lower: str | None, upper: str | None) -> list[int] | None:
    found = maybe_in_range(data, "at", lower, upper)
    return None if found is None else found.to_pylist()


def test_a_range_keeps_its_rows_and_a_day_either_side() -> None:
    data = pa.table({"at": pa.array(DAYS, pa.timestamp("us", tz="UTC"))})
    # [10th, 12th): the 10th and 11th, and the 9th and 12th within the margin
    assert positions(data, "2024-01-10T00:00:00+00:00", "2024-01-12T00:00:00+00:00") == [
        8, 9, 10, 11,
    ]  # fmt: skip
    # an offset far from UTC still finds them: the margin covers any time zone
    assert set(positions(data, "2024-01-10T00:00:00+14:00", "2024-01-12") or []) >= {9, 10}
    assert positions(data, None, None) is None  # no range: every row


def test_open_ends_naive_timestamps_and_dates() -> None:
    naive = pa.table({"at": pa.array([d.replace(tzinfo=None) for d in DAYS], pa.timestamp("us"))})
    assert positions(naive, None, "2024-01-03") == [0, 1, 2]
    dates = pa.table({"at": pa.array([d.date() for d in DAYS], pa.date32())})
    assert positions(dates, "2024-01-29", None) == [27, 28, 29]


def test_nulls_and_postgresql_only_values_always_go_to_postgresql() -> None:
    data = pa.table(
        {
            "at": pa.array([DAYS[0], None, DAYS[29]], pa.timestamp("us", tz="UTC")),
            "at__pg_text": pa.array([None, None, "infinity"]),
        }
    )
    assert positions(data, "2024-01-10", "2024-01-11") == [1, 2]


def test_a_cutoff_arrow_cannot_compare_stages_every_row() -> None:
    data = pa.table({"at": pa.array(["2024-01-01"])})
    assert positions(data, "2024-01-01", None) is None
    assert maybe_in_range(data, "", "2024-01-01", None) is None
