"""The queue and the catalog at scale: the operator's commands, the views and the claim
with 1,000 finished jobs and 1,000 catalogued files, then again with 1,000,000 and
100,000 (each timed as a whole command, median of --repeat, against its own figure at
the small size in the same run), the plans of their queries (an index, not a scan), and
the pruning of a million finished jobs in bounded batches."""

from __future__ import annotations

import asyncio
import statistics
import time

import asyncpg

from bench.common import (
    CUTOFF,
    archiver_cmd,
    env_for,
    job_seconds,
    run_process,
    run_workers,
    sql,
    start_process,
)
from bench.core import Bench
from bench.jobs import claim_latencies

# Within 2x of its time at the small size, unless named (issue 39: status within 1.2x).
BOUNDS = {"archiver status": 1.2}
VIEWS = ("archiver_job_summary", "archiver_running_jobs", "archiver_failed_jobs",
         "archiver_archive_files", "archiver_paused")  # fmt: skip

# finished within the last 12 days: inside the retention, so no pruner runs meanwhile
FILL_JOBS = """
INSERT INTO background_jobs (task_name, payload, status, attempts, claims, created_at,
                             run_at, started_at, finished_at, progress, last_error)
SELECT 'archive',
       jsonb_build_object('table', 'public.t' || (g % 200), 'column', 'created_at',
                          'cutoff', '2024-01-01T00:00:00+00:00', 'mode', 'move'),
       CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'completed' END, 1, 1,
       now() - g * interval '1 second', now() - g * interval '1 second',
       now() - g * interval '1 second', now() - g * interval '1 second' + interval '1 second',
       jsonb_build_object('rows', 1000, 'bytes', 40000, 'files', 1),
       CASE WHEN g % 50 = 0 THEN 'storage unreachable' END
FROM generate_series($1::int, $2::int) g
"""
FILL_FILES = """
INSERT INTO archive_files (job_id, part, source_table, storage_url, path, row_count,
    byte_size, md5, key_columns, min_key, max_key, cutoff_column, min_cutoff_value,
    max_cutoff_value, delta)
SELECT gen_random_uuid(), 1, 'public.t' || (g % 200), 'file:///elsewhere',
       'public.t' || (g % 200) || '/job-' || g || '-a001-part-00001.parquet', 1000, 40000,
       'x', '{id}', ARRAY[(g * 1000)::text], ARRAY[(g * 1000 + 999)::text], 'created_at',
       timestamptz '2015-01-01' + g * interval '1 hour',
       timestamptz '2015-01-01' + g * interval '1 hour' + interval '59 minutes', false
FROM generate_series($1::int, $2::int) g
"""


def one_real_job(bench: Bench) -> tuple[str, dict[str, str]]:
    """A database holding the reference table with one row, archived by one real job
    into one file: (its URL, the environment to run archiver in)."""
    url = bench.dbs.copy(1)
    env = env_for(url, bench.storage("file"), None, ARCHIVER_POLL_INTERVAL="30",
                  ARCHIVER_DELTA="false")  # fmt: skip
    run_process(archiver_cmd("enqueue", "--table", "orders", "--before", CUTOFF), env)
    run_workers(env, 1)
    return url, env


def catalog_at_scale(bench: Bench) -> None:
    (small_jobs, small_files), (big_jobs, big_files) = bench.args.catalog_sizes
    url, env = one_real_job(bench)
    try:
        job_seconds(url)
        job = sql(url, "SELECT id::text FROM background_jobs")[0][0]
        commands = {
            "archiver status": ["status"],
            "archiver jobs": ["jobs"],
            "archiver jobs --status failed --table t7": ["jobs", "--status", "failed", "--table", "t7"],
            "archiver show (a job)": ["show", job],
            "restore planning (--dry-run --table orders)": [
                "restore", "--table", "orders", "--dry-run"],
            "archiver verify --table orders": ["verify", "--table", "orders"],
        }  # fmt: skip
        figures: dict[str, list[float]] = {}
        runs = 1 if bench.args.quick else max(bench.args.repeat, 3)  # a median of 3
        for jobs, files in bench.args.catalog_sizes:
            _fill(url, jobs, files)
            for label, args in commands.items():
                figures.setdefault(label, []).append(_command_ms(env, args, runs))
            for view in VIEWS:
                figures.setdefault(f"SELECT * FROM {view}", []).append(
                    _query_ms(url, f"SELECT * FROM {view}", bench.args.repeat)
                )
            latencies = asyncio.run(claim_latencies(env, bench.args.latency_jobs))
            sql(url, "DELETE FROM background_jobs WHERE task_name = 'noop'")
            figures.setdefault("claim p50", []).append(statistics.median(latencies) * 1000)
            p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
            figures.setdefault("claim p99", []).append(p99 * 1000)
        size = f"{big_jobs:,} jobs / {big_files:,} files"
        for label, (small, big) in figures.items():
            bound = BOUNDS.get(label, 2.0)
            bench.add(f"{label}, {size}", big, small, "ms",
                      f"<= {bound}x (at {small_jobs:,} / {small_files:,})",
                      big <= bound * max(small, 1.0))  # fmt: skip
        _prune(bench, url, big_jobs)
    finally:
        bench.dbs.drop(url)


def _fill(url: str, jobs: int, files: int) -> None:
    """Finished jobs and catalogued files (of other tables) up to `jobs` and `files`."""
    have_jobs = sql(url, "SELECT count(*) FROM background_jobs")[0][0]
    have_files = sql(url, "SELECT count(*) FROM archive_files")[0][0]
    sql(url, FILL_JOBS, have_jobs + 1, jobs)
    sql(url, FILL_FILES, have_files + 1, files)
    sql(url, "VACUUM ANALYZE background_jobs")
    sql(url, "VACUUM ANALYZE archive_files")


def _command_ms(env: dict[str, str], args: list[str], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        run_process(archiver_cmd(*args), env, quiet=True)
        runs.append((time.perf_counter() - started) * 1000)
    return statistics.median(runs)


def _query_ms(url: str, query: str, repeat: int) -> float:
    async def run() -> float:
        conn = await asyncpg.connect(url)
        try:
            runs = []
            for _ in range(max(repeat, 3)):
                started = time.perf_counter()
                await conn.fetch(query)
                runs.append((time.perf_counter() - started) * 1000)
            return statistics.median(runs)
        finally:
            await conn.close()

    return asyncio.run(run())


def _prune(bench: Bench, url: str, jobs: int) -> None:
    """Every finished job pruned in the pruner's batches: the whole time, and the
    longest batch (each its own transaction: the longest any row lock is held)."""
    from archiver.db import query

    sql(url, "UPDATE background_jobs SET finished_at = now() - interval '30 days'")

    async def run() -> tuple[float, float, int]:
        conn = await asyncpg.connect(url)
        try:
            longest, total, batches = 0.0, time.perf_counter(), 0
            while True:
                started = time.perf_counter()
                status = await conn.execute(query("prune_finished"), 86400.0, 1000)
                longest = max(longest, time.perf_counter() - started)
                batches += 1
                if int(status.split()[-1]) < 1000:
                    return time.perf_counter() - total, longest, batches
        finally:
            await conn.close()

    total, longest, batches = asyncio.run(run())
    bench.add(f"prune {jobs:,} finished jobs, {batches:,} batches of 1,000", total, None, "s",
              "(reported)", None)  # fmt: skip
    bench.add("  its longest batch (one transaction)", longest * 1000, None, "ms",
              "<= 500 ms", longest <= 0.5)  # fmt: skip


def many_tables(bench: Bench) -> None:
    """Policies on many small tables, all firing at one slot from one scheduler, and two
    workers draining their jobs: how late the slots were queued, the real-path throughput
    and the queue database's transactions per job."""
    tables = bench.args.policy_tables
    url = bench.dbs.copy(1)
    config = bench.tmp / "policies.toml"
    try:
        for i in range(tables):
            sql(url, f"CREATE TABLE p{i} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
            sql(url, f"CREATE INDEX ON p{i} (created_at)")
        started = time.time()
        fire = (int(started) + 20) % 60  # a second ~20 s from now, every minute
        config.write_text("".join(
            f'[[policy]]\nname = "p{i}"\ntable = "p{i}"\nolder_than = "1 days"\n'
            f'schedule = "{fire} * * * * *"\n\n' for i in range(tables)))  # fmt: skip
        env = env_for(url, bench.storage("file"), None, ARCHIVER_CONFIG=str(config))
        xacts = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
        scheduler = start_process(archiver_cmd("scheduler"), env)
        workers = [start_process(archiver_cmd("worker"), env) for _ in range(2)]
        # The scheduler queues the slot it missed before it started at once: once those
        # jobs are done (they find nothing), each table gets ten old rows for the slot.
        missed = ("SELECT count(*) FROM background_jobs WHERE task_name = 'archive' "
                  "AND status = 'completed' AND slot_at <= to_timestamp($1)")  # fmt: skip
        wait = time.monotonic() + 15
        while sql(url, missed, started)[0][0] < tables and time.monotonic() < wait:
            time.sleep(0.2)
        for i in range(tables):
            sql(url, f"INSERT INTO p{i} SELECT g, timestamptz '2020-01-01' + g * interval '1 day' "
                     "FROM generate_series(1, 10) g")  # fmt: skip
        before = sql(url, xacts)[0][0]  # from here: the slot's jobs, and idle polling
        polls = 0
        deadline = time.monotonic() + 180
        # the slot ~20 s from now (the scheduler also queues the slot it missed before it
        # started, at once): all its jobs completed
        done = ("SELECT count(*) FROM background_jobs WHERE task_name = 'archive' "
                "AND status = 'completed' AND slot_at > to_timestamp($1)")  # fmt: skip
        while sql(url, done, started)[0][0] < tables and time.monotonic() < deadline:
            polls += 1  # each the bench's own transaction, taken off below
            time.sleep(0.2)
        for proc in (scheduler, *workers):
            proc.terminate()
            proc.wait(30)
        after = sql(url, xacts)[0][0] - polls - 1
        lag, span, jobs = sql(url, """
            SELECT max(extract(epoch FROM created_at - slot_at))::float8,
                   extract(epoch FROM max(finished_at) - min(started_at))::float8,
                   count(*) FILTER (WHERE status = 'completed')
            FROM background_jobs WHERE task_name = 'archive' AND slot_at > to_timestamp($1)""",
            started)[0]  # fmt: skip
        if jobs < tables:
            raise RuntimeError(f"{jobs} of {tables} policy jobs completed")
        left = sum(sql(url, f"SELECT count(*) FROM p{i}")[0][0] for i in range(tables))
        if left:
            raise RuntimeError(f"{left} rows of the policies' tables were not archived")
        bench.add(f"{tables} policies, one slot: the latest job queued after its slot",
                  lag * 1000, None, "ms", "(reported)", None)  # fmt: skip
        bench.add(f"{tables} policy jobs, 2 workers, first claim -> last completion",
                  tables / span, None, "jobs/s", "(reported)", None)  # fmt: skip
        bench.add("  the database's transactions per job (scheduler, workers, publish, idle polls)",
                  (after - before) / tables, None, "", "(reported)", None)  # fmt: skip
    finally:
        bench.dbs.drop(url)
