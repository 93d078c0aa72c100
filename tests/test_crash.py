"""Issue 3: workers killed, signalled, cut off; databases and storage restarted. Real
processes, real PostgreSQL, real Azurite; the invariant checked by primary key."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import Azurite, with_database
from tests.exactly_once import assert_exactly_once
from tests.harness import Harness
from tests.support import (
    PrivateCluster,
    archiver_cmd,
    fresh_database,
    job_row,
    kill_at_failpoint,
    run_cli,
    sql,
    sql_value,
    start_process,
    start_worker,
    wait_for_status,
    wait_for_text,
    wait_until,
)

CUTOFF = "2024-12-25"  # with 20,000 seeded rows: 9,920 rows older


@pytest.fixture
def fast(env: dict[str, str]) -> dict[str, str]:
    """Short leases and backoffs so rescues happen within seconds."""
    return {
        **env,
        "ARCHIVER_LEASE_SECONDS": "2",
        "ARCHIVER_HEARTBEAT_SECONDS": "0.5",
        "ARCHIVER_RETRY_BASE_SECONDS": "0.2",
        "ARCHIVER_SHUTDOWN_DEADLINE": "10",
        "ARCHIVER_POLL_INTERVAL": "0.3",
    }


def old_ids(url: str) -> set[int]:
    return {r["id"] for r in sql(url, f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'")}


def enqueue(env: dict[str, str], *extra: str) -> str:
    result = run_cli(
        env, "enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", "2000", *extra
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def blob_etags(connection_string: str, container: str) -> dict[str, str]:
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(connection_string).get_container_client(
        container
    )
    return {b.name: b.etag for b in client.list_blobs() if "/_delta_log/" not in b.name}


def stop(proc: subprocess.Popen[str], timeout: float = 30) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


@pytest.mark.parametrize(
    "point", ["before_upload", "upload_staged", "before_commit", "after_commit"]
)
@pytest.mark.slow
def test_sigkill_at_each_point_of_a_chunk(h: Harness, fast: dict[str, str], point: str) -> None:
    seed_orders(h.url, 20_000)
    expected = old_ids(h.url)
    job_id = enqueue(fast)
    log_a = h.tmp / "a.log"
    kill_at_failpoint(fast, point, log_a)

    log_b = h.tmp / "b.log"
    b = start_worker(fast, log=log_b)
    row = h.wait_for(job_id, "completed")
    assert stop(b) == 0
    assert "lease expired" in log_b.read_text()
    assert row["attempts"] == 2
    assert h.value(f"SELECT count(*) FROM orders WHERE created_at < '{CUTOFF}'") == 0
    assert_exactly_once(h.url, h.azurite.connection_string, h.container, expected)


@pytest.mark.slow
def test_a_worker_killed_mid_write_on_local_storage_leaves_no_partial_file(
    fast: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    """file:// storage writes a file as a hidden .partial beside its name while the
    Parquet writer runs; the rescuing attempt deletes the dead attempt's before its own."""
    import pyarrow.parquet as pq

    root = tmp_path / "archive"
    env = {**fast, "ARCHIVER_STORAGE_URL": f"file://{root}"}
    seed_orders(database_url, 20_000)
    expected = old_ids(database_url)
    job_id = enqueue(env)
    kill_at_failpoint(env, "before_upload", tmp_path / "a.log")
    assert [p.name for p in root.rglob("*.partial")] != []  # what the kill left

    b = start_worker(env, log=tmp_path / "b.log")
    assert wait_for_status(database_url, job_id, "completed")["attempts"] == 2
    assert stop(b) == 0
    assert list(root.rglob("*.partial")) == []
    paths = [r["path"] for r in sql(database_url, "SELECT path FROM archive_files")]
    archived = [i for p in paths for i in pq.read_table(root / p, columns=["id"])["id"].to_pylist()]
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and "_delta_log" not in p.parts) == sorted(paths)  # fmt: skip
    left = {r["id"] for r in sql(database_url, "SELECT id FROM orders")} & expected
    assert len(archived) == len(set(archived)) and set(archived) | left == expected
    assert not set(archived) & left


@pytest.mark.slow
def test_sigterm_hands_the_job_back_and_a_new_worker_resumes(
    h: Harness, fast: dict[str, str]
) -> None:
    seed_orders(h.url, 20_000)
    expected = old_ids(h.url)
    job_id = enqueue(fast)
    log_a = h.tmp / "a.log"
    a = start_worker({**fast, "ARCHIVER_FAILPOINTS": "after_commit=sleep:0.7"}, log=log_a)
    wait_until(
        lambda: (
            job_row(h.url, job_id)["progress"]
            and json.loads(job_row(h.url, job_id)["progress"]).get("files", 0) >= 2
        ),
        60,
        what="two chunks",
    )
    t0 = time.monotonic()
    assert stop(a, timeout=15) == 0
    assert time.monotonic() - t0 < 10  # within the deadline
    row = job_row(h.url, job_id)
    assert row["status"] == "queued" and row["locked_by"] is None
    committed = h.sql("SELECT part, path, md5, created_at FROM archive_files ORDER BY part")
    assert json.loads(row["progress"])["files"] == len(committed) >= 2
    etags = blob_etags(h.azurite.connection_string, h.container)

    assert start_worker(fast, "--burst").wait(120) == 0
    assert job_row(h.url, job_id)["status"] == "completed"
    parts = [r["part"] for r in h.sql("SELECT part FROM archive_files ORDER BY part")]
    assert parts == list(range(1, len(parts) + 1)) and len(parts) > len(committed)
    # Committed chunks were not redone: same catalog rows, blobs never rewritten.
    after = h.sql("SELECT part, path, md5, created_at FROM archive_files ORDER BY part")
    assert after[: len(committed)] == committed
    later = blob_etags(h.azurite.connection_string, h.container)
    assert all(later[r["path"]] == etags[r["path"]] for r in committed)
    assert_exactly_once(h.url, h.azurite.connection_string, h.container, expected)


@pytest.mark.slow
def test_second_signal_rolls_back_at_once(h: Harness, fast: dict[str, str]) -> None:
    seed_orders(h.url, 20_000)
    expected = old_ids(h.url)
    job_id = enqueue(fast)
    log_a = h.tmp / "a.log"
    a = start_worker(
        {**fast, "ARCHIVER_FAILPOINTS": "before_commit=pause", "ARCHIVER_SHUTDOWN_DEADLINE": "600"},
        log=log_a,
    )
    wait_for_text(log_a, "failpoint before_commit reached")
    a.send_signal(signal.SIGTERM)
    wait_for_text(log_a, "stopping")
    a.send_signal(signal.SIGTERM)
    assert a.wait(30) == 0
    row = job_row(h.url, job_id)
    assert row["status"] == "queued"
    assert h.value("SELECT count(*) FROM archive_files") == 0
    assert old_ids(h.url) == expected  # the chunk was rolled back
    assert start_worker(fast, "--burst").wait(120) == 0
    assert_exactly_once(h.url, h.azurite.connection_string, h.container, expected)


@pytest.mark.slow
def test_backend_connections_killed(
    fast: dict[str, str], database_url: str, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    seed_orders(database_url, 20_000)
    sql(
        database_url, "CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)"
    )
    sql(database_url, "INSERT INTO events SELECT g, '2020-01-01' FROM generate_series(1, 100) g")
    expected = old_ids(database_url)
    env = {**fast, "ARCHIVER_POLL_INTERVAL": "30", "ARCHIVER_FAILPOINTS": "after_commit=sleep:0.3"}
    job_id = enqueue(env)
    log = tmp_path / "w.log"
    w = start_worker(env, log=log)
    wait_for_text(log, "failpoint after_commit reached")
    dbname = database_url.rsplit("/", 1)[1]
    killed_at = sql_value(database_url, "SELECT now()")
    killed = sql_value(
        database_url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = $1 AND application_name = 'archiver' AND pid <> pg_backend_pid()",
        dbname,
    )
    assert killed >= 3  # pool, LISTEN, and the job's bulk connections
    # LISTEN is back: a new connection started after the kill is listening.
    wait_until(
        lambda: (
            sql_value(
                database_url,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'archiver' AND backend_start > $2",
                dbname,
                killed_at,
            )
            >= 2
        ),
        30,
        what="reconnect",
    )
    wait_for_status(database_url, job_id, "completed")
    time.sleep(1.0)  # let the LISTEN reconnect settle before measuring the wake-up
    result = run_cli(env, "enqueue", "--table", "events", "--before", "2021-01-01")
    assert result.returncode == 0, result.stderr
    second = wait_for_status(database_url, result.stdout.strip(), "completed", timeout=30)
    # Woken by NOTIFY, not by the 30 s poll.
    assert (second["started_at"] - second["created_at"]).total_seconds() < 1.0
    assert stop(w) == 0
    assert "LISTEN connection lost" in log.read_text()
    assert_exactly_once(database_url, azurite.connection_string, container, expected)


def test_bulk_connections_kept_between_jobs_and_a_dropped_one_costs_no_attempt(
    h: Harness, fast: dict[str, str]
) -> None:
    for i in range(3):
        h.sql(f"CREATE TABLE t{i} (id bigint PRIMARY KEY, created_at date NOT NULL)")
        h.sql(f"INSERT INTO t{i} VALUES (1, '2020-01-01')")
    log = h.tmp / "w.log"
    worker = start_process(archiver_cmd("--verbose", "worker"), fast, log)

    def archive(table: str) -> dict[str, Any]:
        result = run_cli(fast, "enqueue", "--table", table, "--before", "2021-01-01")
        assert result.returncode == 0, result.stderr
        row: dict[str, Any] = h.wait_for(result.stdout.strip(), "completed")
        return row

    def opened() -> int:
        return log.read_text().count("bulk connection opened")

    archive("t0")
    archive("t1")
    assert opened() == 2  # the source and the catalog connection, once for both jobs
    # the server drops every idle connection (a restart, idle_session_timeout, a firewall)
    h.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = 'archiver'",
    )
    assert archive("t2")["attempts"] == 1  # reconnected, not failed
    assert opened() == 4
    assert stop(worker) == 0


@pytest.mark.slow
def test_postgres_restart_during_a_job(
    fast: dict[str, str], azurite: Azurite, container: str, tmp_path: Path
) -> None:
    cluster = PrivateCluster()
    cluster.init()
    cluster.start()
    try:
        sql(cluster.admin_url, "CREATE DATABASE app")
        url = with_database(cluster.admin_url, "app")
        env = {
            **fast,
            "ARCHIVER_DATABASE_URL": url,
            "ARCHIVER_FAILPOINTS": "after_commit=sleep:0.3",
        }
        assert run_cli(env, "migrate").returncode == 0
        seed_orders(url, 20_000)
        expected = old_ids(url)
        job_id = enqueue(env, "--chunk-rows", "1000")
        log = tmp_path / "w.log"
        w = start_worker(env, log=log)
        wait_until(
            lambda: sql_value(url, "SELECT count(*) FROM archive_files") >= 2, 60, what="two chunks"
        )
        cluster.restart()
        wait_for_status(url, job_id, "completed", timeout=120)
        assert w.poll() is None  # the same worker process carried on
        assert stop(w) == 0
        assert_exactly_once(url, azurite.connection_string, container, expected)
    finally:
        cluster.stop()


@pytest.mark.slow
def test_azurite_down_during_an_upload(
    fast: dict[str, str], database_url: str, container: str, tmp_path: Path
) -> None:
    storage = Azurite(tmp_path / "azurite")
    storage.start()
    try:
        env = {
            **fast,
            "AZURE_STORAGE_CONNECTION_STRING": storage.connection_string,
            "ARCHIVER_FAILPOINTS": "upload_staged=sleep:1.5",
            "ARCHIVER_RETRY_BASE_SECONDS": "1",
        }
        seed_orders(database_url, 20_000)
        expected = old_ids(database_url)
        job_id = enqueue(env, "--chunk-rows", "4000")
        log = tmp_path / "w.log"
        w = start_worker(env, log=log)
        wait_until(
            lambda: log.read_text().count("failpoint upload_staged reached") >= 2,
            60,
            what="second upload",
        )
        storage.stop()
        wait_until(
            lambda: job_row(database_url, job_id)["last_error"], 60, what="the failed attempt"
        )
        # While storage is down, every old row not in a committed file is still in the table.
        archived = sql_value(database_url, "SELECT COALESCE(sum(row_count), 0) FROM archive_files")
        assert len(old_ids(database_url)) == len(expected) - archived > 0
        storage.start()
        wait_for_status(database_url, job_id, "completed", timeout=120)
        assert stop(w) == 0
        # The outage failed an attempt (a later lease rescue may have the last word).
        assert "StorageError" in job_row(database_url, job_id)["errors"]
        assert_exactly_once(database_url, storage.connection_string, container, expected)
    finally:
        storage.stop()


@pytest.mark.slow
def test_four_workers_two_hundred_jobs(h: Harness) -> None:
    import asyncio

    import asyncpg

    from archiver import jobqueue
    from archiver.model import ArchiveRequest, Mode

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
                job_id, _ = await jobqueue.enqueue(
                    conn, request.payload(), dedup_key=f"t{t}:{day}", lock_key=f"table:public.t{t}"
                )
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
    assert_exactly_once(h.url, h.azurite.connection_string, h.container, expected)


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
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and needle in result.stderr


def test_job_state_refusals(h: Harness) -> None:
    seed_orders(h.url, 3_000)
    job_id = h.cli("enqueue", "--table", "orders", "--before", "2024-12-31").stdout.strip()
    retried = h.cli("retry", job_id)
    assert retried.returncode == 1 and "is queued; only failed or cancelled" in retried.stderr
    h.drain()
    cancelled = h.cli("cancel", job_id)
    assert cancelled.returncode == 1 and "is completed; only queued or running" in cancelled.stderr
    assert job_row(h.url, job_id)["status"] == "completed"


@pytest.fixture
def source_url(database_url: str) -> Iterator[str]:
    """The application's tables in a database of their own (ARCHIVER_SOURCE_URL)."""
    with fresh_database("archiver_src") as url:
        yield url


@pytest.mark.parametrize(
    ("point", "outcome"), [("before_commit", "aborted"), ("source_committed", "committed")]
)
@pytest.mark.slow
def test_separate_source_database_crash_around_its_commit(
    fast: dict[str, str],
    database_url: str,
    source_url: str,
    azurite: Azurite,
    container: str,
    tmp_path: Path,
    point: str,
    outcome: str,
) -> None:
    """Catalog and source in different databases: the file is recorded pending (with the
    source transaction id) before the source COMMIT. Killed on either side of that
    COMMIT, the next attempt asks the source whether it committed, and confirms the file
    or forgets it (and its blob)."""
    env = {**fast, "ARCHIVER_SOURCE_URL": source_url}
    seed_orders(source_url, 20_000)
    expected = old_ids(source_url)
    job_id = enqueue(env)
    log_a = tmp_path / "a.log"
    kill_at_failpoint(env, point, log_a)
    pending = sql(database_url, "SELECT part, state, source_xid FROM archive_files")
    assert [(r["part"], r["state"]) for r in pending] == [(1, "pending")]
    assert pending[0]["source_xid"] is not None

    log_b = tmp_path / "b.log"
    b = start_worker(env, log=log_b)
    wait_for_status(database_url, job_id, "completed")
    assert stop(b) == 0
    assert f"part 1 was {outcome} before a crash" in log_b.read_text()
    assert (
        sql_value(database_url, "SELECT count(*) FROM archive_files WHERE state <> 'committed'")
        == 0
    )
    assert sql_value(source_url, f"SELECT count(*) FROM orders WHERE created_at < '{CUTOFF}'") == 0
    left = {r["id"] for r in sql(source_url, "SELECT id FROM orders")}
    assert not left & expected
    assert_exactly_once(
        database_url, azurite.connection_string, container, expected, source_url=source_url
    )


@pytest.mark.slow
def test_frozen_worker_cannot_overwrite_its_rescuers_files(
    h: Harness, fast: dict[str, str]
) -> None:
    """A worker frozen mid-upload (SIGSTOP) past its lease is rescued; when it thaws and
    finishes its upload, the attempt number in the name keeps it off the rescuer's files,
    and its checkpoint finds the job gone (found by review: it used to overwrite part 1)."""
    seed_orders(h.url, 20_000)
    expected = old_ids(h.url)
    job_id = enqueue(fast)
    log_a = h.tmp / "a.log"
    a = start_worker({**fast, "ARCHIVER_FAILPOINTS": "upload_staged=sleep:1"}, log=log_a)
    wait_for_text(log_a, "failpoint upload_staged reached")
    a.send_signal(signal.SIGSTOP)
    try:
        b = start_worker(fast, log=h.tmp / "b.log")
        h.wait_for(job_id, "completed")
        assert stop(b) == 0
        catalogued = [r["path"] for r in h.sql("SELECT path FROM archive_files")]
        etags = blob_etags(h.azurite.connection_string, h.container)
    finally:
        a.send_signal(signal.SIGCONT)
    wait_for_text(log_a, "no longer held")
    assert stop(a) == 0
    after = blob_etags(h.azurite.connection_string, h.container)
    assert all(after[p] == etags[p] for p in catalogued)  # the rescuer's files untouched
    stray = frozenset(after) - set(catalogued)
    assert len(stray) == 1 and "-a001-part-00001" in next(iter(stray))
    verify = run_cli(fast, "verify")
    assert verify.returncode == 1 and next(iter(stray)) in verify.stdout + verify.stderr
    # The frozen worker's rows were locked, so skipped by the rescuer: still in the table.
    assert_exactly_once(
        h.url, h.azurite.connection_string, h.container, expected, stray_blobs=stray
    )
