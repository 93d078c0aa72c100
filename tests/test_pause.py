"""Pause and resume: a paused table's or job's work is never claimed, the claim loop stays
quiet (no error line) however long a pause lasts, and a running job stops at its next
chunk boundary, goes back to the queue without spending an attempt, and finishes exactly
once after resume."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import Azurite
from tests.exactly_once import assert_exactly_once
from tests.ops_jobs import enqueue, make_events
from tests.support import (
    run_cli,
    sql,
    sql_value,
    start_worker,
    wait_for_status,
    wait_for_text,
    wait_until,
)

CUTOFF = "2024-12-25"  # with 20,000 seeded orders: 9,920 older


def test_paused_jobs_are_not_claimed_and_the_loop_stays_quiet(
    env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    for name in ("events", "audit", "legacy"):
        make_events(database_url, name)
    by_table = enqueue(env, "events")
    by_id = enqueue(env, "audit")
    by_hand = enqueue(env, "legacy")
    assert run_cli(env, "pause", "--table", "events").stdout.strip() == "table public.events paused"
    assert (
        run_cli(env, "pause", "--table", "public.events").stdout.strip().endswith("already paused")
    )
    assert run_cli(env, "pause", by_id).returncode == 0
    # the way sql/ops/pause_table.sql used to pause: run_at = infinity
    sql(database_url, "UPDATE background_jobs SET run_at = 'infinity' WHERE id = $1::uuid", by_hand)

    log = tmp_path / "worker.log"
    worker = start_worker(env, log=log)
    wait_for_text(log, "started")
    time.sleep(3)  # six polls at 0.5 s, and the maintenance timers
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    text = log.read_text()
    assert not [line for line in text.splitlines() if " ERROR " in line or " WARNING " in line]
    assert "Traceback" not in text and "never awaited" not in text
    statuses = sql(database_url, "SELECT status, count(*) FROM background_jobs GROUP BY 1")
    assert {r["status"]: r["count"] for r in statuses} == {"queued": 3}

    status = run_cli(env, "status")
    assert "paused:" in status.stdout and "public.events" in status.stdout, status.stdout
    paused = {r["kind"]: r for r in sql(database_url, "SELECT * FROM archiver_paused")}
    assert paused["table"]["source_table"] == "public.events" and paused["table"]["jobs"] == 1
    assert str(paused["job"]["job_id"]) == by_id

    assert (
        run_cli(env, "resume", "--table", "events").stdout.strip() == "table public.events resumed"
    )
    assert run_cli(env, "resume", by_id).returncode == 0
    assert start_worker(env, "--burst").wait(60) == 0
    for job_id in (by_table, by_id):
        assert wait_for_status(database_url, job_id, "completed")["attempts"] == 1
    assert (
        sql_value(database_url, "SELECT status FROM background_jobs WHERE id = $1::uuid", by_hand)
        == "queued"
    )


@pytest.mark.slow
def test_pausing_a_running_job_stops_it_at_a_chunk_boundary(
    env: dict[str, str], database_url: str, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    seed_orders(database_url, 20_000)
    expected = {
        r["id"] for r in sql(database_url, f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'")
    }
    job_id = run_cli(
        env, "enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", "1000"
    ).stdout.strip()
    log = tmp_path / "worker.log"
    slow = {
        **env,
        "ARCHIVER_FAILPOINTS": "after_commit=sleep:0.3",
        "ARCHIVER_HEARTBEAT_SECONDS": "0.2",
    }
    worker = start_worker(slow, log=log)
    wait_for_text(log, "chunk 2 of")
    assert "stops at its next chunk boundary" in run_cli(env, "pause", job_id).stdout
    wait_for_text(log, "paused; back to the queue")
    row = wait_until(
        lambda: (
            (
                r := sql(database_url, "SELECT * FROM background_jobs WHERE id = $1::uuid", job_id)[
                    0
                ]
            )["status"]
            == "queued"
            and r
        ),
        what="the paused job back in the queue",
    )
    assert row["attempts"] == 0 and row["paused_at"] is not None
    done = sql_value(database_url, "SELECT count(*) FROM archive_files")
    time.sleep(1.5)  # a paused job is not claimed again
    assert sql_value(database_url, "SELECT count(*) FROM archive_files") == done < 10

    assert run_cli(env, "resume", job_id).returncode == 0
    assert wait_for_status(database_url, job_id, "completed", timeout=120)["attempts"] == 1
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert_exactly_once(database_url, azurite.connection_string, container, expected)


def test_pause_refuses_bad_input(env: dict[str, str], database_url: str) -> None:
    for args, needle in (
        (["pause"], "give either a job id or --table T"),
        (["pause", "--table", "nope"], "table 'nope' not found"),
        (["resume", "00000000-0000-0000-0000-000000000000"], "no job 00000000"),
    ):
        result = run_cli(env, *args)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
        assert needle in result.stderr
