"""`archiver query --with-live` against PostgreSQL over an untouched copy of the same
rows: the reference table with half its rows (the oldest) moved to file://, queried as
live + archived rows at one snapshot, and the same SQL through psql over a copy of the
whole table with the same indexes, each a whole command (process start-up included,
DuckDB's ~0.6 s among it)."""

from __future__ import annotations

import datetime as dt
import time

from archiver.testing import plans
from bench.common import archiver_cmd, env_for, psql_seconds, run_process, run_workers, sql
from bench.core import Bench


def queries(rows: int) -> dict[str, str]:
    """The figures' SQL, for a table of `rows` reference rows (row g: g minutes before
    2025-01-01; the oldest half archived)."""
    old = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) - dt.timedelta(minutes=rows * 3 // 4)
    day = (old.date().isoformat(), (old.date() + dt.timedelta(days=1)).isoformat())
    return {
        "count(*)": "SELECT count(*) FROM orders",
        f"key lookup (an archived id, {rows * 3 // 4:,})": (
            f"SELECT id, total FROM orders WHERE id = {rows * 3 // 4}"
        ),
        "one day's rows (archived), count and sum": (
            f"SELECT count(*), sum(total) FROM orders WHERE created_at >= '{day[0]}' "
            f"AND created_at < '{day[1]}'"
        ),
        "revenue per month": (
            "SELECT date_trunc('month', created_at) AS m, sum(total) FROM orders "
            "GROUP BY 1 ORDER BY 1"
        ),
    }


def live_at_scale(bench: Bench) -> None:
    n, repeat = bench.args.rows, bench.args.repeat
    url = bench.dbs.copy(n)
    try:
        sql(url, "CREATE TABLE untouched (LIKE orders INCLUDING ALL)")
        sql(url, "INSERT INTO untouched SELECT * FROM orders")
        sql(url, "VACUUM (ANALYZE) untouched")
        half = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) - dt.timedelta(minutes=n // 2)
        env = env_for(url, bench.storage("file"), None, ARCHIVER_DELTA="false")
        run_process(archiver_cmd("enqueue", "--table", "orders", "--before", half.isoformat()), env)
        run_workers(env, 1)
        for label, statement in queries(n).items():
            mine = min(_seconds(env, statement) for _ in range(repeat))
            theirs = min(
                psql_seconds(url, statement.replace("FROM orders", "FROM untouched"))
                for _ in range(repeat)
            )
            bench.add(f"query --with-live, {label}, half of {n:,} rows archived", mine, theirs,
                      "s", "(reported: psql over an untouched copy)", None)  # fmt: skip
    finally:
        bench.dbs.drop(url)


def files_read(bench: Bench) -> None:
    """A key lookup and a one-day range over --live-rows archived rows on Azurite in 20
    files: the files each read (DuckDB's scans' counts, from --explain) of
    all, and its time as a whole command."""
    n = bench.args.live_rows
    url = bench.dbs.copy(n)
    try:
        env = env_for(url, bench.storage("az"), bench.azurite, ARCHIVER_DELTA="false")
        run_process(archiver_cmd("enqueue", "--table", "orders", "--before", "2025-01-01",
                         "--chunk-rows", str(max(1, n // 20))), env)  # fmt: skip
        run_workers(env, 1)
        total = sql(url, "SELECT count(*) FROM archive_files")[0][0]
        middle = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) - dt.timedelta(minutes=n // 2)
        day = (middle.date().isoformat(), (middle.date() + dt.timedelta(days=1)).isoformat())
        overlapping = (  # what the catalog says each can match
            "SELECT count(*) FROM archive_files WHERE min_key[1]::bigint <= $1 "
            "AND max_key[1]::bigint >= $1",
            "SELECT count(*) FROM archive_files WHERE min_cutoff_value < $2::timestamptz "
            "AND max_cutoff_value >= $1::timestamptz",
        )
        for (label, statement), (matching, args) in zip(
            (
                (f"key lookup (id = {n // 2:,})", f"SELECT * FROM orders WHERE id = {n // 2}"),
                ("one day's count", f"SELECT count(*) FROM orders WHERE created_at >= "
                                    f"'{day[0]}' AND created_at < '{day[1]}'"),
            ),
            ((overlapping[0], (n // 2,)), (overlapping[1], (dt.date.fromisoformat(day[0]),
                                                           dt.date.fromisoformat(day[1])))),
            strict=True,
        ):  # fmt: skip
            can = sql(url, matching, *args)[0][0]
            plan = run_process(archiver_cmd("query", "--with-live", "--explain", statement), env)
            read = plans.files_read(plan)
            bench.add(f"query --with-live over {n:,} archived rows (Azurite), {label}: files read",
                      read, total, "files", f"the {can} whose range matches", read == can)  # fmt: skip
            seconds = min(_seconds(env, statement) for _ in range(bench.args.repeat))
            bench.add(f"the same, {label}: a whole command", seconds, None, "s", "", None)
    finally:
        bench.dbs.drop(url)


def _seconds(env: dict[str, str], statement: str) -> float:
    started = time.monotonic()
    run_process(archiver_cmd("query", "--with-live", statement), env)
    return time.monotonic() - started
