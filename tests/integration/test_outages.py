"""The database and the storage going away under a running worker: backends
terminated, PostgreSQL restarted, Azurite stopped; the worker carries on and every
row stays in one place."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import Azurite
from tests.support import (
    archiver_cmd,
    assert_refused,
    job_row,
    private_database,
    run_cli,
    sql,
    sql_value,
    start_process,
    start_worker,
    wait_for_status,
    wait_for_text,
    wait_until,
)
from tests.support.console import Console
from tests.support.crash import CUTOFF, enqueue, old_ids, stop
from tests.support.exactly_once import assert_exactly_once
from tests.support.harness import Harness


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


# The key plan, restarted between chunks; and the backlog plan (tests/integration/test_backlog.py's:
# 15,680 of 20,000 rows old), restarted while a range's DELETE waits to commit, whose
# transaction rolls back and whose retry takes every range no commit marked done (a
# range marked done as it starts left its rows live here, 3 runs of 3).
RESTART_PLANS = {
    "key": ({}, CUTOFF, "after_commit=sleep:0.3"),
    "backlog": (
        {"ARCHIVER_BACKLOG_MIN_ROWS": "1000"},
        "2024-12-28",
        "before_commit=sleep:0.3,after_commit=sleep:0.1",
    ),
}


@pytest.mark.parametrize("plan", RESTART_PLANS)
@pytest.mark.slow
def test_postgres_restart_during_a_job(
    fast: dict[str, str], azurite: Azurite, container: str, tmp_path: Path, plan: str
) -> None:
    extra, cutoff, failpoints = RESTART_PLANS[plan]
    with private_database() as (cluster, url):
        env = {
            **fast,
            **extra,
            "ARCHIVER_DATABASE_URL": url,
            "ARCHIVER_FAILPOINTS": failpoints,
        }
        assert run_cli(env, "migrate").returncode == 0
        seed_orders(url, 20_000)
        expected = old_ids(url, cutoff)
        job_id = enqueue(env, "--chunk-rows", "1000", cutoff=cutoff)
        log = tmp_path / "w.log"
        w = start_worker(env, log=log)
        wait_until(
            lambda: sql_value(url, "SELECT count(*) FROM archive_files") >= 2, 60, what="two chunks"
        )
        cluster.restart()
        wait_for_status(url, job_id, "completed", timeout=120)
        assert w.poll() is None  # the same worker process carried on
        assert stop(w) == 0
        saved = sql_value(url, "SELECT progress FROM background_jobs WHERE id = $1::uuid", job_id)
        assert json.loads(saved)["plan"] == plan
        assert sql_value(url, f"SELECT count(*) FROM orders WHERE created_at < '{cutoff}'") == 0
        assert_exactly_once(url, azurite.connection_string, container, expected)


@pytest.mark.slow
def test_postgres_away_is_a_503_in_the_console_and_one_line_in_each_log(
    h: Harness, tmp_path: Path
) -> None:
    """PostgreSQL stopped under a worker, a scheduler and the console: the console's
    pages answer 503 "database unavailable" (an HTML page reloading itself), not a 500,
    and come back by themselves when the server does; no process logs a traceback
    (asyncpg's pool logged one per retry while it refilled: the soak's logs were full)."""
    with private_database() as (cluster, url):
        world = h.with_env(ARCHIVER_DATABASE_URL=url, ARCHIVER_POLL_INTERVAL="0.3")
        assert run_cli(world.env, "migrate").returncode == 0
        sql(url, "CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
        sql(url, "INSERT INTO events SELECT g, '2020-01-01' FROM generate_series(1, 100) g")
        config = tmp_path / "archiver.toml"
        config.write_text(
            '[[policy]]\nname = "events"\ntable = "public.events"\ncolumn = "created_at"\n'
            f'older_than = "365 days"\nschedule = "0 {(dt.datetime.now(dt.UTC).hour + 12) % 24} * * *"'
            '\nmode = "move"\n'
        )  # a slot twelve hours from now: never within the grace a starting scheduler catches up
        # (at 0 3 * * *, a run between 03:00 and 04:00 UTC got the slot's job, which the halt
        # failed unrecorded: it held the table until its lease expired, a minute)
        logs = {name: tmp_path / f"{name}.log" for name in ("worker", "scheduler")}
        worker = start_worker(world.env, log=logs["worker"])
        scheduler = start_process(
            archiver_cmd("--config", str(config), "scheduler"), world.env, logs["scheduler"]
        )
        console = Console(world, tmp_path)
        assert console.get("/")[0] == 200
        wait_for_text(logs["worker"], "started (concurrency")
        wait_for_text(logs["scheduler"], "scheduler caught up")
        cluster.halt()
        time.sleep(2)  # the pools' refills fail meanwhile
        status, body = console.get("/")
        assert status == 503 and body.startswith("database unavailable ("), (status, body)
        html = urllib.request.Request(console.url + "/jobs", headers={
            "Accept": "text/html", "Cookie": f"archiver_session={console.login()[1]}"})  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(html, timeout=10)
        page = answer.value.read().decode()
        assert answer.value.code == 503 and answer.value.headers["Retry-After"] == "5"
        assert '<meta http-equiv="refresh" content="5">' in page and "database unavailable" in page
        late = Console(world, tmp_path)  # started while the database is away: it serves
        assert late.health() == 503
        cluster.start()
        wait_until(lambda: console.get("/")[0] == 200, 30, what="the console back")
        wait_until(lambda: late.health() == 200, 30, what="the late console's database")
        late.stop()
        job = run_cli(world.env, "enqueue", "--table", "events", "--before", "2021-01-01")
        assert job.returncode == 0, job.stderr
        wait_for_status(url, job.stdout.strip(), "completed", timeout=60)  # the worker is back
        console.stop()
        assert stop(worker) == 0
        scheduler.terminate()
        assert scheduler.wait(30) == 0
        for log in [*logs.values(), console.log, late.log]:
            text = log.read_text()
            assert "Traceback" not in text, (log.name, text[-3000:])
        assert (
            "Failed to restore the pool connection floor; retrying (" in logs["worker"].read_text()
        )


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
        wait_until(  # the outage's own failure: under load a lease rescue (this env's
            # lease is 2 s) may have written last_error first, and storage came back too soon
            lambda: "StorageError" in job_row(database_url, job_id)["errors"],
            60,
            what="an attempt failed by the outage",
        )
        # While storage is down, every old row not in a committed file is still in the table.
        archived = sql_value(database_url, "SELECT COALESCE(sum(row_count), 0) FROM archive_files")
        assert len(old_ids(database_url)) == len(expected) - archived > 0
        storage.start()
        wait_for_status(database_url, job_id, "completed", timeout=120)
        assert stop(w) == 0
        assert "StorageError" in job_row(database_url, job_id)["errors"]  # kept after success
        assert_exactly_once(database_url, storage.connection_string, container, expected)
    finally:
        storage.stop()


def test_a_query_while_storage_is_down_is_one_line(
    env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    """Found by the soak: `archiver query` with Azurite restarting printed DuckDB's
    IOException traceback."""
    storage = Azurite(tmp_path / "azurite")
    storage.start()
    try:
        from azure.storage.blob import BlobServiceClient

        BlobServiceClient.from_connection_string(storage.connection_string).create_container("down")
        here = {
            **env,
            "AZURE_STORAGE_CONNECTION_STRING": storage.connection_string,
            "ARCHIVER_STORAGE_URL": "az://down/archive",
        }
        seed_orders(database_url, 20_000)
        assert old_ids(database_url)
        job_id = enqueue(here)
        w = start_worker(here, "--burst")
        assert w.wait(120) == 0
        wait_for_status(database_url, job_id, "completed")
        counted = run_cli(here, "query", "SELECT count(*) FROM orders")
        assert counted.returncode == 0, counted.stderr
        storage.stop()
        down = run_cli(here, "query", "SELECT count(*) FROM orders")
        assert_refused(down, "query: the archive could not be read", code=1)
    finally:
        storage.stop()
