"""Scale: big moves split over workers, and jobs whose cost must follow the rows they
archive, not the table: a daily-style job (the oldest 0.1% of the rows) on tables of
growing size, its time and the tuples PostgreSQL read for it side by side."""

from __future__ import annotations

import functools
import re
import time

from archiver.testing.plans import files_read
from bench.common import (
    CUTOFF,
    archiver_cmd,
    best,
    env_for,
    job_seconds,
    run_process,
    run_workers,
    sql,
)
from bench.core import Bench

DAILY_SHARE = 1_000  # a daily-style job takes 1/1000 of the table
PER_ROW = 10  # tuples read per archived row, at most (issue 34)
ALLOWANCE = 1_000  # and a fixed allowance (a chunk's look past its end, the planner)

READ = """
SELECT (SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
        FROM pg_stat_user_tables WHERE relid = 'orders'::regclass),
       (SELECT coalesce(sum(idx_tup_read), 0)::bigint
        FROM pg_stat_user_indexes WHERE relid = 'orders'::regclass)
"""


def scale(bench: Bench) -> None:
    big_moves(bench)
    daily_jobs(bench)
    query_in_place(bench)


def big_moves(bench: Bench) -> None:
    """All rows moved, --parallel 2 over one and two workers; per 1M rows against the
    data section's table, with the workers' peak RSS and the WAL per row."""
    n, big = bench.args.rows, bench.args.big_rows
    small = min((bench.archive_move(n, 2, 2) for _ in range(bench.args.repeat)), key=lambda m: m[0])
    one = best(bench.args.repeat, lambda: bench.archive_move(big, 1, 2)[0])
    bench.add(f"move {big:,} rows, --parallel 2, 1 worker", one, None, "s", "", None)
    two, peak, wal = min(
        (bench.archive_move(big, 2, 2) for _ in range(bench.args.repeat)), key=lambda m: m[0]
    )
    bench.add(f"move {big:,} rows, --parallel 2, 2 workers", two, one, "s",
              f"speed-up {one / two:.2f}x (reported)", None)  # fmt: skip
    per, per_small = two / big * 1e6, small[0] / n * 1e6
    bench.add(f"  the same, per 1M rows, against {n:,} rows", per, per_small, "s",
              "<= 1.10x", per <= 1.10 * per_small)  # fmt: skip
    mb = 1024 * 1024
    bench.add(f"  its workers' peak RSS, against {n:,} rows", peak / mb, small[1] / mb, "MB",
              "<= 1.10x", peak <= 1.10 * small[1])  # fmt: skip
    bench.add(f"  its WAL per row, against {n:,} rows", wal / big, small[2] / n, "B",
              "<= 1.10x", wal / big <= 1.10 * small[2] / n)  # fmt: skip


def daily_jobs(bench: Bench) -> None:
    """The oldest 0.1% of the reference table (its highest keys) in one job, moved and
    copied, on each of --scale-rows: the job's own time and the heap tuples and index
    entries PostgreSQL read of the table (pg_stat_user_tables, pg_stat_user_indexes)
    from enqueue to the worker's exit."""
    first: dict[str, float] = {}
    for rows in bench.args.scale_rows:
        old = max(1, rows // DAILY_SHARE)
        url = bench.dbs.copy(rows)
        try:
            # row g was created g minutes before 2025-01-01: the oldest are the last
            cutoff = sql(url, "SELECT created_at::text FROM orders WHERE id = $1", rows - old)[0][0]
            env = env_for(url, bench.storage("az"), bench.azurite)
            for mode in ("copy", "move"):
                before = sql(url, READ)[0]
                run_process(archiver_cmd("enqueue", "--table", "orders", "--before", cutoff, "--mode", mode),
                    env)  # fmt: skip
                run_workers(env, 1)
                seconds = job_seconds(url)
                after = sql(url, READ)[0]
                read = int(after[0] - before[0]) + int(after[1] - before[1])
                label = f"daily-style {mode}, {old:,} of {rows:,} rows"
                bench.add(f"{label}: job time", seconds, None, "s", "", None)
                # the job archives 0.1% of each table: flat is its time per archived row
                per = seconds / old * 1000
                base = first.setdefault(mode, per)
                bench.add(f"{label}: job time per 1,000 archived rows", per, base, "s",
                          "flat: <= 1.5x" if per != base else "(the baseline)",
                          None if per == base else per <= 1.5 * base)  # fmt: skip
                limit = 2 * (PER_ROW * old + ALLOWANCE)  # heap tuples and index entries
                bench.add(f"{label}: tuples + index entries read", read, old, "",
                          f"<= {2 * PER_ROW} per row + {2 * ALLOWANCE:,}", read <= limit)  # fmt: skip
        finally:
            bench.dbs.drop(url)


def query_in_place(bench: Bench) -> None:
    """`archiver query` over a moved table's Delta table: a key lookup and a one-day range
    count read only the files whose statistics match (files read of the table's, from
    DuckDB's EXPLAIN ANALYZE), timed as whole commands against a full count."""
    n = bench.args.rows
    url = bench.dbs.copy(n)
    try:
        env = env_for(url, bench.storage("az"), bench.azurite)
        key = n // 2
        # the day of the middle row: a day with rows at every --rows
        day, next_day = sql(
            url,
            "SELECT created_at::date::text, (created_at::date + 1)::text FROM orders WHERE id = $1",
            key,
        )[0]
        chunk = str(max(100, n // 20))  # 20 files
        run_process(archiver_cmd("enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", chunk),
            env)  # fmt: skip
        run_workers(env, 1)
        job_seconds(url)
        queries = {
            f"key lookup (id = {key:,})": f"SELECT * FROM orders WHERE id = {key}",
            f"one day's count ({day})": "SELECT count(*) FROM orders WHERE created_at >= "
            f"'{day}' AND created_at < '{next_day}'",
        }
        full = best(bench.args.repeat, lambda: _query_seconds(env, "SELECT count(*) FROM orders"))
        bench.add(f"archiver query, full count of {n:,} archived rows", full, None, "s", "", None)
        for label, sql_text in queries.items():
            seconds = best(bench.args.repeat, functools.partial(_query_seconds, env, sql_text))
            read, total = _files_read(env, url, sql_text)
            bench.add(f"archiver query, {label}: {read} of {total} files read", seconds, full,
                      "s", "(reported; a whole command, DuckDB's start included)", None)  # fmt: skip
    finally:
        bench.dbs.drop(url)


def _query_seconds(env: dict[str, str], sql_text: str) -> float:
    started = time.perf_counter()
    run_process(archiver_cmd("query", sql_text), env)
    return time.perf_counter() - started


def _files_read(env: dict[str, str], url: str, sql_text: str) -> tuple[int, int]:
    """(files the query read, files catalogued): a file the catalog ruled out, or DuckDB
    by its ranges, is not read (a Delta scan says its own count)."""
    out = run_process(archiver_cmd("query", "--explain", sql_text), env)
    total = int(sql(url, "SELECT count(*) FROM archive_files WHERE state = 'committed'")[0][0])
    found = re.search(r"Scanning Files: (\d+)/(\d+)", out)
    if found is not None:
        return int(found.group(1)), int(found.group(2))
    if "READ_PARQUET" not in out:
        if "EMPTY_RESULT" in out:  # DuckDB ruled every file out from its statistics
            return 0, total
        raise RuntimeError(f"no file read in DuckDB's plan:\n{out}")
    return files_read(out), total
