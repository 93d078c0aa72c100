"""The queue: claim latency, the batch shortcut, and the fixed cost of a real job."""

from __future__ import annotations

import asyncio
import statistics
import time

import asyncpg

from bench.common import (
    CUTOFF,
    archiver_cmd,
    enqueue_archive,
    env_for,
    job_seconds,
    run_workers,
    sql,
    start_process,
)
from bench.core import Bench


def queue(bench: Bench) -> None:
    url = bench.dbs.copy(bench.args.queue_template_rows)
    env = env_for(url, bench.storage("file"), None, ARCHIVER_POLL_INTERVAL="30")
    latencies = asyncio.run(claim_latencies(env, bench.args.latency_jobs))
    p50 = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    bench.add(
        "enqueue -> claimed p50 (idle workers)",
        p50 * 1000,
        None,
        "ms",
        "<= 10 ms",
        p50 <= 0.010,
    )
    bench.add(
        "enqueue -> claimed p99 (idle workers)",
        p99 * 1000,
        None,
        "ms",
        "<= 50 ms",
        p99 <= 0.050,
    )
    jobs = bench.args.noop_jobs
    sql(url, "INSERT INTO background_jobs (task_name, payload) "
              "SELECT 'noop', '{}' FROM generate_series(1, $1::int)", jobs)  # fmt: skip
    run_workers(env, 4, "--concurrency", "64")
    noop = jobs / job_seconds(url)
    bench.add("no-op jobs, batch shortcut (no real job takes it), 4 workers", noop, None,
             "jobs/s", "(reported)", None)  # fmt: skip
    bench.dbs.drop(url)
    one_row_jobs(bench)


def one_row_jobs(bench: Bench) -> None:
    """The fixed cost of a job, and the queue through the path real jobs take: archive
    jobs of one row each (claim, the job's thread, its connections and checks, one
    chunk, complete)."""
    url = bench.dbs.copy(bench.args.queue_template_rows)
    # the queue's own cost: no publish job after each (the data section times publishing)
    env = env_for(url, bench.storage("file"), None, ARCHIVER_DELTA="false")
    tables = bench.args.one_row_tables
    sql(url, "DELETE FROM orders")
    for i in range(tables):
        sql(url, f"CREATE TABLE t{i} (LIKE orders INCLUDING ALL)")
        sql(url, f"INSERT INTO t{i} (id, created_at) VALUES (1, '2020-01-01')")
    # idle worker, one job at a time: claim -> completed of each (server clock),
    # the completion polled every 10 ms over one connection; every other job polled
    # as this bench did before 2026-11-23, over a new connection each time: a backend
    # forked every 10 ms on the worker's two cores, 53 against 47 ms in a trial
    worker = start_process(archiver_cmd("worker"), env)
    loop = asyncio.new_event_loop()
    poller = loop.run_until_complete(asyncpg.connect(url))
    done_query = (
        "SELECT extract(epoch FROM finished_at - started_at)::float8 "
        "FROM background_jobs WHERE status = 'completed' AND payload->>'table' = $1"
    )
    costs: tuple[list[float], list[float]] = ([], [])
    try:
        for i in range(min(tables, 40)):
            table, reconnecting = f"public.t{i}", i % 2 == 1
            enqueue_archive(url, table, CUTOFF)
            while not (done := (
                sql(url, done_query, table) if reconnecting
                else loop.run_until_complete(poller.fetch(done_query, table))
            )):  # fmt: skip
                time.sleep(0.01)
            costs[reconnecting].append(float(done[0][0]))
    finally:
        loop.run_until_complete(poller.close())
        loop.close()
        worker.terminate()
        worker.wait(30)
    cost = statistics.median(costs[0])
    bench.add("one-row archive job, claim -> completed (idle worker, median)", cost * 1000,
             None, "ms", "<= 50 ms", cost <= 0.050)  # fmt: skip
    polled = statistics.median(costs[1])
    bench.add("the same, polled over a new connection every 10 ms (as before 2026-11-23)",
             polled * 1000, None, "ms", "(reported)", None)  # fmt: skip
    job_seconds(url)  # mark them measured
    for i in range(tables):
        sql(url, f"INSERT INTO t{i} (id, created_at) VALUES (2, '2020-01-01')")
        sql(url, f"INSERT INTO t{i} (id, created_at) VALUES (3, '2021-01-01')")
    for i in range(tables):  # two jobs a table (two cutoffs): real jobs, queued at once
        for before in ("2020-06-01 00:00:00+00", CUTOFF):
            enqueue_archive(url, f"public.t{i}", before)
    run_workers(env, 2, "--concurrency", "4")
    rate = 2 * tables / job_seconds(url)
    bench.add(f"one-row archive jobs, 2 workers x 4, {2 * tables} jobs", rate, None, "jobs/s",
             "(reported: the queue's real-path figure)", None)  # fmt: skip
    bench.dbs.drop(url)


async def claim_latencies(env: dict[str, str], jobs: int) -> list[float]:
    """Enqueue no-op jobs one by one to two idle workers (LISTEN/NOTIFY, a 30 s poll
    interval so polling cannot help); claim time minus enqueue time, server clock."""
    url = env["ARCHIVER_DATABASE_URL"]
    procs = [start_process(archiver_cmd("worker"), env) for _ in range(2)]
    conn = await asyncpg.connect(url)
    try:
        while await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query ILIKE 'LISTEN%'"
        ) < 2:  # fmt: skip
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        for _ in range(jobs):
            await conn.execute(
                "INSERT INTO background_jobs (task_name, payload) VALUES ('noop', '{}')"
            )
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        rows = await conn.fetch(
            "SELECT extract(epoch FROM started_at - created_at)::float8 FROM background_jobs "
            "WHERE task_name = 'noop'"
        )
        if len(rows) != jobs or any(r[0] is None for r in rows):
            raise RuntimeError("not every no-op job was claimed")
        await conn.execute(
            "UPDATE background_jobs SET progress = '{\"bench_seen\": true}' "
            "WHERE task_name = 'noop'"
        )
        return [float(r[0]) for r in rows]
    finally:
        await conn.close()
        for proc in procs:
            proc.terminate()
            proc.wait(30)
