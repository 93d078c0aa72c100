"""Retention periods, which files a limit lets go, and what the ledger keeps of an
erasure's predicate (its shape, never its values)."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from archiver.errors import InputError
from archiver.lifecycle.predicate import Predicate, shape
from archiver.lifecycle.retention import Age, expired, protected
from archiver.model import CatalogFile, FileState

NOW = dt.datetime(2024, 2, 29, 12, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "before"),
    [
        ("7 years", "2017-02-28T12:00:00+00:00"),  # no 29 February then
        ("7y", "2017-02-28T12:00:00+00:00"),
        ("18 months", "2022-08-29T12:00:00+00:00"),
        ("1 month", "2024-01-29T12:00:00+00:00"),
        ("90 days", "2023-12-01T12:00:00+00:00"),
        ("2w", "2024-02-15T12:00:00+00:00"),
    ],
)
def test_a_period_counts_back_in_calendar_units(text: str, before: str) -> None:
    assert Age.parse(text).before(NOW).isoformat() == before


@pytest.mark.parametrize("text", ["", "7", "seven years", "0 days", "5 minutes", "3m", "-1y"])
def test_a_period_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="expected a period"):
        Age.parse(text)


def file(low: str | None, high: str | None, **kw: object) -> CatalogFile:
    return CatalogFile(
        job_id="j", part=1, source_table="public.t", storage_url="az://c/p", path=f"{low}-{high}",
        row_count=1, byte_size=1, md5="", key_columns=["id"], min_key=["1"], max_key=["1"],
        cutoff_column="at", min_cutoff_value=low, max_cutoff_value=high,
        state=FileState.COMMITTED, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_only_files_wholly_before_the_limit_go() -> None:
    limit = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    old = file("2019-01-01T00:00:00+00:00", "2019-12-31T23:59:59+00:00")
    spans = file("2019-06-01T00:00:00+00:00", "2020-01-01T00:00:00+00:00")
    new = file("2020-01-01T00:00:00+00:00", "2020-02-01T00:00:00+00:00")
    unbounded = file(None, None)  # -infinity .. infinity
    split = expired([old, spans, new, unbounded], limit)
    assert split.going == [old]
    assert split.spanning == [spans, unbounded]
    assert split.kept_until == "2020-01-01T00:00:00+00:00"


def test_protection_is_named_with_its_latest_date() -> None:
    until = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
    files = [
        file("a", "b", immutable_until=until),
        file("c", "d", immutable_until=dt.datetime(2001, 1, 1, tzinfo=dt.UTC)),  # expired
        file("e", "f", legal_hold=True),
    ]
    assert protected(files, NOW) == (
        "1 under an immutability policy until 2031-01-01T00:00:00+00:00 and 1 under a legal hold"
    )
    assert protected(files[1:2], NOW) is None


def test_the_ledger_keeps_a_predicates_shape_not_its_values() -> None:
    text = "email = 'zeb''s@example.org' AND customer_id IN (42, 43) OR total > 1.5e3"
    assert shape(text) == "email = ? AND customer_id IN (?, ?) OR total > ?"


def test_a_predicate_is_one_condition_over_known_columns() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE archived (customer_id int, email text)")
    checked = Predicate.check(con, "customer_id = 42", "archived", "public.orders")
    assert checked.shape == "customer_id = ?"
    for text, says in (
        (
            "nosuch = 42",
            'names what public.orders does not have: Binder Error: Referenced column "nosuch"',
        ),
        ("customer_id = ", "does not parse"),
        ("true) UNION SELECT * FROM archived WHERE (true", "one condition"),
        ("true) GROUP BY customer_id HAVING (true", "one condition"),
    ):
        with pytest.raises(InputError) as caught:
            Predicate.check(con, text, "archived", "public.orders")
        assert says in str(caught.value)
    with pytest.raises(InputError) as caught:
        Predicate.check(con, "email = 'zebediah@x' AND nosuch", "archived", "t")
    assert "zebediah" not in str(caught.value)


def test_a_policy_retains_longer_than_it_waits_to_archive() -> None:
    from archiver.errors import ConfigError
    from archiver.policy import parse_policy

    raw = {"name": "p", "table": "orders", "older_than": "90 days", "schedule": "0 2 * * *"}
    assert parse_policy({**raw, "retain": "7 years"}, 1).retain == Age(7, "years")
    with pytest.raises(ConfigError, match="retain: 30 days is not longer than older_than"):
        parse_policy({**raw, "retain": "30d"}, 1)
    with pytest.raises(ConfigError, match="policy 'p': retain: expected a period"):
        parse_policy({**raw, "retain": "forever"}, 1)


def test_a_bound_python_cannot_hold_is_never_wholly_before_a_limit() -> None:
    limit = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    bc = file("0044-03-15 00:00:00+00 BC", "0044-03-16 00:00:00+00 BC")
    assert expired([bc], limit).going == []


def test_a_policy_names_the_tier_of_its_files() -> None:
    from archiver.errors import ConfigError
    from archiver.policy import parse_policy

    raw = {"name": "p", "table": "orders", "older_than": "90 days", "schedule": "0 2 * * *"}
    policy = parse_policy({**raw, "tier": "Cool"}, 1)
    assert policy.request(dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "public.orders").tier == "Cool"
    with pytest.raises(ConfigError, match="policy 'p': tier: expected Hot, Cool or Cold"):
        parse_policy({**raw, "tier": "Archive"}, 1)


def test_protection_the_storage_reports_counts_a_hold_without_a_date(tmp_path: object) -> None:
    from archiver.operations.selection import as_stored
    from archiver.testing.memory import MemoryStorage

    storage = MemoryStorage()
    held, free = file("a", "b"), file("c", "d")
    for f in (held, free):
        storage.objects[f.path] = b"x"
    storage.protect(held.path, None, True)  # a legal hold set in the portal, say
    found = as_stored(storage, [held, free])
    assert [f.legal_hold for f in found] == [True, False]
    assert protected(found, NOW) == "1 under a legal hold"
