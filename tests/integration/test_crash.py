"""A worker killed (SIGKILL) at each failpoint of a chunk, mid-write, frozen past its
lease, or around a separate source database's commit: real processes, real
PostgreSQL, real Azurite; the invariant checked by primary key."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import Azurite
from tests.support import (
    fresh_database,
    kill_at_failpoint,
    run_cli,
    sql,
    sql_value,
    start_worker,
    wait_for_status,
    wait_for_text,
)
from tests.support.crash import CUTOFF, blob_etags, enqueue, frozen_mid_upload, old_ids, stop
from tests.support.exactly_once import assert_exactly_once
from tests.support.harness import Harness


@pytest.mark.parametrize(
    "point", ["before_upload", "upload_staged", "before_commit", "after_commit"]
)
@pytest.mark.slow
def test_sigkill_at_each_point_of_a_chunk(h: Harness, fast: dict[str, str], point: str) -> None:
    seed_orders(h.url, 20_000)
    expected = old_ids(h.url)
    job_id = enqueue(fast)
    log_a = h.tmp / "a.log"
    kill_at_failpoint(fast, point, log_a)

    log_b = h.tmp / "b.log"
    b = start_worker(fast, log=log_b)
    row = h.wait_for(job_id, "completed")
    assert stop(b) == 0
    assert "lease expired" in log_b.read_text()
    assert row["attempts"] == 2
    assert h.value(f"SELECT count(*) FROM orders WHERE created_at < '{CUTOFF}'") == 0
    h.exactly_once(expected)


@pytest.mark.slow
def test_a_worker_killed_mid_write_on_local_storage_leaves_no_partial_file(
    fast: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    """file:// storage writes a file as a hidden .partial beside its name while the
    Parquet writer runs; the rescuing attempt deletes the dead attempt's before its own."""
    import pyarrow.parquet as pq

    root = tmp_path / "archive"
    env = {**fast, "ARCHIVER_STORAGE_URL": f"file://{root}"}
    seed_orders(database_url, 20_000)
    expected = old_ids(database_url)
    job_id = enqueue(env)
    kill_at_failpoint(env, "before_upload", tmp_path / "a.log")
    assert [p.name for p in root.rglob("*.partial")] != []  # what the kill left

    b = start_worker(env, log=tmp_path / "b.log")
    assert wait_for_status(database_url, job_id, "completed")["attempts"] == 2
    assert stop(b) == 0
    assert list(root.rglob("*.partial")) == []
    paths = [r["path"] for r in sql(database_url, "SELECT path FROM archive_files")]
    archived = [i for p in paths for i in pq.read_table(root / p, columns=["id"])["id"].to_pylist()]
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and "_delta_log" not in p.parts) == sorted(paths)  # fmt: skip
    left = {r["id"] for r in sql(database_url, "SELECT id FROM orders")} & expected
    assert len(archived) == len(set(archived)) and set(archived) | left == expected
    assert not set(archived) & left


@pytest.fixture
def source_url(database_url: str) -> Iterator[str]:
    """The application's tables in a database of their own (ARCHIVER_SOURCE_URL)."""
    with fresh_database("archiver_src") as url:
        yield url


@pytest.mark.parametrize(
    ("point", "outcome"), [("before_commit", "aborted"), ("source_committed", "committed")]
)
@pytest.mark.slow
def test_separate_source_database_crash_around_its_commit(
    fast: dict[str, str],
    database_url: str,
    source_url: str,
    azurite: Azurite,
    container: str,
    tmp_path: Path,
    point: str,
    outcome: str,
) -> None:
    """Catalog and source in different databases: the file is recorded pending (with the
    source transaction id) before the source COMMIT. Killed on either side of that
    COMMIT, the next attempt asks the source whether it committed, and confirms the file
    or forgets it (and its blob)."""
    env = {**fast, "ARCHIVER_SOURCE_URL": source_url}
    seed_orders(source_url, 20_000)
    expected = old_ids(source_url)
    job_id = enqueue(env)
    log_a = tmp_path / "a.log"
    kill_at_failpoint(env, point, log_a)
    pending = sql(database_url, "SELECT part, state, source_xid FROM archive_files")
    assert [(r["part"], r["state"]) for r in pending] == [(1, "pending")]
    assert pending[0]["source_xid"] is not None

    log_b = tmp_path / "b.log"
    b = start_worker(env, log=log_b)
    wait_for_status(database_url, job_id, "completed")
    assert stop(b) == 0
    assert f"part 1 was {outcome} before a crash" in log_b.read_text()
    assert (
        sql_value(database_url, "SELECT count(*) FROM archive_files WHERE state <> 'committed'")
        == 0
    )
    assert sql_value(source_url, f"SELECT count(*) FROM orders WHERE created_at < '{CUTOFF}'") == 0
    left = {r["id"] for r in sql(source_url, "SELECT id FROM orders")}
    assert not left & expected
    assert_exactly_once(
        database_url, azurite.connection_string, container, expected, source_url=source_url
    )


@pytest.mark.slow
def test_frozen_worker_cannot_overwrite_its_rescuers_files(
    h: Harness, fast: dict[str, str]
) -> None:
    """A worker frozen mid-upload (SIGSTOP) past its lease is rescued; when it thaws and
    finishes its upload, the attempt number in the name keeps it off the rescuer's files,
    and its checkpoint finds the job gone (found by review: it used to overwrite part 1)."""
    seed_orders(h.url, 20_000)
    expected = old_ids(h.url)
    job_id = enqueue(fast)
    log_a = h.tmp / "a.log"
    a = frozen_mid_upload(fast, log_a)
    try:
        b = start_worker(fast, log=h.tmp / "b.log")
        h.wait_for(job_id, "completed")
        assert stop(b) == 0
        catalogued = [r["path"] for r in h.sql("SELECT path FROM archive_files")]
        etags = blob_etags(h.azurite.connection_string, h.container)
    finally:
        a.send_signal(signal.SIGCONT)
    wait_for_text(log_a, "no longer held")
    assert stop(a) == 0
    after = blob_etags(h.azurite.connection_string, h.container)
    assert all(after[p] == etags[p] for p in catalogued)  # the rescuer's files untouched
    stray = frozenset(after) - set(catalogued)
    assert len(stray) == 1 and "-a001-part-00001" in next(iter(stray))
    verify = run_cli(fast, "verify")
    assert verify.returncode == 1 and next(iter(stray)) in verify.stdout + verify.stderr
    # The frozen worker's rows were locked, so skipped by the rescuer: still in the table.
    h.exactly_once(expected, stray_blobs=stray)
