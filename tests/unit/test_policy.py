"""Policy parsing and time arithmetic, with no scheduler running."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from archiver.errors import ConfigError
from archiver.model import Mode
from archiver.policy import parse_policies, parse_policy

GOOD: dict[str, Any] = {
    "name": "orders",
    "table": "public.orders",
    "older_than": "90 days",
    "schedule": "0 2 * * *",
    "timezone": "Europe/Paris",
}


def test_a_good_policy() -> None:
    policy = parse_policy(dict(GOOD), 1)
    assert policy.mode == Mode.MOVE and policy.column == "created_at"
    slot = dt.datetime(2024, 6, 1, 0, 30, tzinfo=dt.UTC)  # 02:30 in Paris
    assert policy.cutoff(slot).isoformat() == "2024-03-03T00:00:00+01:00"
    request = policy.request(slot, "public.orders")
    assert request.cutoff == "2024-03-03T00:00:00+01:00" and request.mode == Mode.MOVE
    assert not request.with_children
    aggregate = parse_policy({**GOOD, "with_children": True}, 1).request(slot, "public.orders")
    assert aggregate.with_children and aggregate.payload()["with_children"] is True
    times = policy.next_fire_times(slot, 2)
    assert [t.astimezone(dt.UTC).hour for t in times] == [0, 0]  # 02:00 CEST
    assert policy.fire_times(slot, slot + dt.timedelta(days=2)) == times


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"older_than": "3 fortnights"}, "policy 'orders': older_than: expected a period"),
        ({"older_than": "0 days"}, "policy 'orders': older_than: expected a period"),
        ({"schedule": "0 2 * * 1"}, "weekday numbers are ambiguous"),
        ({"schedule": "0 2 * *"}, "expected 5 cron fields"),
        ({"timezone": "Mars/Olympus"}, "timezone: unknown time zone"),
        ({"mode": "shred"}, "mode: expected move or copy"),
        ({"chunk_rows": 0}, "chunk_rows: must be at least 1"),
        ({"priority": "high"}, "priority: expected a whole number"),
        ({"colour": "red"}, "colour: unknown key"),
        ({"table": "a."}, "table: invalid table name"),
        ({"cdc_marker": "no"}, "cdc_marker: expected true or false"),
        ({"with_children": 1}, "with_children: expected true or false"),
        ({"max_rows_per_second": 0}, "max_rows_per_second: must be at least 1"),
        ({"max_replica_lag": "soon"}, "max_replica_lag: 'soon' is neither a duration"),
        ({"max_replica_lag": 64}, "max_replica_lag: expected a size or duration"),
        ({"max_wal_per_second": "30s"}, "max_wal_per_second: '30s' is not a size"),
        ({"window": "1-5"}, "window: expected 'HH:MM-HH:MM"),
        ({"window": "01:00-01:00"}, "window: '01:00-01:00' opens and closes at the same time"),
        ({"window": "01:00-05:00 Mars/Olympus"}, "window: unknown time zone 'Mars/Olympus'"),
    ],
)
def test_each_mistake_names_the_policy_and_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_policy({**GOOD, **change}, 1)


def test_periods_are_spelled_as_retain_spells_them() -> None:
    """older_than reads a period as retain and `purge --older-than` do: calendar months
    and years too (1 year before 2024-02-29 is 2023-02-28)."""
    slot = dt.datetime(2024, 2, 29, 12, tzinfo=dt.UTC)
    for spelled, cutoff in (
        ("1 year", "2023-02-28"), ("18 months", "2022-08-29"), ("90 days", "2023-12-01"),
        ("2 weeks", "2024-02-15"), ("1y", "2023-02-28"),
    ):  # fmt: skip
        policy = parse_policy({**GOOD, "older_than": spelled, "timezone": "UTC"}, 1)
        assert policy.cutoff(slot).date().isoformat() == cutoff, spelled
    both = parse_policy({**GOOD, "older_than": "1 year", "retain": "7 years"}, 1)
    assert str(both.older_than) == "1 year" and str(both.retain) == "7 years"
    with pytest.raises(ConfigError, match="retain: 1 year is not longer than older_than"):
        parse_policy({**GOOD, "older_than": "13 months", "retain": "1 year"}, 1)


def test_limits() -> None:
    policy = parse_policy(
        {**GOOD, "max_rows_per_second": 50, "max_replica_lag": "30s", "max_wal_per_second": "1MB"},
        1,
    )
    assert policy.limits == {
        "max_rows_per_second": 50,
        "max_replica_lag_seconds": 30,
        "max_wal_per_second": 1024**2,
    }
    assert parse_policy({**GOOD, "window": "22:00-04:00"}, 1).limits == {
        "window": "22:00-04:00 Europe/Paris"  # the policy's zone unless the window names one
    }
    assert parse_policy({**GOOD, "window": "1:00-5:00 UTC"}, 1).limits == {
        "window": "01:00-05:00 UTC"
    }


def test_missing_name_and_duplicates() -> None:
    raw = {k: v for k, v in GOOD.items() if k != "name"}
    with pytest.raises(ConfigError, match="policy #3: name: missing"):
        parse_policy(raw, 3)
    with pytest.raises(ConfigError, match="duplicate policy name"):
        parse_policies([GOOD, GOOD])
