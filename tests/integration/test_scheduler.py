"""Scheduled archiving with real scheduler processes: one job per slot whatever the number
of schedulers, missed slots caught up once, and a policy's run moving exactly its rows."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from archiver.testing.reference import seed_orders
from tests.support import ROOT, Process, archiver_cmd, sql, sql_value, start_worker, wait_until
from tests.support.archive import blob_names, rows_in_blobs, rows_in_db
from tests.support.exactly_once import assert_archived_once
from tests.support.harness import Harness

pytestmark = pytest.mark.slow  # real scheduler processes, run until SIGTERM

SLOT_LINE = re.compile(r"policy (\S+): slot (\S+): (enqueued|already enqueued as) job (\S+)")


def write_config(path: Path, schedule: str, older_than: str, grace: int) -> Path:
    path.write_text(
        f"""
[settings]
scheduler_grace = {grace}

[[policy]]
name = "orders-policy"
table = "public.orders"
column = "created_at"
older_than = "{older_than}"
schedule = "{schedule}"
mode = "move"
"""
    )
    return path


def start_scheduler(env: dict[str, str], config: Path, log: Path) -> Process:
    with log.open("a") as out:
        return subprocess.Popen(
            archiver_cmd("--config", str(config), "scheduler"),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )


def stop(proc: Process, log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, log.read_text()


def slot_lines(log: Path) -> dict[str, tuple[str, str]]:
    """slot -> (outcome, job id), as a scheduler logged them."""
    return {slot: (outcome, job) for _, slot, outcome, job in SLOT_LINE.findall(log.read_text())}


def test_two_schedulers_enqueue_each_slot_once(h: Harness) -> None:
    seed_orders(h.url, 100)
    config = write_config(h.tmp / "archiver.toml", "* * * * * *", "1 days", grace=60)
    logs = [h.tmp / "scheduler-1.log", h.tmp / "scheduler-2.log"]
    schedulers = [start_scheduler(h.env, config, log) for log in logs]

    def common_slots() -> set[str]:
        return set(slot_lines(logs[0])) & set(slot_lines(logs[1]))

    try:
        wait_until(lambda: len(common_slots()) >= 5, timeout=60, what="5 slots fired by both")
    finally:
        for proc, log in zip(schedulers, logs, strict=True):
            stop(proc, log)

    first, second = slot_lines(logs[0]), slot_lines(logs[1])
    for slot in common_slots():
        outcomes = sorted([first[slot][0], second[slot][0]])
        # One scheduler inserted the slot, the other was refused by the unique key.
        assert outcomes == ["already enqueued as", "enqueued"], (slot, outcomes)
        assert first[slot][1] == second[slot][1]
        jobs = h.sql(
            "SELECT id::text FROM background_jobs WHERE policy_name = 'orders-policy' "
            "AND slot_at = $1::text::timestamptz",
            slot,
        )
        assert [j["id"] for j in jobs] == [first[slot][1]]
    assert (
        h.value(
            "SELECT count(*) FROM (SELECT slot_at FROM background_jobs "
            "GROUP BY slot_at HAVING count(*) > 1) d",
        )
        == 0
    )


def test_missed_slot_is_enqueued_once_when_a_scheduler_starts(
    env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    seed_orders(database_url, 100)
    # A scheduler ran ten minutes ago, then every scheduler was down.
    old_slot = sql_value(
        database_url,
        "INSERT INTO background_jobs (task_name, status, finished_at, policy_name, slot_at) "
        "VALUES ('archive', 'completed', now(), 'orders-policy', "
        "date_trunc('minute', now()) - interval '10 minutes') RETURNING slot_at",
    )
    config = write_config(tmp_path / "archiver.toml", "* * * * *", "1 days", grace=240)
    log = tmp_path / "scheduler.log"
    started = dt.datetime.now(dt.UTC)
    proc = start_scheduler(env, config, log)
    try:
        wait_until(lambda: "caught up" in log.read_text(), timeout=60, what="catch-up")
    finally:
        stop(proc, log)
    text = log.read_text()
    # Slots older than the grace: logged and skipped.
    first_skipped = (old_slot + dt.timedelta(minutes=1)).isoformat()
    assert f"slots from {first_skipped} until" in text and "skipped" in text, text
    # The newest missed slot, enqueued once; nothing in between.
    new = sql(
        database_url,
        "SELECT slot_at, payload FROM background_jobs WHERE slot_at > $1 ORDER BY slot_at",
        old_slot,
    )
    caught_up = new[0]["slot_at"]
    assert caught_up == started.replace(second=0, microsecond=0) or caught_up > started
    assert f"slot {caught_up.isoformat()}: enqueued job" in text

    # Started again: the database remembers the slot, so it is not enqueued a second time.
    proc = start_scheduler(env, config, log)
    try:
        wait_until(lambda: log.read_text().count("caught up") == 2, timeout=60, what="catch-up")
    finally:
        stop(proc, log)
    assert (
        sql_value(
            database_url, "SELECT count(*) FROM background_jobs WHERE slot_at = $1", caught_up
        )
        == 1
    )
    assert (
        sql_value(
            database_url,
            "SELECT count(*) FROM background_jobs WHERE slot_at > $1 AND slot_at < $2",
            old_slot,
            caught_up,
        )
        == 0
    )


def test_policy_run_moves_exactly_the_rows_older_than_its_cutoff(h: Harness) -> None:
    seed_orders(h.url, 3_000)  # created 1..3000 minutes before 2025-01-01
    days = (dt.datetime.now(dt.UTC).date() - dt.date(2024, 12, 31)).days
    config = write_config(h.tmp / "archiver.toml", "* * * * *", f"{days} days", grace=120)
    log = h.tmp / "scheduler.log"
    proc = start_scheduler(h.env, config, log)
    try:
        wait_until(lambda: "caught up" in log.read_text(), timeout=60, what="catch-up")
    finally:
        stop(proc, log)
    job = h.sql("SELECT slot_at, payload FROM background_jobs")[0]
    cutoff = dt.datetime.fromisoformat(json.loads(job["payload"])["cutoff"])
    expected_cutoff = (job["slot_at"] - dt.timedelta(days=days)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )
    assert cutoff == expected_cutoff
    older = "SELECT * FROM orders WHERE created_at < $1"
    expected = rows_in_db(h.url, f"SELECT * FROM orders WHERE created_at < '{cutoff.isoformat()}'")
    kept = h.value("SELECT count(*) FROM orders WHERE created_at >= $1", cutoff)
    assert 0 < len(expected) < 3_000 and kept > 0

    worker = start_worker(h.env, "--burst", log=h.tmp / "worker.log")
    assert worker.wait(timeout=120) == 0, (h.tmp / "worker.log").read_text()

    assert h.sql(older, cutoff) == []
    assert h.value("SELECT count(*) FROM orders") == kept
    names = blob_names(h.azurite.connection_string, h.container)
    assert_archived_once(rows_in_blobs(h.azurite.connection_string, h.container, names), expected)
    assert h.value("SELECT status FROM background_jobs") == "completed"
