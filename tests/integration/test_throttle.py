"""Rate limits live in the job row: a paced job takes at least rows / rate, says why it
waits (view, `show`, metric), and obeys a limit changed while it runs."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
import urllib.request
from dataclasses import replace

from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from tests.support import (
    archiver_cmd,
    assert_refused,
    private_database,
    start_process,
    start_worker,
    wait_for_text,
    wait_until,
)
from tests.support.harness import Harness

BEFORE = "2024-12-29"  # with 6,000 seeded orders: 1,680 older


def test_rows_per_second(h: Harness) -> None:
    seed_orders(h.url, 6_000)
    rate, chunk = 200, 500  # a wait of 2.5 s a chunk: long enough to be shown on a busy machine
    paced = h.cli("enqueue", "--table", "orders", "--before", BEFORE, "--chunk-rows", str(chunk),
        "--max-rows-per-second", str(rate),
    ).stdout.strip()  # fmt: skip
    port = free_port()
    log = h.tmp / "worker.log"
    worker = start_worker(h.env, "--metrics-port", str(port), log=log)
    waiting = wait_until(
        lambda: h.sql("SELECT * FROM archiver_running_jobs WHERE throttled_reason IS NOT NULL"),
        timeout=30,
        what="a throttled running job",
    )[0]
    assert waiting["throttled_reason"] == "max_rows_per_second" and waiting["throttled_since"]

    def shown_waiting() -> str | None:  # asked again where a wait ended as `show` began
        out = h.cli("show", paced).stdout
        return out if "max_rows_per_second since" in out else None

    shown = wait_until(shown_waiting, timeout=30, what="show saying the job waits")
    assert f'"max_rows_per_second": {rate}' in shown
    job = h.wait_for(paced, "completed", timeout=60)
    seconds = (job["finished_at"] - job["started_at"]).total_seconds()
    assert seconds >= (1_680 - chunk) / rate  # the first chunk is not waited for
    assert job["throttled_reason"] is None
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    line = next(
        x for x in scraped.splitlines() if x.startswith("archiver_throttled_seconds_total{")
    )
    assert 'reason="max_rows_per_second"' in line and float(line.split()[-1]) > 1.0

    # a limit lifted while the job runs takes effect at once, not after the planned wait
    h.sql("DELETE FROM archive_files")
    seed_orders(h.url, 2_000, first=6_001)
    slow = h.cli("enqueue", "--table", "orders", "--before", "2025-01-01", "--chunk-rows", str(chunk),
        "--max-rows-per-second", "20",
    ).stdout.strip()  # fmt: skip
    wait_for_text(log, f"job {slow}: chunk 1 of")
    time.sleep(1)
    lifted = h.cli("throttle", slow, "--max-rows-per-second", "0")
    assert lifted.returncode == 0 and lifted.stdout.strip().endswith("limits: none"), lifted
    changed_at = time.monotonic()
    h.wait_for(slow, "completed", timeout=30)
    assert time.monotonic() - changed_at < chunk / 20  # far less than one paced chunk
    assert h.value("SELECT attempts FROM background_jobs WHERE id = $1::uuid", slow) == 1
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_throttle_refuses_bad_input(h: Harness) -> None:
    for args, needle in (
        (
            ["throttle", "00000000-0000-0000-0000-000000000000", "--max-rows-per-second", "5"],
            "no job",
        ),
        (["throttle", "00000000-0000-0000-0000-000000000000"], "give --max-rows-per-second"),
    ):
        result = h.cli(*args)
        assert_refused(result, needle, code=1)
    bad = h.cli("throttle", "00000000-0000-0000-0000-000000000000", "--max-rows-per-second", "-3")
    assert_refused(bad, "must be at least 1", code=2, prefix="archiver throttle: error: ")


def test_policies_carry_limits_into_their_jobs(h: Harness) -> None:
    seed_orders(h.url, 100)
    config = h.tmp / "archiver.toml"
    window = _window(3600, 7200)  # closed now
    config.write_text(
        '[[policy]]\nname = "paced"\ntable = "orders"\nolder_than = "1 days"\n'
        'schedule = "* * * * * *"\nmax_rows_per_second = 500\nmax_replica_lag = "64MB"\n'
        f'window = "{window}"\n'
    )
    log = h.tmp / "scheduler.log"
    scheduler = start_process(archiver_cmd("--config", str(config), "scheduler"), h.env, log)
    try:
        row = wait_until(
            lambda: h.sql(
                "SELECT limits::text, EXTRACT(epoch FROM run_at - now())::float8 AS wait "
                "FROM background_jobs LIMIT 1",
            ),
            timeout=30,
            what="a policy slot's job",
        )[0]
    finally:
        scheduler.send_signal(signal.SIGTERM)
        assert scheduler.wait(30) == 0, log.read_text()
    assert json.loads(row["limits"]) == {
        "max_rows_per_second": 500,
        "max_replica_lag_bytes": 64 * 1024**2,
        "window": window,
    }
    assert 3500 < row["wait"] <= 3600  # queued for its window's next opening


def test_wal_per_second(h: Harness) -> None:
    """On a cluster of its own: the rate is the cluster's WAL, and on the shared one the
    suite's other test processes write theirs (each test's CREATE DATABASE copies its
    8 MB template through the WAL): beside two others the paced job once waited past
    its 90 s."""
    with private_database() as (_, url):
        alone = replace(h, url=url, env={**h.env, "ARCHIVER_DATABASE_URL": url})
        assert alone.cli("migrate").returncode == 0
        _paced_by_wal(alone)


def _paced_by_wal(h: Harness) -> None:
    seed_orders(h.url, 6_000)
    position = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
    wal_before = h.value(position)
    paced = h.cli("enqueue", "--table", "orders", "--before", BEFORE, "--chunk-rows", "500",
        "--max-wal-per-second", "64kB",
    ).stdout.strip()  # fmt: skip
    # A 500-row chunk writes ~28 kB of WAL here (111 kB for the job's four, the queue's
    # writes included): at 64 kB/s each waits ~0.4 s, well beyond the ~0.1 s a chunk
    # takes; at 256 kB/s (0.11 s) it was marginal once chunks stopped locking rows first.
    log = h.tmp / "worker.log"
    worker = start_worker(h.env, log=log)
    try:
        waiting = wait_until(
            lambda: h.sql(
                "SELECT * FROM archiver_running_jobs WHERE throttled_reason IS NOT NULL",
            ),
            timeout=30,
            what="a job waiting on its WAL rate",
        )[0]
        assert waiting["throttled_reason"] == "max_wal_per_second"
        job = h.wait_for(paced, "completed", timeout=90)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    wal = h.value(position) - wal_before
    seconds = (job["finished_at"] - job["started_at"]).total_seconds()
    files = h.value("SELECT count(*) FROM archive_files")
    # every chunk but the last waited for its own WAL at 64 kB/s. Its own is at least
    # 16 kB (the DELETE of 500 rows and their index entries); unpaced, the job takes
    # ~0.4 s.
    assert files == 4 and wal >= files * 16 * 1024
    assert seconds >= (files - 1) * 16 * 1024 / (64 * 1024)


def _window(opens_in: float, closes_in: float) -> str:
    """A window from now + opens_in to now + closes_in seconds, in UTC, to the second, as
    archiver writes it back (HH:MM at a whole minute: the test failed once a minute)."""
    now = dt.datetime.now(dt.UTC)
    times = [(now + dt.timedelta(seconds=s)).time() for s in (opens_in, closes_in)]
    return "-".join(t.isoformat("seconds" if t.second else "minutes") for t in times) + " UTC"


def test_a_maintenance_window_closing_and_opening(h: Harness) -> None:
    seed_orders(h.url, 6_000)
    expected = {r["id"] for r in h.sql(f"SELECT id FROM orders WHERE created_at < '{BEFORE}'")}
    job_id = h.cli("enqueue", "--table", "orders", "--before", BEFORE, "--chunk-rows", "200",
        "--max-rows-per-second", "100", "--window", _window(-60, 3600),
    ).stdout.strip()  # fmt: skip
    row = "SELECT * FROM background_jobs WHERE id = $1::uuid"
    log = h.tmp / "worker.log"
    worker = start_worker(h.env, log=log)
    try:
        wait_for_text(log, f"job {job_id}: chunk 1 of")
        # the window closes while the job waits 2 s for its rate: it stops at that boundary
        closing = _window(-60, 1)
        assert h.cli("throttle", job_id, "--window", closing).returncode == 0
        wait_for_text(log, "is closed; back to the queue until")
        job = wait_until(
            lambda: (r := h.sql(row, job_id)[0])["status"] == "queued" and r,
            what="the job back in the queue",
        )
        assert job["attempts"] == 0 and job["last_error"] is None
        next_day = dt.datetime.now(dt.UTC) + dt.timedelta(hours=23)
        opens = dt.time.fromisoformat(closing.split("-")[0])
        assert job["run_at"] > next_day and job["run_at"].time().replace(microsecond=0) == opens
        moved = h.value("SELECT coalesce(sum(row_count), 0) FROM archive_files")
        assert 200 <= moved < len(expected)
        time.sleep(1.5)  # not claimed while the window is closed
        assert h.sql(row, job_id)[0]["status"] == "queued"

        # the window opens (as the clock reaching it would): the job goes on where it was
        assert h.cli("throttle", job_id, "--window", _window(-60, 3600)).returncode == 0
        done = h.wait_for(job_id, "completed", timeout=60)
        assert done["attempts"] == 1
        # enqueued while its window is closed: queued for the opening, not claimed
        later = h.cli("enqueue", "--table", "orders", "--before", "2025-01-01",
            "--window", _window(3600, 7200),
        ).stdout.strip()  # fmt: skip
        waiting = h.sql(row, later)[0]
        wait_in = (waiting["run_at"] - dt.datetime.now(dt.UTC)).total_seconds()
        assert waiting["status"] == "queued" and 3590 < wait_in <= 3600
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    h.exactly_once(expected)
