"""Restore at scale: a day out of files of --rows rows each, against the same day out of
small files (10,000 rows), and every row back, against the floor: psql's binary
`\\copy … FROM` of the same rows into an indexed empty copy of the table. Each is
`archiver restore` as a whole command (process start-up included) moving the rows
back, with its peak RSS; ARCHIVER_DELTA=false, so no publication is waited for."""

from __future__ import annotations

import datetime as dt
import time

from bench.common import (
    CUTOFF,
    archiver_cmd,
    enqueue_orders,
    env_for,
    psql_seconds,
    run_workers,
    sql,
    start_process,
    wait_measured,
)
from bench.core import Bench

SMALL_FILES = 10_000  # rows per file of the baseline archive (at most)


def a_day(rows: int) -> tuple[str, str]:
    """24 hours (1,440 reference rows, a row a minute) around the middle row."""
    middle = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) - dt.timedelta(minutes=rows // 2)
    return (
        (middle - dt.timedelta(hours=12)).isoformat(),
        (middle + dt.timedelta(hours=12)).isoformat(),
    )


def restore_at_scale(bench: Bench) -> None:
    n, repeat = bench.args.rows, bench.args.repeat
    small_files, (lo, hi) = max(1, min(SMALL_FILES, n // 10)), a_day(n)
    day: dict[int, list[tuple[float, int]]] = {}
    for _ in range(repeat):  # interleaved
        for file_rows in (n, small_files):
            url, env = archived(bench, n, file_rows)
            try:
                day.setdefault(file_rows, []).append(restore(env, "--from", lo, "--to", hi))
            finally:
                bench.dbs.drop(url)
    big, small = min(day[n]), min(day[small_files])
    bench.add(f"restore a day (1,440 rows) out of files of {n:,} rows", big[0], small[0], "s",
              f"(reported: against the same day out of files of {small_files:,})", None)  # fmt: skip
    floor = best_floor(bench, n)
    whole = []
    for _ in range(repeat):
        url, env = archived(bench, n, n)
        try:
            whole.append(restore(env))
        finally:
            bench.dbs.drop(url)
    seconds, peak = min(whole)
    bench.add(f"floor: psql \\copy binary FROM, {n:,} rows into an indexed table", floor, None,
              "s", "", None)  # fmt: skip
    bench.add(
        f"restore every row ({n:,}) back", seconds, floor, "s", "<= 1.5x", seconds <= 1.5 * floor
    )
    mb = 1024 * 1024
    bench.add("restore's peak RSS, a day", big[1] / mb, None, "MB", "", None)
    bench.add(f"restore's peak RSS, every row ({n:,})", peak / mb, big[1] / mb, "MB",
              "flat: <= 1.10x", peak <= 1.10 * big[1])  # fmt: skip


def archived(
    bench: Bench, rows: int, file_rows: int, *, azure: bool = False
) -> tuple[str, dict[str, str]]:
    """A fresh copy of the reference rows, moved to file:// in files of `file_rows`
    (Delta publishing off), or to Azurite and published (`azure`)."""
    url = bench.dbs.copy(rows)
    if azure:
        env = env_for(url, bench.storage("az"), bench.azurite, ARCHIVER_DELTA="true")
    else:
        env = env_for(url, bench.storage("file"), None, ARCHIVER_DELTA="false")
    enqueue_orders(env, "move", "--chunk-rows", str(file_rows))
    run_workers(env, 1)  # the move, then (azure) its publication
    return url, env


def restore_published(bench: Bench) -> None:
    """A day out of files of --rows rows on Azurite, the restore publishing its change
    to the Delta table before it returns, against the same with --no-wait."""
    n, (lo, hi) = bench.args.rows, a_day(bench.args.rows)
    runs: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(bench.args.repeat):
        for wait in (True, False):
            url, env = archived(bench, n, n, azure=True)
            try:
                extra = () if wait else ("--no-wait",)
                runs[wait].append(restore(env, "--from", lo, "--to", hi, *extra)[0])
            finally:
                bench.dbs.drop(url)
    bench.add(f"restore a day out of files of {n:,} rows (Azurite), with its Delta publication",
              min(runs[True]), min(runs[False]), "s", "(reported: against --no-wait)", None)  # fmt: skip


def restore(env: dict[str, str], *args: str) -> tuple[float, int]:
    """`archiver restore --table orders …` moving rows back: (seconds, peak RSS)."""
    started = time.monotonic()
    proc = start_process(archiver_cmd("restore", "--table", "orders", *args), env, quiet=True)
    code, peak = wait_measured(proc)
    seconds = time.monotonic() - started
    if code != 0:
        raise RuntimeError(f"restore {' '.join(args)} failed")
    return seconds, peak


def best_floor(bench: Bench, rows: int) -> float:
    """psql's binary COPY FROM of the reference rows into an empty copy of orders with
    its indexes (primary key, created_at), best of --repeat."""
    url = bench.dbs.copy(rows)
    data = bench.tmp / "orders.copy"
    try:
        psql_seconds(url, f"\\copy (SELECT * FROM orders WHERE created_at < '{CUTOFF}') "
                          f"TO '{data}' (FORMAT binary)")  # fmt: skip
        runs = []
        for _ in range(bench.args.repeat):
            sql(url, "DROP TABLE IF EXISTS orders_floor")
            sql(url, "CREATE TABLE orders_floor (LIKE orders INCLUDING ALL)")
            runs.append(psql_seconds(url, f"\\copy orders_floor FROM '{data}' (FORMAT binary)"))
        return min(runs)
    finally:
        data.unlink(missing_ok=True)
        bench.dbs.drop(url)
