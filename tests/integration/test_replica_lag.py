"""--max-replica-lag against a real streaming standby: with replay paused on the standby
(pg_wal_replay_pause), a move stops at the limit and says why; after
pg_wal_replay_resume() it completes, every row exactly once."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from archiver.testing.cluster import PrivateCluster, which_pg_bin
from archiver.testing.reference import seed_orders
from archiver.testing.services import with_database
from tests.support import (
    run_cli,
    sql,
    sql_value,
    start_worker,
    wait_for_status,
    wait_until,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[PrivateCluster, PrivateCluster]]:
    primary = PrivateCluster()
    primary.init()
    primary.start()
    standby = PrivateCluster()
    standby.settings = ["wal_receiver_status_interval=1", "hot_standby=on"]
    try:
        subprocess.run(
            [*standby.as_owner, which_pg_bin("pg_basebackup"), "-h", "127.0.0.1",
             "-p", str(primary.port), "-U", "postgres", "-D", str(standby.data), "-R", "-X", "stream"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        standby.start()
        wait_until(
            lambda: sql_value(primary.admin_url, "SELECT count(*) FROM pg_stat_replication") == 1,
            what="the standby streaming",
        )
        yield primary, standby
    finally:
        standby.stop()
        primary.stop()


def test_a_move_waits_for_a_lagging_replica(
    primary_and_standby: tuple[PrivateCluster, PrivateCluster], tmp_path: Path
) -> None:
    primary, standby = primary_and_standby
    sql(primary.admin_url, "CREATE DATABASE app")
    url = with_database(primary.admin_url, "app")
    env = {
        "PATH": "/usr/bin:/bin",
        "ARCHIVER_DATABASE_URL": url,
        "ARCHIVER_STORAGE_URL": f"file://{tmp_path}/store",
        "ARCHIVER_POLL_INTERVAL": "0.5",
        "TMPDIR": str(tmp_path),
    }
    assert run_cli(env, "migrate").returncode == 0
    seed_orders(url, 7_000)  # 2,680 rows older than 2024-12-29: three chunks
    expected = {r["id"] for r in sql(url, "SELECT id FROM orders WHERE created_at < '2024-12-29'")}
    # the standby caught up with the seed first: paused behind it, the job waited before
    # its first chunk (a fresh clone under load: 0 files, not 1 or 2)
    caught_up = sql_value(primary.admin_url, "SELECT pg_current_wal_lsn()::text")
    wait_until(
        lambda: sql_value(
            standby.admin_url, "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", caught_up
        ),
        timeout=60,
        what="the standby to replay the seed",
    )
    sql(standby.admin_url, "SELECT pg_wal_replay_pause()")
    job_id = run_cli(
        env, "enqueue", "--table", "orders", "--before", "2024-12-29", "--chunk-rows", "1000",
        "--max-replica-lag", "64kB",
    ).stdout.strip()  # fmt: skip
    worker = start_worker(env, log=tmp_path / "worker.log")
    waiting = wait_until(
        lambda: sql(url, "SELECT * FROM archiver_running_jobs WHERE throttled_reason IS NOT NULL"),
        timeout=60,
        what="the job waiting on the replica",
    )[0]
    assert waiting["throttled_reason"] == "max_replica_lag" and waiting["throttled_since"]
    files = sql_value(url, "SELECT count(*) FROM archive_files")
    assert 1 <= files < 3  # stopped at the limit, not done
    shown = run_cli(env, "show", job_id).stdout
    assert "max_replica_lag since" in shown

    sql(standby.admin_url, "SELECT pg_wal_replay_resume()")
    done = wait_for_status(url, job_id, "completed", timeout=90)
    assert done["attempts"] == 1 and done["throttled_reason"] is None
    worker.terminate()
    worker.wait(30)
    assert sql_value(url, "SELECT count(*) FROM orders WHERE created_at < '2024-12-29'") == 0
    archived = sql_value(url, "SELECT sum(row_count) FROM archive_files")
    assert archived == len(expected)  # each row once: they left the table and are in files
