"""A job's life in the queue under load and by an operator's hand: many workers and
jobs at once, cancel and retry, backoff then failure, a retry sweeping what failed
attempts uploaded, retention of finished jobs, and refusals of bad job ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import Azurite
from tests.support import (
    assert_refused,
    fast_env,
    job_row,
    run_cli,
    sql_value,
    start_worker,
    wait_for_status,
    wait_until,
)
from tests.support.crash import blob_etags, enqueue, old_ids, stop
from tests.support.exactly_once import assert_exactly_once
from tests.support.harness import Harness


@pytest.mark.slow
def test_four_workers_two_hundred_jobs(h: Harness) -> None:
    import asyncio

    import asyncpg

    from archiver.model import ArchiveRequest, Mode, Queueing
    from archiver.store import jobs

    tables = 50
    for t in range(tables):
        h.sql(f"CREATE TABLE t{t} (id bigint PRIMARY KEY, created_at date NOT NULL)")
        h.sql(
            f"INSERT INTO t{t} SELECT g, date '2020-01-01' + g FROM generate_series(1, 8) g",
        )

    async def enqueue_all() -> list[str]:
        conn = await asyncpg.connect(h.url)
        ids = []
        for t in range(tables):
            for day in (3, 5, 7, 9):  # four jobs per table, serialised by the table's lock
                cutoff = f"2020-01-{day:02d}T00:00:00+00:00"
                request = ArchiveRequest(f"public.t{t}", "created_at", cutoff, Mode.MOVE)
                how = Queueing(f"t{t}:{day}", f"table:public.t{t}")
                job_id, _ = await jobs.enqueue(conn, request.KIND, request.payload(), how)
                ids.append(str(job_id))
        await conn.close()
        return ids

    assert len(set(asyncio.run(enqueue_all()))) == 200
    log = h.tmp / "w.log"
    workers = [start_worker(h.env, "--burst", "--concurrency", "2", log=log) for _ in range(4)]
    for w in workers:
        assert w.wait(300) == 0
    rows = h.sql("SELECT status, attempts FROM background_jobs WHERE task_name = 'archive'")
    assert [r["status"] for r in rows] == ["completed"] * 200
    assert not h.value("SELECT count(*) FROM background_jobs WHERE status <> 'completed'")
    assert all(r["attempts"] == 1 for r in rows)
    claims = [line for line in log.read_text().splitlines() if ": claimed" in line]
    every = h.value("SELECT count(*) FROM background_jobs")  # with their publish jobs
    assert len(claims) == every and len({c.split("job ")[1].split(":")[0] for c in claims}) == every
    # Rows dated before the last cutoff (2020-01-09) moved once each; the 8th row stays.
    assert h.value("SELECT sum(row_count) FROM archive_files") == tables * 7
    assert h.value("SELECT count(DISTINCT (source_table, min_key)) FROM archive_files") == h.value(
        "SELECT count(*) FROM archive_files"
    )
    for t in range(tables):
        assert h.value(f"SELECT count(*) FROM t{t}") == 1


@pytest.mark.slow
def test_cancel_at_chunk_boundary_then_retry(
    fast: dict[str, str], database_url: str, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    seed_orders(database_url, 20_000)
    expected = old_ids(database_url)
    env = {**fast, "ARCHIVER_FAILPOINTS": "after_commit=sleep:0.5", "ARCHIVER_POLL_INTERVAL": "30"}
    job_id = enqueue(env)
    log = tmp_path / "w.log"
    w = start_worker(env, log=log)
    wait_until(
        lambda: sql_value(database_url, "SELECT count(*) FROM archive_files") >= 1,
        60,
        what="a chunk",
    )
    result = run_cli(env, "cancel", job_id)
    assert result.returncode == 0 and "next chunk boundary" in result.stdout
    row = wait_for_status(database_url, job_id, "cancelled", timeout=10)
    files = sql_value(database_url, "SELECT count(*) FROM archive_files")
    assert 1 <= files < 5 and json.loads(row["progress"])["files"] == files
    # Chunks already committed stay archived; the rest stays in the table.
    assert len(old_ids(database_url)) == len(expected) - sql_value(
        database_url, "SELECT sum(row_count) FROM archive_files"
    )
    assert run_cli(env, "retry", job_id).returncode == 0
    wait_for_status(database_url, job_id, "completed")
    assert stop(w) == 0
    assert_exactly_once(database_url, azurite.connection_string, container, expected)


def test_failed_attempts_back_off_then_fail_keeping_errors(
    h: Harness, fast: dict[str, str]
) -> None:
    h.sql("CREATE TABLE gone (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
    result = run_cli(
        fast, "enqueue", "--table", "gone", "--before", "2024-01-01", "--max-attempts", "3"
    )
    job_id = result.stdout.strip()
    h.sql("DROP TABLE gone")
    w = start_worker(fast)
    row = h.wait_for(job_id, "failed", timeout=60)
    assert stop(w) == 0
    errors = json.loads(row["errors"])
    assert row["attempts"] == 3 and len(errors) == 3
    assert "not found" in row["last_error"]
    assert [e["attempt"] for e in errors] == [1, 2, 3]
    retried = run_cli(fast, "retry", job_id)
    assert retried.returncode == 0 and job_row(h.url, job_id)["status"] == "queued"


@pytest.mark.slow
def test_a_retried_job_sweeps_the_uploads_of_its_failed_attempts(
    h: Harness, fast: dict[str, str]
) -> None:
    """Found in a trial: `retry` starts the attempts again, and the file-name token was
    the attempt, so the retried job's attempt 1 left the failed attempt 2's upload
    forever (its sweep deletes earlier tokens) and `verify --job` did not see it."""
    seed_orders(h.url, 20_000)
    expected = old_ids(h.url)
    job_id = enqueue(fast, "--max-attempts", "2")
    failing = start_worker({**fast, "ARCHIVER_FAILPOINTS": "before_commit=raise"})
    h.wait_for(job_id, "failed", timeout=60)
    assert stop(failing) == 0
    (stray,) = blob_etags(h.azurite.connection_string, h.container)  # attempt 2 swept attempt 1's
    assert "-a002-part-00001" in stray
    verify = run_cli(fast, "verify", "--job", job_id)
    assert verify.returncode == 1 and f"{stray}: not in the catalog" in verify.stdout
    assert "verified 0 files: 1 problem\n" in verify.stderr, verify.stderr

    assert run_cli(fast, "retry", job_id).returncode == 0
    worker = start_worker(fast)
    row = h.wait_for(job_id, "completed")
    assert stop(worker) == 0
    assert (row["attempts"], row["claims"]) == (1, 3)
    catalogued = {r["path"] for r in h.sql("SELECT path FROM archive_files")}
    assert catalogued and all("-a003-part-" in path for path in catalogued)
    assert set(blob_etags(h.azurite.connection_string, h.container)) == catalogued
    verify = run_cli(fast, "verify", "--job", job_id)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    h.exactly_once(expected)


def test_retention_prunes_finished_jobs_and_keeps_files(h: Harness) -> None:
    seed_orders(h.url, 3_000)
    h.archive("--table", "orders", "--before", "2024-12-31")
    files = h.value("SELECT count(*) FROM archive_files")
    # and 2,500 more finished jobs: more than one batch of the pruner's (1,000)
    h.sql(
        "INSERT INTO background_jobs (task_name, status, finished_at) "
        "SELECT 'noop', 'completed', now() FROM generate_series(1, 2500)"
    )
    h.sql("UPDATE background_jobs SET finished_at = now() - interval '31 days'")
    h.drain()
    assert h.value("SELECT count(*) FROM background_jobs") == 0
    assert h.value("SELECT count(*) FROM archive_files") == files > 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["cancel", "not-a-uuid"], "is not a job id"),
        (["retry", "00000000-0000-0000-0000-000000000000"], "no job 00000000"),
        (["cancel", "00000000-0000-0000-0000-000000000000"], "no job 00000000"),
    ],
)
def test_bad_job_ids(h: Harness, args: list[str], needle: str) -> None:
    result = h.cli(*args)
    assert_refused(result, needle, code=1)


def test_job_state_refusals(h: Harness) -> None:
    seed_orders(h.url, 3_000)
    job_id = h.cli("enqueue", "--table", "orders", "--before", "2024-12-31").stdout.strip()
    retried = h.cli("retry", job_id)
    assert retried.returncode == 1 and "is queued; only failed or cancelled" in retried.stderr
    h.drain()
    cancelled = h.cli("cancel", job_id)
    assert cancelled.returncode == 1 and "is completed; only queued or running" in cancelled.stderr
    assert job_row(h.url, job_id)["status"] == "completed"


def test_a_job_of_no_kind_or_with_a_malformed_payload_fails_naming_it(h: Harness) -> None:
    """The worker asks the kind registry for a job's handler and its payload's request:
    an unknown task_name, or a payload its kind cannot read, fails the job's attempts
    with a line naming what is wrong (not a KeyError deep in a handler)."""
    for task, payload in (("reindex", {"table": "public.orders"}), ("publish", {"table": "x"})):
        h.sql(
            "INSERT INTO background_jobs (task_name, payload, max_attempts) "
            "VALUES ($1, $2::jsonb, 1)",
            task,
            json.dumps(payload),
        )
    h.drain()
    failed = dict(
        h.sql("SELECT task_name, last_error FROM background_jobs WHERE status = 'failed'")
    )
    assert (
        "no job kind 'reindex' (known: archive, publish, purge, compact, orphans, noop)"
        in failed["reindex"]
    )
    assert "not a publish job's payload (KeyError: 'storage_url')" in failed["publish"]


@pytest.mark.parametrize("mode", ["move", "copy"])
def test_a_chunk_longer_than_the_lease_keeps_its_job(h: Harness, mode: str) -> None:
    """A chunk whose transaction outlasts the lease (a slow upload) keeps its job: its
    checkpoint stamped heartbeat_at with its transaction's start (now(), seconds ago),
    so the workers' rescue took the job from its healthy worker after every such chunk
    (found by test_azurite_down_during_an_upload under load; a 60 s lease by default)."""
    seed_orders(h.url, 12_000)  # 1,920 rows older than the cutoff: two chunks
    slow = fast_env(h.env, ARCHIVER_LEASE_SECONDS="3", ARCHIVER_FAILPOINTS="upload_staged=sleep:4")
    (job,) = h.enqueue("--table", "orders", "--before", "2024-12-25", "--chunk-rows", "1000",
                       "--mode", mode)  # fmt: skip
    log = h.tmp / "worker.log"
    assert start_worker(slow, "--burst", log=log).wait(120) == 0
    said = log.read_text()
    assert "lease expired" not in said and "no longer held" not in said, said
    row = h.sql("SELECT status, claims FROM background_jobs WHERE id = $1::uuid", job)[0]
    assert (row["status"], row["claims"]) == ("completed", 1), said
