"""The operator views (sql/003_ops_views.sql) against real jobs in every state, and the
ready-made queries in sql/ops/ run through psql."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
from pathlib import Path
from typing import Any

import asyncpg

from archiver.db import query
from archiver.model import Queueing
from archiver.testing.cluster import which_pg_bin
from tests.support import ROOT, sql, sql_value
from tests.support.harness import Harness
from tests.support.ops_jobs import OLD_ROWS, jobs_in_every_state


def by_key(rows: list[asyncpg.Record], *keys: str) -> dict[Any, asyncpg.Record]:
    return {tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]]: r for r in rows}


def test_views_show_every_state(env: dict[str, str], database_url: str, tmp_path: Path) -> None:
    jobs = jobs_in_every_state(env, database_url, tmp_path / "worker.log")

    summary = by_key(
        sql(database_url, "SELECT * FROM archiver_job_summary"), "source_table", "status"
    )
    done = summary[("public.events", "completed")]
    assert done["jobs"] == 1 and done["rows_archived"] == OLD_ROWS
    assert done["bytes_archived"] == sql_value(
        database_url, "SELECT sum(byte_size) FROM archive_files"
    )
    assert summary[("public.doomed", "failed")]["jobs"] == 1
    assert summary[("public.later", "cancelled")]["jobs"] == 1
    queued = summary[("public.later", "queued")]
    assert queued["jobs"] == 2  # one waiting, one retrying later
    assert dt.timedelta(0) <= queued["oldest_queued_age"] < dt.timedelta(minutes=10)
    assert done["oldest_queued_age"] is None
    assert summary[("public.busy", "running")]["jobs"] == 1

    running = sql(database_url, "SELECT * FROM archiver_running_jobs")
    assert [str(r["id"]) for r in running] == [jobs.running]
    r = running[0]
    assert r["worker"] == "host:1:abc" and r["rows_done"] == 500 and r["rows_estimated"] == 1000
    assert float(r["progress_pct"]) == 50.0
    assert r["heartbeat_age"] >= dt.timedelta(seconds=5)
    assert 0 < float(r["rows_per_second"]) <= 50  # 500 rows in 10 s or more
    assert r["eta"] > dt.timedelta(0) and (r["chunks_done"], r["chunks_estimated"]) == (5, 10)

    failed = by_key(sql(database_url, "SELECT * FROM archiver_failed_jobs"), "id")
    assert sorted(str(k) for k in failed) == sorted([jobs.failed, jobs.retrying])
    gone = next(v for k, v in failed.items() if str(k) == jobs.failed)
    assert gone["status"] == "failed" and gone["attempts"] == 1 and gone["next_retry"] is None
    assert "doomed" in gone["last_error"] and gone["finished_at"] is not None
    retry = next(v for k, v in failed.items() if str(k) == jobs.retrying)
    assert retry["status"] == "queued" and retry["attempts"] == 1
    assert retry["next_retry"] == sql_value(
        database_url, "SELECT run_at FROM background_jobs WHERE id = $1::uuid", jobs.retrying
    )
    assert retry["last_error"] == "OSError: storage went away" and retry["errors_kept"] == 1

    files = sql(database_url, "SELECT * FROM archiver_archive_files")
    assert len(files) == 1
    f = files[0]
    assert f["source_table"] == "public.events" and f["files"] == 2 and f["rows"] == OLD_ROWS
    assert f["pending_files"] == 0
    first = dt.datetime(2023, 6, 1, tzinfo=dt.UTC)  # row g is created g hours after
    assert f["oldest_value"] == first + dt.timedelta(hours=1)
    assert f["newest_value"] == first + dt.timedelta(hours=OLD_ROWS)


def psql(url: str, script: str, **variables: str) -> str:
    args = [which_pg_bin("psql"), url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At"]
    for name, value in variables.items():
        args += ["-v", f"{name}={value}"]
    result = subprocess.run(
        [*args, "-f", str(ROOT / "sql" / "ops" / script)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def insert_job(url: str, status: str, table: str = "public.t", **extra: str) -> str:
    columns = ", ".join(["task_name", "payload", "status", *extra])
    values = ", ".join(
        ["'archive'", "jsonb_build_object('table', $1::text)", f"'{status}'", *extra.values()]
    )
    return str(
        sql_value(
            url, f"INSERT INTO background_jobs ({columns}) VALUES ({values}) RETURNING id", table
        )
    )


def claimable(url: str) -> list[str]:
    """What a worker would claim now: the real claim query, rolled back."""

    async def run() -> list[str]:
        conn = await asyncpg.connect(url)
        try:
            tx = conn.transaction()
            await tx.start()
            rows = await conn.fetch(query("claim_jobs"), "probe", 100)
            await tx.rollback()
            return [str(r["id"]) for r in rows]
        finally:
            await conn.close()

    return asyncio.run(run())


def test_ops_queries(h: Harness) -> None:
    url = h.url
    stuck = insert_job(url, "running", locked_by="'gone:1:x'", heartbeat_at="now()", attempts="1")
    psql(url, "requeue_stuck_job.sql", job_id=stuck)
    row = sql(url, "SELECT * FROM background_jobs WHERE id = $1::uuid", stuck)[0]
    assert (
        row["status"] == "queued" and row["locked_by"] is None and "gone:1:x" in row["last_error"]
    )

    psql(url, "cancel_job.sql", job_id=stuck)
    assert (
        sql_value(url, "SELECT status FROM background_jobs WHERE id = $1::uuid", stuck)
        == "cancelled"
    )

    paused = insert_job(url, "queued", table="public.orders")
    other = insert_job(url, "queued", table="public.events")
    psql(url, "pause_table.sql", table="public.orders")
    assert claimable(url) == [other]
    psql(url, "resume_table.sql", table="public.orders")
    assert sorted(claimable(url)) == sorted([paused, other])

    old = insert_job(url, "completed", finished_at="now() - interval '9 days'")
    recent = insert_job(url, "failed", finished_at="now() - interval '1 day'")
    out = psql(url, "purge_old_jobs.sql", days="7")
    assert old in out and recent not in out
    remaining = {r[0] for r in sql(url, "SELECT id::text FROM background_jobs")}
    assert old not in remaining and {recent, paused, other, stuck} <= remaining


# archiver_job_summary as it was (sql/003), a GROUP BY over every job: the truth the
# counted summary (sql/014) must equal after whatever happened to the jobs.
EVERY_JOB = """
SELECT payload->>'table' AS source_table, status, count(*) AS jobs,
       COALESCE(sum((progress->>'rows')::bigint), 0)::bigint AS rows_archived,
       COALESCE(sum((progress->>'bytes')::bigint), 0)::bigint AS bytes_archived
FROM background_jobs GROUP BY 1, 2
"""
SUMMARY = (
    "SELECT source_table, status, jobs, rows_archived, bytes_archived FROM archiver_job_summary"
)


def test_the_summary_counts_finished_jobs_through_every_change(h: Harness) -> None:
    """Jobs enqueued, claimed, completed by four connections at once (two tables),
    failed for good, retried, cancelled, changed while finished, inserted finished in
    bulk, pruned in batches, the counts compacted, the table truncated: after each, the
    summary equals a GROUP BY over every job, row for row."""
    from archiver.store import archive_files, jobs

    async def scenario() -> list[str]:
        pool = await asyncpg.create_pool(h.url, min_size=4, max_size=6)
        try:
            return await steps(pool)
        finally:
            await pool.close()

    async def steps(pool: asyncpg.Pool) -> list[str]:
        checked = []

        async def check(step: str) -> None:
            async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
                summary, truth = await conn.fetch(SUMMARY), await conn.fetch(EVERY_JOB)
            assert sorted(map(str, summary)) == sorted(map(str, truth)), step
            checked.append(step)

        for i in range(120):
            payload = {"table": f"public.t{i % 2}", "n": i}
            await jobs.enqueue(pool, "archive", payload, Queueing(f"j{i}", None, max_attempts=1))
        # a job without a table (as the bench's no-op jobs): its table is NULL
        await jobs.enqueue(pool, "archive", {"n": "no table"}, Queueing("none", None))
        await check("enqueued")

        async def finish(worker: str) -> None:
            while claimed := await jobs.claim_jobs(pool, worker, 3):
                for job in claimed:
                    n = job.payload["n"]
                    if n == "no table" or n % 5:
                        await jobs.complete(pool, job.id, worker, {"rows": 7, "bytes": 70})
                    else:
                        await jobs.fail_attempt(pool, job, worker, "boom")

        await asyncio.gather(*(finish(f"w{k}") for k in range(4)))
        await check("finished by four workers at once")
        failed = [
            r["id"]
            for r in await pool.fetch("SELECT id FROM background_jobs WHERE status = 'failed'")
        ]
        assert len(failed) == 24
        async with pool.acquire() as conn:
            for job_id in failed[:10]:
                await jobs.retry(conn, job_id)
            await jobs.cancel(conn, failed[0])  # queued again, then cancelled
        await check("retried and cancelled")
        await pool.execute(
            "UPDATE background_jobs SET progress = progress || '{\"rows\": 9}' "
            "WHERE status = 'completed' AND payload->>'table' = 'public.t1'"
        )
        await check("changed while finished")
        await pool.execute(
            "INSERT INTO background_jobs (task_name, payload, status, progress, finished_at) "
            "SELECT 'archive', jsonb_build_object('table', 'public.t' || (i % 3)), "
            "(ARRAY['completed', 'failed', 'cancelled'])[1 + i % 3], "
            "jsonb_build_object('rows', i, 'bytes', 2 * i), now() - interval '2 days' "
            "FROM generate_series(1, 5000) i"
        )
        await check("inserted finished in bulk")
        while await jobs.prune_finished(pool, 1, batch=1000) == 1000:
            pass
        await check("pruned in batches")
        deltas = await pool.fetchval("SELECT count(*) FROM archiver_job_counts")
        await jobs.compact_counts(pool)
        await archive_files.compact_counts(pool)
        folded = await pool.fetchval("SELECT count(*) FROM archiver_job_counts")
        assert folded < deltas and folded <= 3 * 4  # a row per table and finished status
        await check("compacted")
        await pool.execute("TRUNCATE background_jobs")
        await check("truncated")
        return checked

    assert len(asyncio.run(scenario())) == 8


# archiver_archive_files as it was (sql/003): a GROUP BY over every catalogued file.
EVERY_FILE = """
SELECT source_table,
       count(*) FILTER (WHERE state = 'committed') AS files,
       COALESCE(sum(row_count) FILTER (WHERE state = 'committed'), 0)::bigint AS rows,
       COALESCE(sum(byte_size) FILTER (WHERE state = 'committed'), 0)::bigint AS bytes,
       min(min_cutoff_value) FILTER (WHERE state = 'committed') AS oldest_value,
       max(max_cutoff_value) FILTER (WHERE state = 'committed') AS newest_value,
       count(*) FILTER (WHERE state = 'pending') AS pending_files,
       max(created_at) AS last_written_at
FROM archive_files GROUP BY source_table
"""
ADD_FILES = """
INSERT INTO archive_files (job_id, part, source_table, storage_url, path, row_count,
    byte_size, md5, key_columns, min_key, max_key, cutoff_column, min_cutoff_value,
    max_cutoff_value, state, created_at)
SELECT gen_random_uuid(), 1, 'public.t' || (g % 3), 'file:///x', $3 || g, g, 10 * g, 'x',
       '{id}', '{1}', '{2}', 'created_at', timestamptz '2020-01-01' + g * interval '1 day',
       timestamptz '2020-01-01' + g * interval '1 day' + interval '1 hour', $4,
       now() - g * interval '1 minute'
FROM generate_series($1::int, $2::int) g
"""


def test_the_archive_summary_counts_files_through_every_change(h: Harness) -> None:
    """Files catalogued pending, confirmed, retired, rewritten in place (a new size),
    published (no count changes), deleted, inserted by several connections at once,
    the counts compacted, the catalog truncated: the view equals a GROUP BY over every
    file after each."""
    from archiver.store import archive_files, jobs

    async def scenario() -> int:
        pool = await asyncpg.create_pool(h.url, min_size=4, max_size=6)
        try:
            return await steps(pool)
        finally:
            await pool.close()

    async def steps(pool: asyncpg.Pool) -> int:
        checked = 0

        async def check(step: str) -> None:
            nonlocal checked
            async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
                view = await conn.fetch("SELECT * FROM archiver_archive_files")
                truth = await conn.fetch(EVERY_FILE)
            assert sorted(map(str, view)) == sorted(map(str, truth)), step
            checked += 1

        await pool.execute(ADD_FILES, 1, 30, "pending/", "pending")
        await check("pending")
        await pool.execute("UPDATE archive_files SET state = 'committed' WHERE row_count % 2 = 0")
        await check("confirmed")
        await asyncio.gather(
            *(
                pool.execute(ADD_FILES, k * 100, k * 100 + 40, f"c{k}/", "committed")
                for k in range(4)
            )
        )
        await check("committed by four connections at once")
        await pool.execute("UPDATE archive_files SET state = 'retired' WHERE row_count % 7 = 0")
        await pool.execute(
            "UPDATE archive_files SET row_count = 1, byte_size = 2 WHERE row_count % 5 = 0"
        )
        await pool.execute("UPDATE archive_files SET publication = 3, tier = 'Cool'")
        await check("retired, rewritten, published")
        await pool.execute("DELETE FROM archive_files WHERE state = 'retired' OR row_count < 10")
        await check("deleted")
        await jobs.compact_counts(pool)
        await archive_files.compact_counts(pool)
        assert await pool.fetchval("SELECT count(*) FROM archiver_file_counts") == 3
        await check("compacted")
        await pool.execute("TRUNCATE archive_files")
        await check("truncated")
        return checked

    assert asyncio.run(scenario()) == 7
