"""Issue 6: an archive split into key ranges taken by several workers, the no-op task,
and claims of several jobs per round trip."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path

import asyncpg
import pytest

from archiver.model import ArchiveRequest, Job, Mode, Queueing
from archiver.store import jobs
from archiver.testing.reference import seed_orders
from tests.support import (
    archiver_cmd,
    kill_at_failpoint,
    sql,
    sql_value,
    start_process,
    start_worker,
)
from tests.support.harness import Harness

CUTOFF = "2024-12-20"


@pytest.mark.slow
def test_parallel_ranges_move_each_row_exactly_once(h: Harness) -> None:
    seed_orders(h.url, 30_000)
    expected = {r["id"] for r in h.sql(f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'")}
    result = h.cli("enqueue", "--table", "orders", "--before", CUTOFF, "--parallel", "3",
        "--chunk-rows", "4000",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ids = result.stdout.split()
    assert len(ids) == 3 and "3 jobs" in result.stderr
    rows = h.sql("SELECT payload, lock_key FROM background_jobs ORDER BY lock_key")
    assert len({j["lock_key"] for j in rows}) == 3  # the parts may run at once
    assert len({j["payload"] for j in rows}) == 3

    log = h.tmp / "workers.log"
    workers = [start_worker(h.env, "--burst", "--concurrency", "2", log=log) for _ in range(2)]
    for w in workers:
        assert w.wait(timeout=240) == 0, log.read_text()

    assert h.value("SELECT count(*) FROM background_jobs WHERE status <> 'completed'") == 0
    ranged = h.value(
        "SELECT count(DISTINCT payload->>'group') FROM background_jobs WHERE payload ? 'key_range'",
    )
    assert ranged == 1
    h.exactly_once(expected)
    assert h.value(f"SELECT count(*) FROM orders WHERE created_at < '{CUTOFF}'") == 0


def test_a_parallel_jobs_progress_estimates_its_own_range(h: Harness) -> None:
    """archiver_running_jobs after the first chunk of one of three key ranges: its
    estimates are of its range's rows, not the whole table's (15.7% done where 47% was)."""
    seed_orders(h.url, 30_000)
    result = h.cli("enqueue", "--table", "orders", "--before", CUTOFF, "--parallel", "3",
        "--chunk-rows", "2000",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    kill_at_failpoint(h.env, "after_commit", h.tmp / "worker.log")
    (row,) = h.sql("SELECT * FROM archiver_running_jobs")
    bounds = json.loads(
        h.value("SELECT payload->>'key_range' FROM background_jobs WHERE id = $1",
                  row["id"])
    )  # fmt: skip
    assert bounds["parts"] == 3
    left = h.value(
        "SELECT count(*) FROM orders WHERE created_at < $1::timestamptz"
        " AND ($2::bigint IS NULL OR id > $2::bigint) AND ($3::bigint IS NULL OR id <= $3::bigint)",
        dt.datetime.fromisoformat(CUTOFF).replace(tzinfo=dt.UTC),
        bounds["after"] and int(bounds["after"]),
        bounds["through"] and int(bounds["through"]),
    )
    in_range = left + row["rows_done"]  # those its first chunk moved are gone
    assert 0.8 * in_range <= row["rows_estimated"] <= 1.25 * in_range, (row, in_range)
    assert row["chunks_estimated"] == -(-row["rows_estimated"] // 2000)
    assert 25 < row["progress_pct"] < 75, (row["rows_done"], row["rows_estimated"])


def test_parallel_refuses_a_multi_column_key(h: Harness) -> None:
    h.sql(
        "CREATE TABLE pairs (a int, b int, created_at date NOT NULL, PRIMARY KEY (a, b))",
    )
    result = h.cli("enqueue", "--table", "pairs", "--before", CUTOFF, "--parallel", "2")
    assert result.returncode != 0
    assert result.stderr.startswith("archiver: error: ") and "one-column key" in result.stderr
    assert h.value("SELECT count(*) FROM background_jobs") == 0


def test_noop_jobs_complete_in_batches(
    env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    sql(
        database_url,
        "INSERT INTO background_jobs (task_name, payload) "
        "SELECT 'noop', '{}' FROM generate_series(1, 300)",
    )
    env = {**env, "ARCHIVER_STORAGE_URL": f"file://{tmp_path}/files"}
    log = tmp_path / "worker.log"
    worker = start_process(
        archiver_cmd("-v", "worker", "--burst", "--concurrency", "50"), env, log=log
    )
    assert worker.wait(timeout=120) == 0, log.read_text()
    rows = sql(database_url, "SELECT status, attempts, locked_by FROM background_jobs")
    assert {(r["status"], r["attempts"], r["locked_by"]) for r in rows} == {("completed", 1, None)}
    assert "completed 50 no-op jobs" in log.read_text()


def test_claim_takes_several_jobs_but_one_per_lock_key(h: Harness) -> None:
    async def scenario() -> tuple[list[Job], list[Job], int]:
        pool = await asyncpg.create_pool(h.url, min_size=1, max_size=2)
        try:
            for i in range(3):
                await jobs.enqueue(pool, "archive", {"n": i}, Queueing(f"a{i}", "table:t"))
            for i in range(3):
                await jobs.enqueue(pool, "archive", {"n": i}, Queueing(f"b{i}", None))
            first = await jobs.claim_jobs(pool, "w1", 10)
            second = await jobs.claim_jobs(pool, "w2", 10)
            done = await jobs.complete_many(pool, [j.id for j in first], "w2")  # not w2's
            return first, second, done
        finally:
            await pool.close()

    first, second, wrong_owner = asyncio.run(scenario())
    assert len(first) == 4  # three without a lock key, one of the three sharing table:t
    assert {j.locked_by for j in first} == {"w1"}
    assert second == []  # table:t is running: its other jobs wait
    assert wrong_owner == 0  # a finishing write only touches the claimer's own jobs


def test_burst_worker_runs_jobs_held_back_by_their_tables_running_job(
    env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    """Three jobs for one table, queued at once: while one runs, the others cannot be
    claimed. A burst worker once ended when its running job finished between a claim that
    found nothing and the check after it (a CI run lost two jobs so); the failpoint holds
    that window open for a second, long enough for every job to finish inside it."""
    cutoffs = ("2020-06-01", "2021-06-01", "2022-06-01")
    sql(database_url, "CREATE TABLE t (id int PRIMARY KEY, created_at date NOT NULL)")
    sql(database_url, "INSERT INTO t VALUES (1, '2020-01-01'), (2, '2021-01-01'), "
                      "(3, '2022-01-01')")  # fmt: skip
    for before in cutoffs:
        request = ArchiveRequest("public.t", "created_at", before, Mode.MOVE)
        dedup_key, lock_key = request.keys()
        sql(database_url, "INSERT INTO background_jobs (task_name, payload, dedup_key, lock_key) "
                          "VALUES ('archive', $1::jsonb, $2, $3)",
            json.dumps(request.payload()), dedup_key, lock_key)  # fmt: skip
    env = {
        **env,
        "ARCHIVER_STORAGE_URL": f"file://{tmp_path}/files",
        "ARCHIVER_FAILPOINTS": "claim_found_nothing=sleep:1",
    }
    log = tmp_path / "worker.log"
    worker = start_worker(env, "--burst", "--concurrency", "4", log=log)
    assert worker.wait(timeout=120) == 0, log.read_text()
    statuses = sql(database_url, "SELECT status FROM background_jobs WHERE task_name = 'archive'")
    assert [r["status"] for r in statuses] == ["completed"] * 3, log.read_text()
    assert not sql_value(
        database_url, "SELECT count(*) FROM background_jobs WHERE status <> 'completed'"
    )
    assert sql_value(database_url, "SELECT count(*) FROM t") == 0
