"""A session of `archiver serve` as PostgreSQL keeps one: timestamptz written in the
session's TimeZone (edge values, historic offsets, inside ranges and arrays), floats
by extra_float_digits, settings checked and spelled by PostgreSQL and reported to the
client, RESET and DISCARD ALL back to the start-up's settings, version() and
server_version naming archiver, and a result's columns named as PostgreSQL names them.
Each compared with what PostgreSQL itself answers for the source rows."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.support.harness import Harness
from tests.support.serve import archive_three_tables, psql_lines, serving


@pytest.fixture
def archived(h: Harness) -> Harness:
    return archive_three_tables(h)


def test_a_session_reads_as_postgresql_writes_for_it(archived: Harness) -> None:
    h = archived
    select = (
        "SELECT id, c_tstz, c_ts_arr, c_tsrange, created_at FROM {} "
        "WHERE id % 97 = 1 OR id > 100000 ORDER BY id"
    )
    with serving(h) as served:
        for zone in (
            "Asia/Kolkata",
            "America/St_Johns",
            "Europe/Paris",
            "Australia/Lord_Howe",
            "UTC",
            "-05:30",
        ):
            setting = f"SET TIME ZONE '{zone}'"
            ours = psql_lines(served.dsn(), setting, select.format("alltypes"), "SHOW TimeZone")
            assert ours == psql_lines(h.url, setting, select.format("snapshot"), "SHOW TimeZone"), (
                zone
            )
        floats = "SELECT id, c_real, c_double, c_float_arr FROM {} WHERE id % 97 = 1 OR id > 100000 ORDER BY id"
        for digits in ("0", "-5", "3"):
            setting = f"SET extra_float_digits = {digits}"
            ours = psql_lines(served.dsn(), setting, floats.format("alltypes"))
            assert ours == psql_lines(h.url, setting, floats.format("snapshot")), digits
        with psycopg.connect(
            served.dsn(options="'-c TimeZone=Asia/Tokyo'"), autocommit=True
        ) as conn:
            assert conn.info.parameter_status("TimeZone") == "Asia/Tokyo"
            assert conn.execute("SHOW TimeZone").fetchone() == ("Asia/Tokyo",)
            conn.execute("SET TimeZone = 'europe/paris'")
            assert (
                conn.info.parameter_status("TimeZone") == "Europe/Paris"
            )  # as PostgreSQL spells it
            assert conn.execute("SELECT current_setting('TimeZone')").fetchone() == (
                "Europe/Paris",
            )
            conn.execute("RESET TimeZone")
            assert conn.execute("SHOW TimeZone").fetchone() == ("Asia/Tokyo",)
            conn.execute("SET TimeZone = 'UTC'")
            conn.execute("DISCARD ALL")
            assert conn.execute("SHOW TimeZone").fetchone() == ("Asia/Tokyo",)
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                conn.execute("SET TimeZone = 'Mars/Olympus_Mons'")
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                conn.execute("SET DateStyle = 'German'")
            assert conn.execute("SHOW DateStyle").fetchone() == ("ISO, MDY",)
            (version,) = conn.execute("SELECT version()").fetchone() or ("",)
            assert version.startswith("PostgreSQL 15.") and "archiver" in version
            reported = conn.info.parameter_status("server_version") or ""
            assert re.fullmatch(r"15\.\d+ \(archiver serve\)", reported), reported
            assert str(conn.execute("SHOW server_version_num").fetchone()).startswith("('15")
            assert conn.execute("SHOW max_identifier_length").fetchone() == ("63",)
            assert conn.execute(
                "SELECT current_setting('standard_conforming_strings')"
            ).fetchone() == ("on",)

        # a result's columns named as PostgreSQL names them (SQLAlchemy, pandas and BI
        # tools read them), not as DuckDB does (`count_star()`)
        exprs = (
            "count(*), sum(total), max(created_at) AS latest, id, o.status, 1, id::text, "
            "coalesce(note, 'x'), total * 2, CASE WHEN id > 0 THEN 1 END, lower(note), "
            "note IS NULL, (SELECT 1), EXISTS (SELECT 1)"
        )
        key = h.value("SELECT min(id) FROM untouched WHERE created_at < '2024-12-29'")
        query = f"SELECT {exprs} FROM {{}} o WHERE id = {key} GROUP BY id, o.status, note, total"
        with psycopg.connect(served.dsn()) as mine, psycopg.connect(h.url) as theirs:
            ours_names = [c.name for c in mine.execute(query.format("orders")).description or []]
            want = [c.name for c in theirs.execute(query.format("untouched")).description or []]
        assert ours_names == want
