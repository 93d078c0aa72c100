"""Maintenance windows with an injected clock: when a window is open, when it opens next
(across midnight and daylight-saving changes), and a job's pacing loop that stops at the
chunk boundary once its window closes."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from archiver.archive.commit import SeparateDatabase
from archiver.archive.context import JobContext
from archiver.archive.job import run_job
from archiver.archive.pacing import pace
from archiver.errors import InputError, OutsideWindow
from archiver.limits import Window, window_opens
from archiver.model import ArchiveRequest, Mode, Progress
from archiver.pgtypes.column import Column
from archiver.source.chunks import ChunkQueries
from archiver.source.tables import TableInfo
from archiver.testing.memory import MemoryDatabase, MemoryStorage

UTC = dt.UTC
PARIS = ZoneInfo("Europe/Paris")


def at(day: int, hour: int, minute: int = 0, month: int = 1, tz: dt.tzinfo = UTC) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, minute, tzinfo=tz)


def test_a_window_within_one_day() -> None:
    w = Window.parse("01:00-05:00")
    assert str(w) == "01:00-05:00 UTC"
    assert not w.is_open(at(1, 0, 59)) and w.is_open(at(1, 1)) and w.is_open(at(1, 4, 59))
    assert not w.is_open(at(1, 5))  # closes at 05:00 sharp
    assert w.next_open(at(1, 0, 30)) == at(1, 1)
    assert w.next_open(at(1, 6)) == at(2, 1)
    assert w.next_open(at(1, 2)) == at(1, 2)  # open: now


def test_a_window_across_midnight_in_its_own_zone() -> None:
    w = Window.parse("22:00-04:00 Europe/Paris")
    assert w.is_open(at(1, 23, tz=PARIS)) and w.is_open(at(2, 3, 59, tz=PARIS))
    assert not w.is_open(at(2, 4, tz=PARIS)) and not w.is_open(at(2, 12, tz=PARIS))
    assert w.next_open(at(2, 12, tz=PARIS)) == at(2, 21)  # 22:00 CET is 21:00 UTC
    assert w.next_open(at(2, 12, tz=PARIS)).tzinfo == UTC


def test_daylight_saving_days() -> None:
    w = Window.parse("01:00-05:00 Europe/Paris")
    # 29 March 2026: clocks go from 02:00 to 03:00 in Paris; the window opens at 01:00 CET
    assert w.next_open(at(28, 12, month=3)) == at(29, 0, month=3)
    # and the next day at 01:00 CEST, an hour earlier in UTC
    assert w.next_open(at(29, 12, month=3)) == at(29, 23, month=3)
    gap = Window.parse("02:15-02:45 Europe/Paris")  # does not exist on 29 March
    assert gap.next_open(at(28, 12, month=3)) == at(30, 0, 15, month=3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1-5", "expected 'HH:MM-HH:MM"),
        ("25:00-01:00", "not a time of day range"),
        ("01:00-01:00", "opens and closes at the same time"),
        ("01:00-05:00 Mars/Olympus", "unknown time zone"),
    ],
)
def test_bad_windows(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Window.parse(text)


def test_window_opens_reads_the_job_limits() -> None:
    assert window_opens({}, at(1, 12)) is None
    assert window_opens({"window": "01:00-05:00 UTC"}, at(1, 2)) is None
    assert window_opens({"window": "01:00-05:00 UTC"}, at(1, 12)) == at(2, 1)


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
def job() -> Iterator[tuple[JobContext, MemoryDatabase, Clock]]:
    catalog, clock = MemoryDatabase(), Clock(at(1, 4, 59))
    key = Column("id", "bigint", "int8")
    table = TableInfo("public", "orders", (key,), (key,))
    request = ArchiveRequest("public.orders", "id", "2024-01-01T00:00:00+00:00", Mode.MOVE)
    context = JobContext(
        "j1",
        1,
        request,
        ChunkQueries(table, key),
        source=None,  # type: ignore[arg-type]  # a closed window is raised before any SQL
        storage=MemoryStorage(),
        catalog=catalog,
        commit=SeparateDatabase(catalog, catalog),
        workdir=Path("."),
        clock=clock,
    )
    catalog.committed.limits = {"window": "01:00-05:00 UTC"}
    yield context, catalog, clock


def test_a_closed_window_stops_the_job_before_its_first_chunk(
    job: tuple[JobContext, MemoryDatabase, Clock],
) -> None:
    context, _, clock = job
    clock.now = at(1, 5)
    with pytest.raises(OutsideWindow) as closed:
        run_job(context, Progress(), lambda: None)
    assert closed.value.opens == at(2, 1)
    assert "its window 01:00-05:00 UTC is closed" in str(closed.value)


def test_the_window_closing_during_a_wait_stops_at_the_chunk_boundary(
    job: tuple[JobContext, MemoryDatabase, Clock],
) -> None:
    context, catalog, clock = job
    assert pace(context, None, lambda: None, None)[0] is None  # open: go on
    catalog.committed.limits["max_rows_per_second"] = 1
    # the previous chunk of 2 rows needs 2 s at 1 row/s; the window closes meanwhile
    last = (time.monotonic(), 2, 0)

    def interrupt() -> None:
        clock.now = at(1, 5)  # asked while waiting: the window has closed

    with pytest.raises(OutsideWindow) as closed:
        pace(context, last, interrupt, None)
    assert closed.value.opens == at(2, 1)
    assert catalog.committed.throttled == ["max_rows_per_second", None]  # not left waiting
    clock.now = at(2, 1)  # the next opening: the job goes on
    assert pace(context, None, lambda: None, None)[0] == 5
