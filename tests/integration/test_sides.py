"""Every command that changes the archive says which side of its commit a failure came
from (archiver.outcome): before, "nothing changed" (exit 1, and nothing did); after,
what stands and what is left -- a warning with exit 0 where the change asked for is done
and the workers finish the rest, an error where a run was cut short part-way. Each
failure is a real one where one can be made to order (a session terminated), else a
failpoint that raises at the step (on a84fc94 each printed the bare error, "archiver:
error: failpoint erase_committed", as if nothing had been erased)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support import archiver_cmd, start_process, wait_until
from tests.support.harness import Harness

SCHEMA = """
CREATE TABLE events (
    id         bigint PRIMARY KEY,
    subject    int NOT NULL,
    created_at timestamptz NOT NULL);
INSERT INTO events
    SELECT g, g % 50, '2024-01-01'::timestamptz + g * interval '1 minute'
    FROM generate_series(1, 3000) g;
"""
RANGE = ["--from", "2024-01-01", "--to", "2024-01-01T12:00:00+00:00"]  # 719 rows, 2 files


@pytest.fixture
def events(h: Harness) -> Harness:
    h.sql(SCHEMA)
    h.archive("--table", "events", "--before", "2025-01-01", "--chunk-rows", "500")
    assert h.value("SELECT count(*) FROM events") == 0
    return h


def failing(h: Harness, point: str, *args: str) -> subprocess.CompletedProcess[str]:
    return h.with_env(ARCHIVER_FAILPOINTS=f"{point}=raise").cli(*args)


def one_line(done: subprocess.CompletedProcess[str], code: int, start: str) -> str:
    """Exit `code`, and one line of archiver's on stderr (beside logs): `start`."""
    said = [ln for ln in done.stderr.splitlines() if ln.startswith("archiver: ")]
    assert done.returncode == code, (done.returncode, done.stderr)
    assert len(said) == 1 and said[0].startswith(start), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return said[0]


def files(h: Harness) -> int:
    return int(h.value("SELECT count(*) FROM archive_files WHERE state = 'committed'"))


def test_restore(events: Harness) -> None:
    h = events
    args = ["restore", "--table", "events", *RANGE]
    one_line(
        failing(h, "restore_before_commit", *args),
        1,
        "archiver: error: restore: nothing changed: failpoint restore_before_commit",
    )
    assert h.value("SELECT count(*) FROM events") == 0 and files(h) == 6
    line = one_line(
        failing(h, "restore_committed", *args),
        0,
        "archiver: warning: restore: 719 rows moved back out of the archive (ledger 2), "
        "and it stands; then failpoint restore_committed; the workers' next publication",
    )
    assert "sweep finish it" in line
    assert h.value("SELECT count(*) FROM events") == 719


def test_erase_and_purge(events: Harness) -> None:
    h = events
    erase = ["erase", "--table", "events", "--where", "subject = 7"]
    one_line(
        failing(h, "erase_before_commit", *erase),
        1,
        "archiver: error: erase: nothing changed: failpoint erase_before_commit",
    )
    assert h.value("SELECT status FROM archive_ledger") == "abandoned"
    one_line(
        failing(h, "erase_committed", *erase),
        0,
        "archiver: warning: erase: the erasure is committed (ledger 2), and it stands; then "
        "failpoint erase_committed; the workers' next publication and sweep finish it",
    )
    assert h.value("SELECT status FROM archive_ledger WHERE id = 2") == "done"
    purge = ["purge", "--table", "events", "--older-than", "1 day"]
    one_line(
        failing(h, "purge_before_commit", *purge),
        1,
        "archiver: error: purge: nothing changed: failpoint purge_before_commit",
    )
    assert files(h) == 6
    one_line(
        failing(h, "purge_committed", *purge),
        0,
        "archiver: warning: purge: the purge is committed (ledger 4), and it stands; then "
        "failpoint purge_committed",
    )
    assert files(h) == 0


def test_tier_and_rehydrate_cut_short(events: Harness) -> None:
    h = events
    one_line(
        failing(h, "tier_moved", "tier", "--table", "events", "--tier", "Cool"),
        1,
        "archiver: error: tier: 1 of 6 files moved to Cool, and it stands; then failpoint "
        "tier_moved; `archiver tier --table public.events --tier Cool` again moves the rest",
    )
    assert h.cli("verify", "--table", "events").returncode == 0
    tiered = h.cli("tier", "--table", "events", "--tier", "Archive")
    assert tiered.returncode == 0, tiered.stderr
    one_line(
        failing(h, "rehydrate_asked", "rehydrate", "--table", "events"),
        1,
        "archiver: error: rehydrate: rehydration asked for 1 of 6 files, and it stands; then "
        "failpoint rehydrate_asked; `archiver rehydrate --table public.events` again goes on",
    )


def test_publish(events: Harness) -> None:
    h = events
    h.sql("INSERT INTO events SELECT g, 1, '2024-06-01' FROM generate_series(3001, 3100) g")
    h.enqueue("--table", "events", "--before", "2025-01-01")
    h.with_env(ARCHIVER_DELTA="false").drain()  # catalogued, not published
    args = ["publish", "--table", "events"]
    one_line(
        failing(h, "before_delta_commit", *args),
        1,
        "archiver: error: publish: nothing changed: failpoint before_delta_commit",
    )
    one_line(
        failing(h, "after_delta_commit", *args),
        0,
        "archiver: warning: publish: public.events: publication 2 is in its Delta log, and it "
        "stands; then failpoint after_delta_commit; the next publication",
    )
    done = h.cli(*args)
    assert done.returncode == 0, done.stderr


def test_enqueue_wait_losing_its_connection(h: Harness) -> None:
    """A real failure: the database session of `enqueue --wait` terminated while it
    waits (no worker runs): the job is queued and stands, and it says so."""
    h.sql(SCHEMA)
    log = h.tmp / "enqueue.log"
    proc = start_process(
        archiver_cmd("enqueue", "--table", "events", "--before", "2025-01-01", "--wait"),
        h.env,
        log,
    )
    wait_until(lambda: h.value("SELECT count(*) FROM background_jobs") == 1, 30)

    def ended() -> bool:  # its waiting session, once it has one
        h.value(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'archiver enqueue %'"
        )
        return proc.poll() is not None

    wait_until(ended, 30, interval=0.3)
    assert proc.returncode == 1
    (job,) = [r["id"] for r in h.sql("SELECT id FROM background_jobs")]
    said = [ln for ln in log.read_text().splitlines() if ln.startswith("archiver: error: ")]
    assert len(said) == 1, log.read_text()
    assert said[0].startswith(
        f"archiver: error: enqueue: 1 job queued ({job}), and it stands; then database error: "
    ), said
    assert said[0].endswith(f"the workers run it; `archiver show {job}` follows it"), said
    h.drain()
    assert h.value("SELECT status FROM background_jobs") == "completed"
