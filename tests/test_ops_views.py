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
from tests.harness import Harness
from tests.ops_jobs import OLD_ROWS, jobs_in_every_state
from tests.support import ROOT, sql, sql_value, which_pg_bin


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
