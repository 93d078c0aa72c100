"""A worker stopped by SIGTERM or SIGINT: the job handed back and resumed; a second
signal rolls back at once."""

from __future__ import annotations

import json
import signal
import time

import pytest

from archiver.testing.reference import seed_orders
from tests.support import (
    job_row,
    start_worker,
    wait_for_text,
    wait_until,
)
from tests.support.crash import blob_etags, enqueue, old_ids, stop
from tests.support.harness import Harness


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
    h.exactly_once(expected)


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
    h.exactly_once(expected)
