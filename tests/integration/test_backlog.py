"""The backlog plan (archive.backlog): a job taking most of its table reads it by ranges of
pages on several connections. Real worker processes, real PostgreSQL, real Azurite; the
invariant checked by primary key, under the same faults as the key plan's chunks
(tests/integration/test_crash.py)."""

from __future__ import annotations

import json
import random
import signal
import time
from typing import Any

import pytest

from archiver.testing.reference import seed_orders
from tests.support import (
    kill_at_failpoint,
    start_worker,
    wait_for_text,
)
from tests.support.archive import catalog_paths, rows_in_db
from tests.support.crash import blob_etags, frozen_mid_upload, stop
from tests.support.exactly_once import assert_archived_once
from tests.support.harness import Harness

# With 20,000 seeded rows (row g created g minutes before 2025-01-01): 15,680 older, 78%.
CUTOFF = "2024-12-28"
BACKLOG = {"ARCHIVER_BACKLOG_MIN_ROWS": "1000"}


def old_ids(h: Harness) -> set[int]:
    return {r["id"] for r in h.sql(f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'")}


def progress(h: Harness, job: str) -> dict[str, Any]:
    saved: dict[str, Any] = json.loads(
        h.value("SELECT progress FROM background_jobs WHERE id = $1::uuid", job)
    )
    return saved


def enqueue(h: Harness, *extra: str) -> str:
    (job,) = h.enqueue("--table", "orders", "--before", CUTOFF, "--chunk-rows", "2000", *extra)
    return job


@pytest.mark.parametrize("mode", ["move", "copy"])
def test_backlog_plan_takes_every_old_row_once(h: Harness, mode: str) -> None:
    h = h.with_env(**BACKLOG)
    seed_orders(h.url, 20_000)
    expected = rows_in_db(h.url, f"SELECT * FROM orders WHERE created_at < '{CUTOFF}'")
    dry = h.cli("enqueue", "--table", "orders", "--before", CUTOFF, "--mode", mode, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "pages in parallel on 2 connections" in dry.stdout
    job = h.archive("--table", "orders", "--before", CUTOFF, "--chunk-rows", "2000", "--mode", mode)
    done = progress(h, job)
    assert done["plan"] == "backlog"
    ranges = done["backlog"]
    assert ranges["ranges"] >= 7 and ranges["done"] == list(range(ranges["ranges"]))
    files = h.value("SELECT count(*) FROM archive_files")
    assert 5 <= files <= ranges["ranges"]  # the first pages hold the newest rows
    assert_archived_once(h.archived(), expected)  # every old row, once, equal values
    left = h.value(f"SELECT count(*) FROM orders WHERE created_at < '{CUTOFF}'")
    assert left == (0 if mode == "move" else len(expected))
    assert h.value("SELECT count(*) FROM orders") == 20_000 - (
        len(expected) if mode == "move" else 0
    )


def test_a_thin_slice_keeps_the_key_plan(h: Harness) -> None:
    h = h.with_env(**BACKLOG)
    seed_orders(h.url, 20_000)
    dry = h.cli("enqueue", "--table", "orders", "--before", "2024-12-20", "--dry-run")
    assert "chunks in key order (~" in dry.stdout and "under half the table" in dry.stdout
    job = h.archive("--table", "orders", "--before", "2024-12-20", "--chunk-rows", "2000")
    assert progress(h, job)["plan"] == "key"
    off = h.with_env(ARCHIVER_BACKLOG_CONNECTIONS="1").cli(
        "enqueue", "--table", "orders", "--before", CUTOFF, "--dry-run"
    )
    assert "chunks in key order (ARCHIVER_BACKLOG_CONNECTIONS is below 2)" in off.stdout


@pytest.mark.parametrize("mode", ["move", "copy"])
def test_a_table_of_one_page_is_one_range_on_one_connection(h: Harness, mode: str) -> None:
    """Fewer ranges than connections (a small table, or a retry with one range left):
    only as many connections as ranges read."""
    h = h.with_env(ARCHIVER_BACKLOG_MIN_ROWS="1")
    seed_orders(h.url, 30)
    expected = rows_in_db(h.url, "SELECT * FROM orders")
    job = h.archive("--table", "orders", "--before", "2025-01-01", "--mode", mode)
    assert progress(h, job)["backlog"] == {"pages": 1, "ranges": 1, "done": [0]}
    assert_archived_once(h.archived(), expected)


@pytest.mark.parametrize(
    "point", ["before_upload", "upload_staged", "before_commit", "after_commit"]
)
@pytest.mark.slow
def test_sigkill_at_each_point_of_a_range(h: Harness, fast: dict[str, str], point: str) -> None:
    env = {**fast, **BACKLOG}
    h = h.with_env(**BACKLOG)
    seed_orders(h.url, 20_000)
    expected = old_ids(h)
    job_id = enqueue(h.with_env(**env))
    kill_at_failpoint(env, point, h.tmp / "a.log")
    b = start_worker(env, log=h.tmp / "b.log")
    row = h.wait_for(job_id, "completed")
    assert stop(b) == 0
    assert row["attempts"] == 2
    assert progress(h, job_id)["plan"] == "backlog"
    assert h.value(f"SELECT count(*) FROM orders WHERE created_at < '{CUTOFF}'") == 0
    h.exactly_once(expected)


@pytest.mark.slow
def test_copy_killed_before_its_commit_starts_over(h: Harness, fast: dict[str, str]) -> None:
    """A copy's ranges are recorded in one transaction at the end: killed before it,
    nothing is catalogued, and the retry copies every old row at a new snapshot, once."""
    env = {**fast, **BACKLOG}
    seed_orders(h.url, 20_000)
    expected = rows_in_db(h.url, f"SELECT * FROM orders WHERE created_at < '{CUTOFF}'")
    job_id = enqueue(h.with_env(**env), "--mode", "copy")
    log_a = h.tmp / "a.log"
    a = start_worker({**env, "ARCHIVER_FAILPOINTS": "upload_staged=sleep:0.3"}, log=log_a)
    deadline = time.monotonic() + 60
    while log_a.read_text().count("failpoint upload_staged reached") < 4:  # ranges uploaded
        assert time.monotonic() < deadline, log_a.read_text()
        time.sleep(0.05)
    a.kill()
    a.wait(10)
    assert h.value("SELECT count(*) FROM archive_files") == 0
    b = start_worker(env, log=h.tmp / "b.log")
    assert h.wait_for(job_id, "completed")["attempts"] == 2
    assert stop(b) == 0
    assert_archived_once(h.archived(), expected)
    assert h.blobs() == sorted(catalog_paths(h.url))  # the first attempt's uploads swept


def test_a_copy_failing_after_its_commit_keeps_its_files(h: Harness, fast: dict[str, str]) -> None:
    """An error after a copy's one catalog commit (here a failpoint; a COMMIT that
    errored on the client may have landed too) leaves its files alone: the retry finds
    them catalogued and the job done."""
    env = {**fast, **BACKLOG, "ARCHIVER_FAILPOINTS": "after_commit=raise"}
    seed_orders(h.url, 20_000)
    expected = rows_in_db(h.url, f"SELECT * FROM orders WHERE created_at < '{CUTOFF}'")
    job = enqueue(h.with_env(**env), "--mode", "copy")
    worker = start_worker(env, log=h.tmp / "w.log")
    assert h.wait_for(job, "completed")["attempts"] == 2
    assert stop(worker) == 0
    assert h.blobs() == sorted(catalog_paths(h.url))
    assert_archived_once(h.archived(), expected)


@pytest.mark.slow
def test_frozen_worker_past_its_lease(h: Harness, fast: dict[str, str]) -> None:
    """Frozen (SIGSTOP) mid-upload past its lease, the job is rescued; thawed, its lanes
    find the job gone and commit nothing."""
    env = {**fast, **BACKLOG}
    seed_orders(h.url, 20_000)
    expected = old_ids(h)
    job_id = enqueue(h.with_env(**env))
    log_a = h.tmp / "a.log"
    a = frozen_mid_upload(env, log_a)
    try:
        b = start_worker(env, log=h.tmp / "b.log")
        h.wait_for(job_id, "completed")
        assert stop(b) == 0
        catalogued = set(catalog_paths(h.url))
        etags = blob_etags(h.azurite.connection_string, h.container)
    finally:
        a.send_signal(signal.SIGCONT)
    wait_for_text(log_a, "no longer held")
    assert stop(a) == 0
    assert set(catalog_paths(h.url)) == catalogued  # the thawed lanes recorded nothing
    after = blob_etags(h.azurite.connection_string, h.container)
    assert all(after[p] == etags[p] for p in catalogued)  # nor wrote over a file
    stray = frozenset(after) - catalogued
    assert stray and all("-a001-" in s for s in stray)
    h.exactly_once(expected, stray_blobs=stray)


@pytest.mark.slow
def test_rows_updated_and_deleted_while_ranges_commit(h: Harness) -> None:
    """The application updates old rows (some to a new page, some no longer old) and
    deletes others while a move takes the table by pages: every row that stayed old is in
    one file or still in the table, the rows made new and the rows deleted in none."""
    h = h.with_env(**BACKLOG, ARCHIVER_FAILPOINTS="upload_staged=sleep:0.2")
    seed_orders(h.url, 20_000)
    old = sorted(old_ids(h))
    # the changes go to the old rows of the highest third of ids, on the table's last
    # pages, which the move takes last: a job faster than the loop's first turns (seen
    # under load: one row deleted, none made new) still leaves them in the table
    late = old[len(old) * 2 // 3 :]
    job = enqueue(h)
    worker = start_worker(h.env, "--burst", log=h.tmp / "w.log")
    rng = random.Random(7)
    deleted: set[int] = set()
    renewed: set[int] = set()
    while worker.poll() is None:
        ids = rng.sample(late, 40)
        h.sql("UPDATE orders SET status = status WHERE id = ANY($1::bigint[])", ids[:20])  # moves
        gone = h.sql("DELETE FROM orders WHERE id = ANY($1::bigint[]) RETURNING id", ids[20:30])
        deleted |= {r["id"] for r in gone}
        made_new = h.sql(
            "UPDATE orders SET created_at = '2024-12-31' WHERE id = ANY($1::bigint[]) RETURNING id",
            ids[30:],
        )
        renewed |= {r["id"] for r in made_new}
        time.sleep(0.05)
    assert worker.wait() == 0
    assert h.wait_for(job, "completed")
    assert deleted and renewed
    archived = [r["id"] for r in h.archived()]
    assert len(archived) == len(set(archived)), "a row archived twice"
    assert not set(archived) & deleted, "a row the application deleted first was archived"
    assert not set(archived) & renewed, "a row the application made new first was archived"
    left = {r["id"] for r in h.sql("SELECT id FROM orders")}
    assert not set(archived) & left, "a row both archived and live"
    assert set(old) - deleted <= set(archived) | left, "a row lost"


@pytest.mark.slow
def test_a_copy_is_one_snapshot_while_rows_change(h: Harness) -> None:
    """Rows updated onto other pages, made new and deleted while a copy reads the table
    by pages on two connections: each connection reads the job's one snapshot, so no row
    is read twice (once on its old page, once on its new one) and none is missed."""
    h = h.with_env(**BACKLOG, ARCHIVER_FAILPOINTS="upload_staged=sleep:0.2")
    seed_orders(h.url, 20_000)
    old = sorted(old_ids(h))
    enqueue(h, "--mode", "copy")
    worker = start_worker(h.env, "--burst", log=h.tmp / "w.log")
    rng = random.Random(7)
    changed: set[int] = set()
    while worker.poll() is None:
        ids = rng.sample(old, 60)
        h.sql("UPDATE orders SET status = status WHERE id = ANY($1::bigint[])", ids[:40])
        h.sql("DELETE FROM orders WHERE id = ANY($1::bigint[])", ids[40:50])
        h.sql("UPDATE orders SET created_at = '2024-12-31' WHERE id = ANY($1::bigint[])", ids[50:])
        changed |= set(ids[40:])
        time.sleep(0.02)
    assert worker.wait() == 0
    archived = [r["id"] for r in h.archived()]
    assert len(archived) == len(set(archived)), "a row copied twice"
    assert set(archived) <= set(old), "a row newer than the cutoff copied"
    assert set(old) - changed <= set(archived), "a row missed"


@pytest.mark.slow
def test_a_split_backlog_is_shared_by_the_free_workers_each_row_once_under_sigkill(
    h: Harness, fast: dict[str, str]
) -> None:
    """`enqueue --parallel 3` of a backlog: three jobs, each a span of the table's pages,
    taken by whichever worker is free; one killed after its first range's commit, its
    job rescued by another; every old row archived once."""
    env = {**fast, **BACKLOG}
    h = h.with_env(**BACKLOG)
    seed_orders(h.url, 30_000)
    expected = old_ids(h)
    args = ("--table", "orders", "--before", CUTOFF, "--chunk-rows", "2000", "--parallel", "3")
    dry = h.cli("enqueue", *args, "--dry-run")
    assert dry.returncode == 0 and "one of 3 shares of a --parallel backlog" in dry.stdout, dry
    jobs = h.enqueue(*args)
    assert len(jobs) == 3
    spans = [
        json.loads(h.value("SELECT payload FROM background_jobs WHERE id = $1::uuid", j))["pages"]
        for j in jobs
    ]
    pages = h.value("SELECT pg_relation_size('orders') / current_setting('block_size')::int")
    assert spans[0]["first"] == 0 and spans[-1]["end"] is None and pages > 30
    assert [s["end"] for s in spans[:-1]] == [s["first"] for s in spans[1:]]  # no gap, no overlap
    kill_at_failpoint(env, "after_commit", h.tmp / "a.log")  # one range of its job committed
    killed = [j for j in jobs if f"job {j}" in (h.tmp / "a.log").read_text()]
    assert len(killed) == 1
    workers = [start_worker(env, log=h.tmp / f"{name}.log") for name in ("b", "c")]
    rows = [h.wait_for(j, "completed", timeout=120) for j in jobs]
    assert all(stop(w) == 0 for w in workers)
    completed = {
        name: [j for j in jobs if f"job {j}: completed" in (h.tmp / f"{name}.log").read_text()]
        for name in ("b", "c")
    }
    assert all(completed.values()), completed  # both took a share
    assert sorted(j for done in completed.values() for j in done) == sorted(jobs)
    assert [r["attempts"] for r in rows] == [2 if j in killed else 1 for j in jobs]
    for job, span in zip(jobs, spans, strict=True):
        done = progress(h, job)
        assert done["plan"] == "backlog"
        assert (done["backlog"].get("first", 0), done["backlog"].get("end")) == (
            span["first"],
            span["end"],
        )
    assert h.value(f"SELECT count(*) FROM orders WHERE created_at < '{CUTOFF}'") == 0
    h.exactly_once(expected)
