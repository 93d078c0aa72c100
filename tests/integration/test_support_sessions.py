"""The tests' own statements (tests.support.sql) run on a session kept per database: it
must behave as the fresh session each statement had before, and never stand in the
way of what a test does with its database next."""

from __future__ import annotations

from tests.support import fresh_database, sql


def test_a_kept_session_leaves_nothing_behind_for_the_next_statement(database_url: str) -> None:
    (first,) = sql(
        database_url,
        "SELECT pg_backend_pid() AS pid, current_setting('statement_timeout') AS timeout",
    )
    sql(database_url, "SET statement_timeout = 1234")
    sql(database_url, "SELECT pg_advisory_lock(4242)")
    sql(database_url, "LISTEN somewhere")
    sql(database_url, "BEGIN; CREATE TABLE left_open (a int)")  # a script's open transaction
    (after,) = sql(
        database_url,
        "SELECT pg_backend_pid() AS pid, current_setting('statement_timeout') AS timeout, "
        "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
        " AND pid = pg_backend_pid()) AS locks, "
        "(SELECT count(*) FROM pg_listening_channels()) AS channels, "
        "to_regclass('left_open') IS NULL AS rolled_back",
    )
    assert after["pid"] == first["pid"]  # kept: one backend, not one a statement
    assert after["timeout"] == first["timeout"] and after["locks"] == 0 and after["channels"] == 0
    assert after["rolled_back"]


def test_a_database_read_through_a_kept_session_can_be_copied_and_dropped(
    database_url: str,
) -> None:
    sql(database_url, "CREATE TABLE t (a int); INSERT INTO t VALUES (1)")
    template = database_url.rsplit("/", 1)[1]
    with fresh_database("archiver_copy", template) as copy:  # refused with a session in it
        assert sql(copy, "SELECT a FROM t")[0]["a"] == 1
    assert sql(database_url, "SELECT count(*) AS n FROM t")[0]["n"] == 1
