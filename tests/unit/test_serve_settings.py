"""A serve session's settings (archiver.serve.settings) as PostgreSQL keeps a
backend's: SET, SET LOCAL undone at the transaction's end, RESET to what the start-up
set, what each change reports. The protocol around them is tests/integration/test_serve_*'s."""

from __future__ import annotations

import pytest

from archiver.serve import text
from archiver.serve.settings import SessionSettings
from archiver.serve.statements import SETTINGS
from archiver.serve.wire import SqlError


def started(**start_up: str) -> SessionSettings:
    settings = SessionSettings(dict(SETTINGS), text.C_MONEY)
    for name, value in start_up.items():
        settings.set(name, value, local=False, in_transaction=False)
    settings.started()
    return settings


def test_set_reports_what_postgresql_reports_and_restyles() -> None:
    settings = started()
    assert settings.set("timezone", "Europe/Paris", local=False, in_transaction=False) == {
        "TimeZone": "Europe/Paris"
    }
    assert settings.get("timezone") == "Europe/Paris"
    assert settings.style.zone.name == "Europe/Paris"
    assert settings.set("search_path", "sales", local=False, in_transaction=False) == {}
    assert settings.changed == {"timezone": "Europe/Paris", "search_path": "sales"}
    assert settings.set("extra_float_digits", "3", local=False, in_transaction=False) == {}
    assert settings.style.float_digits == 3


def test_set_local_lasts_its_transaction_and_nothing_outside_one() -> None:
    settings = started(timezone="Asia/Tokyo")
    assert settings.set("timezone", "UTC", local=True, in_transaction=False) == {}
    assert settings.get("timezone") == "Asia/Tokyo"  # PostgreSQL warns; it lasts nothing
    settings.set("timezone", "UTC", local=True, in_transaction=True)
    settings.set("timezone", "America/Lima", local=True, in_transaction=True)
    settings.set("work_mem", "64MB", local=True, in_transaction=True)
    assert settings.end_transaction() == {"TimeZone": "Asia/Tokyo"}  # the value before both
    assert settings.get("timezone") == "Asia/Tokyo" and "work_mem" not in settings.changed
    assert settings.end_transaction() == {}  # undone once


def test_reset_returns_to_what_the_start_up_set() -> None:
    settings = started(application_name="etl")
    settings.set("application_name", "adhoc", local=False, in_transaction=False)
    settings.set("timezone", "Europe/Paris", local=False, in_transaction=False)
    settings.set("search_path", "sales", local=False, in_transaction=False)
    assert settings.reset("application_name") == {"application_name": "etl"}
    assert settings.reset("all") == {"TimeZone": "UTC"}
    assert settings.changed == {"application_name": "etl"}
    assert settings.style.zone.name == "UTC"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("datestyle", "German, DMY", "ISO style only"),
        ("intervalstyle", "iso_8601", "postgres style only"),
        ("standard_conforming_strings", "off", "standard-conforming strings only"),
        ("timezone", "Mars/Olympus", "Mars/Olympus"),
    ],
)
def test_what_serve_cannot_write_is_refused_and_changes_nothing(
    name: str, value: str, message: str
) -> None:
    settings = started()
    with pytest.raises(SqlError, match=message):
        settings.set(name, value, local=False, in_transaction=False)
    assert settings.changed == {} and settings.get(name) == SETTINGS.get(name)
