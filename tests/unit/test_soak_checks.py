"""The soak's row invariant (archiver.testing.soak_checks.judge) on what a check might
see: each way a row can be wrong is reported, and what is allowed is not."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from archiver.testing.soak_checks import Seen, judge, one_error_line, rss_flat
from archiver.testing.soak_world import KEYS, Ledger, Row

NOW = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)


def seen(ledger: Ledger, live: dict[str, set[object]], archived: dict[str, list[object]]) -> Seen:
    rows = ledger.snapshot()
    return Seen(
        rows,
        rows,
        {t: live.get(t, set()) for t in KEYS},
        {t: Counter(archived.get(t, [])) for t in KEYS},
        set(ledger.erasing),
        {t: {} for t in KEYS},
    )


def ledger_of(**tables: dict[object, Row]) -> Ledger:
    ledger = Ledger()
    for table, rows in tables.items():
        ledger.rows[table].update(rows)
    return ledger


def test_every_row_in_one_place_is_clean() -> None:
    ledger = ledger_of(orders={1: Row(NOW, "s"), 2: Row(NOW, "s")}, audit={"a": Row(NOW, "t")})
    assert judge(seen(ledger, {"orders": {1}}, {"orders": [2], "audit": ["a"]}), ledger, NOW) == []


def test_each_wrong_place_is_reported() -> None:
    ledger = ledger_of(orders={1: Row(NOW, "s"), 2: Row(NOW, "s"), 3: Row(NOW, "s")})
    found = judge(seen(ledger, {"orders": {1, 9}}, {"orders": [1, 2, 2]}), ledger, NOW)
    assert found == [
        "orders: 1 rows archived twice, e.g. ['2 (s)']",
        "orders: 1 rows live and archived, e.g. ['1 (s)']",
        "orders: 1 rows found but not inserted, or erased, e.g. ['9 (no subject)']",
        "orders: 1 rows lost, e.g. ['3 (s)']",
    ]


def test_a_purge_may_take_old_events_only() -> None:
    old, young = NOW - dt.timedelta(days=200), NOW - dt.timedelta(days=20)
    ledger = ledger_of(events={1: Row(old, None), 2: Row(young, None)}, audit={"a": Row(old, "s")})
    assert judge(seen(ledger, {}, {}), ledger, NOW) == [
        "events: 1 rows lost, e.g. ['2 (no subject)']",
        "audit: 1 rows lost, e.g. ['a (s)']",
    ]


def test_a_subject_s_rows_may_stay_archived_only_while_it_is_erased() -> None:
    ledger = ledger_of(audit={"a": Row(NOW, "subject-01"), "b": Row(NOW, "subject-02")})
    ledger.erasing.add("subject-01")
    ledger.forget_subject("subject-01")
    assert judge(seen(ledger, {}, {"audit": ["a", "b"]}), ledger, NOW) == []
    ledger.erasing.discard("subject-01")
    ledger.erased.add("subject-01")
    assert judge(seen(ledger, {}, {"audit": ["a", "b"]}), ledger, NOW) == [
        "audit: 1 rows found but not inserted, or erased, e.g. ['a (subject-01 erased)']"
    ]


def test_a_command_s_error_is_one_line_after_its_progress_never_a_traceback() -> None:
    assert one_error_line("t: 1 of 3 files\narchiver: error: database error: gone\n")
    assert not one_error_line("Traceback (most recent call last):\narchiver: error: x\n")
    assert not one_error_line("t: 1 of 3 files\n")


def test_worker_memory_that_grows_over_the_run_is_a_problem() -> None:
    steady = [(m / 3, 150.0 + (m % 4) * 10) for m in range(90)]  # 30 min, every 20 s
    assert rss_flat(steady, 30) == []
    restarted = [*steady[:40], (13.5, 60.0), *steady[41:]]  # a worker SIGKILLed: smaller
    assert rss_flat(restarted, 30) == []
    leaking = [(m / 3, 150.0 + m * 3) for m in range(90)]
    [said] = rss_flat(leaking, 30)
    assert said == "worker RSS grew: peak 240 MB in the first 10 min, 417 MB in the last"
    assert rss_flat([(0.3, 150.0), (2.9, 400.0)], 3) != []  # a short run compares halves
