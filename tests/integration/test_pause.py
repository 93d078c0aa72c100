"""Pause and resume: a paused table's or job's work is never claimed, the claim loop stays
quiet (no error line) however long a pause lasts, and a running job stops at its next
chunk boundary, goes back to the queue without spending an attempt, and finishes exactly
once after resume."""

from __future__ import annotations

import signal
import time

import pytest

from archiver.store.audit import actor as audit_actor
from archiver.testing.reference import seed_orders
from tests.support import (
    assert_refused,
    start_worker,
    wait_for_text,
    wait_until,
)
from tests.support.harness import Harness
from tests.support.ops_jobs import enqueue, make_events

CUTOFF = "2024-12-25"  # with 20,000 seeded orders: 9,920 older


def test_paused_jobs_are_not_claimed_and_the_loop_stays_quiet(h: Harness) -> None:
    for name in ("events", "audit", "legacy"):
        make_events(h.url, name)
    by_table = enqueue(h.env, "events")
    by_id = enqueue(h.env, "audit")
    by_hand = enqueue(h.env, "legacy")
    assert h.cli("pause", "--table", "events").stdout.strip() == "table public.events paused"
    assert h.cli("pause", "--table", "public.events").stdout.strip().endswith("already paused")
    assert h.cli("pause", by_id).returncode == 0
    # the way sql/ops/pause_table.sql used to pause: run_at = infinity
    h.sql("UPDATE background_jobs SET run_at = 'infinity' WHERE id = $1::uuid", by_hand)

    log = h.tmp / "worker.log"
    worker = start_worker(h.env, log=log)
    wait_for_text(log, "started")
    time.sleep(3)  # six polls at 0.5 s, and the maintenance timers
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    text = log.read_text()
    assert not [line for line in text.splitlines() if " ERROR " in line or " WARNING " in line]
    assert "Traceback" not in text and "never awaited" not in text
    statuses = h.sql("SELECT status, count(*) FROM background_jobs GROUP BY 1")
    assert {r["status"]: r["count"] for r in statuses} == {"queued": 3}

    status = h.cli("status")
    assert "paused:" in status.stdout and "public.events" in status.stdout, status.stdout
    paused = {r["kind"]: r for r in h.sql("SELECT * FROM archiver_paused")}
    assert paused["table"]["source_table"] == "public.events" and paused["table"]["jobs"] == 1
    assert str(paused["job"]["job_id"]) == by_id

    assert h.cli("resume", "--table", "events").stdout.strip() == "table public.events resumed"
    assert h.cli("resume", by_id).returncode == 0
    # each change is in archiver_audit, naming the CLI's user@host (what changes nothing too)
    audit = [(r["via"], r["action"], r["target"], r["outcome"]) for r in
             h.sql("SELECT * FROM archiver_audit ORDER BY id")]  # fmt: skip
    assert audit == [
        ("cli", "pause", "table public.events", "paused"),
        ("cli", "pause", "table public.events", "was already paused"),
        ("cli", "pause", f"job {by_id}", "paused"),
        ("cli", "resume", "table public.events", "resumed"),
        ("cli", "resume", f"job {by_id}", "resumed"),
    ]
    assert {r["actor"] for r in h.sql("SELECT actor FROM archiver_audit")} == {audit_actor()}
    h.drain()
    for job_id in (by_table, by_id):
        assert h.wait_for(job_id, "completed")["attempts"] == 1
    assert h.value("SELECT status FROM background_jobs WHERE id = $1::uuid", by_hand) == "queued"


@pytest.mark.slow
def test_pausing_a_running_job_stops_it_at_a_chunk_boundary(h: Harness) -> None:
    seed_orders(h.url, 20_000)
    expected = {r["id"] for r in h.sql(f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'")}
    job_id = h.cli(
        "enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", "1000"
    ).stdout.strip()
    log = h.tmp / "worker.log"
    slow = {
        **h.env,
        "ARCHIVER_FAILPOINTS": "after_commit=sleep:0.3",
        "ARCHIVER_HEARTBEAT_SECONDS": "0.2",
    }
    worker = start_worker(slow, log=log)
    wait_for_text(log, "chunk 2 of")
    assert "stops at its next chunk boundary" in h.cli("pause", job_id).stdout
    wait_for_text(log, "paused; back to the queue")
    row = wait_until(
        lambda: (
            (r := h.sql("SELECT * FROM background_jobs WHERE id = $1::uuid", job_id)[0])["status"]
            == "queued"
            and r
        ),
        what="the paused job back in the queue",
    )
    assert row["attempts"] == 0 and row["paused_at"] is not None
    done = h.value("SELECT count(*) FROM archive_files")
    time.sleep(1.5)  # a paused job is not claimed again
    assert h.value("SELECT count(*) FROM archive_files") == done < 10

    assert h.cli("resume", job_id).returncode == 0
    assert h.wait_for(job_id, "completed", timeout=120)["attempts"] == 1
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    h.exactly_once(expected)


def test_pause_refuses_bad_input(h: Harness) -> None:
    for args, needle in (
        (["pause"], "give either a job id or --table T"),
        (["pause", "--table", "nope"], "table nope not found"),
        (["resume", "00000000-0000-0000-0000-000000000000"], "no job 00000000"),
    ):
        result = h.cli(*args)
        assert_refused(result, needle, code=1)
    assert h.value("SELECT count(*) FROM archiver_audit") == 0  # a refusal changes nothing
