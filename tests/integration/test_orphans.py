"""What a dead or abandoned writer leaves on storage: an operation whose session is gone
writes nothing more, and every blob nothing references -- whenever it was written -- is
deleted by the workers' orphan sweep once past its grace period (`archiver
remove-orphans` does it now), never a catalogued file, nor one a running job or operation
may still catalogue, nor a name archiver does not make.

A 30-minute soak run found the first: its backends terminated, a worker's sweep took an
erasure's operation for dead and deleted its rewrites, while the erasure's process, alive,
uploaded 23 more, catalogued nowhere and never swept."""

from __future__ import annotations

import time
from pathlib import Path

from azure.storage.blob import ContainerClient

from tests.support import (
    Process,
    archiver_cmd,
    assert_refused,
    start_process,
    wait_for_text,
)
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


def archived_events(h: Harness) -> set[int]:
    h.sql(SCHEMA)
    ids = h.old_ids("2025-01-01", "events")
    h.archive("--table", "events", "--before", "2025-01-01", "--chunk-rows", "500")
    assert h.value("SELECT count(*) FROM archive_files") == 6
    return ids


def blobs(h: Harness) -> list[str]:
    return h.blobs()


def rewrites(h: Harness) -> list[str]:
    return [b for b in blobs(h) if "/rewrite-" in b]


def erase_paused(h: Harness, tmp_path: Path, failpoints: str, text: str) -> Process:
    """An erasure of subject 7 (rows in every file), stopped at `text` of its failpoints."""
    log = tmp_path / "erase.log"
    proc = start_process(
        archiver_cmd("erase", "--table", "events", "--where", "subject = 7"),
        {**h.env, "ARCHIVER_FAILPOINTS": failpoints},
        log,
    )
    wait_for_text(log, text)
    return proc


def end_its_session(h: Harness) -> None:
    """The erasure's database session terminated, its process left running (as the
    soak's fault does), then a sweep: the operation's lock is free, so it is abandoned."""
    h.value(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name LIKE 'archiver erase %'"
    )
    h.drain()  # a burst worker's maintenance queues the sweep (a publish job) and runs it
    assert h.value("SELECT status FROM archive_ledger") == "abandoned"


def test_an_operation_whose_session_ended_uploads_nothing_more(h: Harness, tmp_path: Path) -> None:
    ids = archived_events(h)
    catalogued = blobs(h)
    proc = erase_paused(
        h, tmp_path, "erase_rewritten=sleep:8", "failpoint erase_rewritten reached"
    )  # its first rewrite uploaded; it sleeps before the next file
    end_its_session(h)
    assert proc.wait(120) != 0
    text = (tmp_path / "erase.log").read_text()
    assert (
        "archiver: error: erase: nothing changed: operation 1: its database session ended (" in text
    ), text
    assert "Traceback" not in text, text
    assert rewrites(h) == []  # on a84fc94: the five rewrites uploaded after the sweep
    assert blobs(h) == catalogued
    h.exactly_once(ids, "events")


def test_a_rewrite_uploaded_after_its_operation_was_abandoned_is_swept(
    h: Harness, tmp_path: Path
) -> None:
    """The session ends between the rewrite's check and its upload, and the process is
    killed before its check after the upload: the blob stays, catalogued nowhere. The
    workers' orphan sweep (its grace 0 here) deletes it, and nothing else."""
    ids = archived_events(h)
    catalogued = blobs(h)
    proc = erase_paused(
        h,
        tmp_path,
        "rewrite_checked=sleep:8,rewrite_uploaded=pause",
        "failpoint rewrite_checked reached",
    )
    end_its_session(h)  # abandoned with nothing written yet
    wait_for_text(tmp_path / "erase.log", "failpoint rewrite_uploaded reached", 30)
    proc.kill()
    late = rewrites(h)
    assert len(late) == 1, late  # written after the sweep: no sweep of it lists it again
    client = ContainerClient.from_connection_string(h.azurite.connection_string, h.container)
    client.upload_blob("archive/public.events/README.txt", b"an operator's note")
    h.sql(  # the sweep's period started long ago
        "UPDATE archiver_maintenance SET last_queued = now() - interval '2 days' "
        "WHERE duty = 'orphans' AND scope = $1",
        f"az://{h.container}/archive",
    )
    h.with_env(ARCHIVER_ORPHAN_GRACE="86400").drain()
    assert rewrites(h) == late  # within its grace period: kept
    h.with_env(ARCHIVER_ORPHAN_GRACE="0").drain()
    job = h.sql(
        "SELECT status, progress FROM background_jobs WHERE task_name = 'orphans' "
        "ORDER BY created_at DESC LIMIT 1"
    )[0]
    assert job["status"] == "completed", job
    assert rewrites(h) == []
    assert blobs(h) == sorted([*catalogued, "archive/public.events/README.txt"])
    h.exactly_once(ids, "events", stray_blobs=frozenset({"archive/public.events/README.txt"}))


def test_remove_orphans_settles_a_killed_erasure_first(h: Harness, tmp_path: Path) -> None:
    """An erasure SIGKILLed after its first rewrite's upload, no worker running:
    `remove-orphans` settles it first, as the workers' ledger sweep would (the soak's
    end found verify reporting a killed erasure's rewrites "not in the catalog", its
    ledger row still running when remove-orphans kept them as busy). A dry run changes
    nothing."""
    ids = archived_events(h)
    catalogued = blobs(h)
    proc = erase_paused(h, tmp_path, "erase_rewritten=pause", "failpoint erase_rewritten reached")
    proc.kill()
    proc.wait(10)
    left = rewrites(h)
    assert len(left) == 1, left
    listed = h.cli("remove-orphans", "--grace", "0", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert "kept 1 of a job or operation still running" in listed.stderr, listed.stderr
    assert h.value("SELECT status FROM archive_ledger") == "running"
    assert rewrites(h) == left
    done = h.cli("remove-orphans", "--grace", "0")
    assert done.returncode == 0, done.stderr
    assert "archive operation 1 did not finish (its process died): abandoned" in done.stderr
    assert "kept" not in done.stderr, done.stderr
    assert h.value("SELECT status FROM archive_ledger") == "abandoned"
    assert blobs(h) == catalogued
    verify = h.cli("verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    h.exactly_once(ids, "events")


def test_remove_orphans_lists_and_deletes_what_a_cancelled_job_left(
    h: Harness, tmp_path: Path
) -> None:
    """A job killed between its upload and its commit, then cancelled: its blob is an
    orphan. Kept while the job may still run it again and within the grace period;
    listed by --dry-run, deleted by remove-orphans, and a second run finds nothing."""
    h.sql(SCHEMA)
    ids = h.old_ids("2025-01-01", "events")
    (job,) = h.enqueue("--table", "events", "--before", "2025-01-01", "--chunk-rows", "500")
    log = tmp_path / "worker.log"
    worker = start_process(
        archiver_cmd("worker"), {**h.env, "ARCHIVER_FAILPOINTS": "before_commit=pause"}, log
    )
    wait_for_text(log, "failpoint before_commit reached")
    worker.kill()
    worker.wait(10)
    (left,) = blobs(h)
    busy = h.cli("remove-orphans", "--table", "events", "--grace", "0")
    assert busy.returncode == 0, busy.stderr
    assert "kept 1 of a job or operation still running" in busy.stderr, busy.stderr
    assert blobs(h) == [left]
    cancel = h.cli("cancel", job)
    assert cancel.returncode == 0, cancel.stderr
    time.sleep(2.5)  # its lease (2 s here) runs out: the next rescue cancels it
    h.with_env(ARCHIVER_LEASE_SECONDS="2").drain()
    assert h.value("SELECT status FROM background_jobs") == "cancelled"
    young = h.cli("remove-orphans", "--table", "events")  # the default grace: a day
    assert "kept 1 within the grace period" in young.stderr, young.stderr
    listed = h.cli("remove-orphans", "--table", "public.events", "--grace", "0", "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"{left}: "), listed.stdout
    assert "would delete 1 orphan" in listed.stdout
    assert blobs(h) == [left]
    done = h.cli("remove-orphans", "--grace", "0")
    assert done.returncode == 0, done.stderr
    assert "deleted 1 orphan" in done.stdout and "in 1 table folder" in done.stdout, done.stdout
    assert blobs(h) == []
    # a job's name deeper down a table's folder (another storage nested there, say), or
    # in a folder no table has, is not archiver's to delete
    client = ContainerClient.from_connection_string(h.azurite.connection_string, h.container)
    strays = [left.replace("/job-", "/nested/job-"), "scratch/" + left.rsplit("/", 1)[1]]
    for stray in strays:
        client.upload_blob(stray, b"not ours")
    again = h.cli("remove-orphans", "--grace", "0")
    assert "deleted 0 orphans" in again.stdout, again.stdout
    assert "kept 1 archiver did not name" in again.stderr, again.stderr
    assert blobs(h) == sorted(strays)
    assert h.value("SELECT count(*) FROM events") == 3000 and len(ids) == 3000
    assert_refused(h.cli("remove-orphans", "--table", "nope", "--grace", "0"), "nope")
    assert_refused(h.cli("remove-orphans", "--grace", "-1"), "--grace")
