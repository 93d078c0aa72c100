"""Retention (`archiver purge`, a policy's `retain`): files wholly older than the limit
leave the catalog, the Delta table and storage, through SIGKILLs at each step, with a
ledger row; a file spanning the limit stays; protected files are refused by date."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from archiver.testing.reference import seed_orders
from tests.support import (
    archiver_cmd,
    assert_refused,
    start_process,
    start_worker,
    wait_for_text,
    wait_until,
)
from tests.support.delta import delta
from tests.support.harness import Harness

# 6,000 orders one minute apart, the newest 30 days ago; files of 1,000 (ids 1-1000 the
# newest). With a limit of 31 days: ids 2001-6000 (files 3-6) lie wholly before it, the
# file of ids 1001-2000 spans it, ids 1-1000 are newer.
KEPT = set(range(1, 2001))
NOW = dt.datetime.now(dt.UTC).isoformat()  # a cutoff after every row of these tests
PURGED = set(range(2001, 6001))


@pytest.fixture
def d(h: Harness) -> Harness:
    return h.with_env(ARCHIVER_DELTA="true")


def recent_orders(h: Harness) -> None:
    """Orders whose newest row is 30 days old today, archived in files of 1,000."""
    seed_orders(h.url, 6000)
    h.sql(
        "UPDATE orders SET created_at = created_at "
        "+ (date_trunc('minute', now()) - interval '30 days' - timestamptz '2025-01-01')"
    )
    h.archive("--table", "orders", "--before", NOW, "--chunk-rows", "1000")
    assert h.value("SELECT count(*) FROM archive_files") == 6


def ledger(h: Harness) -> list[Any]:
    return h.sql(
        "SELECT operation, status, rows, tables, request::text AS request, detail::text AS detail "
        "FROM archive_ledger ORDER BY id"
    )


def settled(h: Harness, archived: set[int]) -> None:
    """The catalog, the blobs, the Delta table and verify agree on exactly `archived`."""
    h.drain()  # the publication that takes retired files out, and the sweep
    h.exactly_once(archived)
    assert {r["id"] for r in h.archived()} == archived
    ids = delta(h).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == sorted(archived)
    verified = h.cli("verify", "--table", "public.orders")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_purge_takes_what_lies_wholly_before_the_limit(d: Harness) -> None:
    h = d
    recent_orders(h)
    before = h.blobs()

    dry = h.cli("purge", "--table", "orders", "--older-than", "31 days", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would purge 4000 rows in 4 files" in dry.stdout
    assert dry.stdout.count("public.orders/job-") == 4  # the files listed
    assert "kept 1 file whose rows span the limit" in dry.stderr
    assert h.blobs() == before and not ledger(h)

    done = h.cli("purge", "--table", "orders", "--older-than", "31d")
    assert done.returncode == 0, done.stderr
    assert "purged 4000 rows in 4 files (ledger 1)" in done.stdout
    [entry] = ledger(h)
    assert (entry["operation"], entry["status"], entry["rows"]) == ("purge", "done", 4000)
    assert entry["tables"] == ["public.orders"]
    assert '"older_than": "31 days"' in entry["request"] and '"before"' in entry["request"]
    assert entry["detail"].count("public.orders/job-") == 4  # which files
    settled(h, KEPT)
    assert len(h.blobs()) == 2

    # nothing more goes until the spanning file is wholly past the limit
    again = h.cli("purge", "--table", "orders", "--older-than", "31 days")
    assert "purged 0 rows in 0 files" in again.stdout
    assert h.cli("purge", "--table", "orders", "--older-than", "29 days").returncode == 0
    settled(h, set())


def kill_purge_at(h: Harness, point: str, log: Path) -> None:
    proc = start_process(
        archiver_cmd("purge", "--table", "orders", "--older-than", "31 days"),
        {**h.env, "ARCHIVER_FAILPOINTS": f"{point}=pause"},
        log,
    )
    wait_for_text(log, f"failpoint {point} reached")
    proc.kill()
    proc.wait(10)


def test_a_purge_killed_before_its_commit_changes_nothing(d: Harness, tmp_path: Path) -> None:
    h = d
    recent_orders(h)
    kill_purge_at(h, "purge_before_commit", tmp_path / "purge.log")
    assert [r["status"] for r in ledger(h)] == ["running"]
    assert not h.value("SELECT count(*) FROM archive_files WHERE state = 'retired'")
    settled(h, KEPT | PURGED)  # the sweep: abandoned, every file where it was
    assert [r["status"] for r in ledger(h)] == ["abandoned"]
    done = h.cli("purge", "--table", "orders", "--older-than", "31 days")
    assert done.returncode == 0, done.stderr
    settled(h, KEPT)


def test_a_purge_killed_after_its_commit_is_finished_by_the_sweep(
    d: Harness, tmp_path: Path
) -> None:
    h = d
    recent_orders(h)
    kill_purge_at(h, "purge_committed", tmp_path / "purge.log")
    # retired, not yet deleted: known to the catalog, skipped by verify, still published
    assert h.value("SELECT count(*) FROM archive_files WHERE state = 'retired'") == 4
    assert len(h.blobs()) == 6
    verified = h.cli("verify", "--table", "orders")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    settled(h, KEPT)
    assert [r["status"] for r in ledger(h)] == ["done"]


def test_protected_files_are_refused_naming_the_date(h: Harness) -> None:
    recent_orders(h)
    # what `archiver protect` records once Azure has set the policy (Azurite answers
    # 501 to per-blob immutability: tests/unit/test_azure_requests.py has the requests)
    h.sql(
        "UPDATE archive_files SET immutable_until = '2031-01-01' WHERE id = "
        "(SELECT max(id) FROM archive_files)"
    )
    refused = h.cli("purge", "--table", "orders", "--older-than", "31 days")
    assert_refused(refused, "1 under an immutability policy until 2031-01-01", code=1)
    assert not ledger(h) and len(h.blobs()) == 6
    done = h.cli("purge", "--table", "orders", "--older-than", "31 days", "--skip-protected")
    assert "purged 3000 rows in 3 files" in done.stdout, done.stderr
    assert "kept, for their protection: 1 under an immutability policy" in done.stderr

    protect = h.cli("protect", "--table", "orders", "--legal-hold")
    assert_refused(protect, "cannot protect", code=1)  # Azurite: 501, not emulated
    assert not h.value("SELECT count(*) FROM archive_files WHERE legal_hold")


def test_bad_input_is_one_line_and_changes_nothing(h: Harness) -> None:
    recent_orders(h)
    for args, says in (
        (["--older-than", "seven years"], "expected a period such as"),
        (["--older-than", "0 days"], "expected a period such as"),
        (["--older-than", "5 minutes"], "expected a period such as"),
    ):
        out = h.cli("purge", "--table", "orders", *args)
        assert_refused(out, says, code=1)
    out = h.cli("purge", "--table", "nosuch", "--older-than", "1 day")
    assert out.returncode == 1 and "no archived files of table 'nosuch'" in out.stderr
    assert not ledger(h) and len(h.blobs()) == 6


def test_a_policy_retains_its_table_for_its_period(d: Harness, tmp_path: Path) -> None:
    """The scheduler queues a purge with each slot of a policy with `retain`; a worker
    runs it."""
    h = d
    recent_orders(h)
    config = tmp_path / "archiver.toml"
    config.write_text(
        "[[policy]]\n"
        'name = "orders-nightly"\ntable = "orders"\nolder_than = "1 days"\n'
        'schedule = "*/2 * * * * *"\nretain = "31 days"\n'
    )
    env = {**h.env, "ARCHIVER_CONFIG": str(config)}
    scheduler = start_process(archiver_cmd("scheduler"), env, tmp_path / "scheduler.log")
    try:
        wait_until(
            lambda: h.value("SELECT count(*) FROM background_jobs WHERE task_name = 'purge'"),
            what="a purge job",
        )
    finally:
        scheduler.terminate()
        scheduler.wait(30)
    worker = start_worker(env, "--burst", log=tmp_path / "worker.log")
    assert worker.wait(120) == 0
    [entry] = ledger(h)
    assert (entry["operation"], entry["rows"]) == ("purge", 4000)
    settled(h, KEPT)


def test_an_aggregate_is_purged_chunk_by_chunk(h: Harness) -> None:
    """Orders archived --with-children: their lines' files go with the chunks whose
    orders go; a chunk with one protected file stays whole."""
    h.sql(
        "CREATE TABLE orders (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);"
        "CREATE TABLE order_lines (order_id bigint REFERENCES orders ON DELETE CASCADE, "
        "line int, PRIMARY KEY (order_id, line));"
        "INSERT INTO orders SELECT g, now() - interval '30 days' - g * interval '1 minute' "
        "FROM generate_series(1, 6000) g;"
        "INSERT INTO order_lines SELECT id, l FROM orders, generate_series(1, 2) l"
    )
    h.archive("--table", "orders", "--before", NOW, "--with-children",
              "--chunk-rows", "1000")  # fmt: skip
    assert h.value("SELECT count(*) FROM archive_files") == 12
    # the lines of the oldest chunk under a legal hold, as `protect` records it
    h.sql(
        "UPDATE archive_files SET legal_hold = true WHERE id = (SELECT id FROM archive_files "
        "WHERE source_table = 'public.order_lines' ORDER BY min_key[1]::bigint DESC LIMIT 1)"
    )
    refused = h.cli("purge", "--table", "orders", "--older-than", "31 days")
    assert refused.returncode == 1 and "1 under a legal hold" in refused.stderr
    done = h.cli("purge", "--table", "orders", "--older-than", "31 days", "--skip-protected")
    assert done.returncode == 0, done.stderr
    assert "purged 9000 rows in 6 files" in done.stdout  # 3 chunks: 3,000 orders, 6,000 lines
    h.drain()
    orders = {r["id"] for r in h.archived("public.orders")}
    lines = {r["order_id"] for r in h.archived("public.order_lines")}
    assert orders == lines == set(range(1, 2001)) | set(range(5001, 6001))
    for table in ("public.orders", "public.order_lines"):
        assert h.cli("verify", "--table", table).returncode == 0
    out = h.cli("purge", "--table", "order_lines", "--older-than", "1 day")
    assert out.returncode == 1 and "archived with its parents" in out.stderr


def test_files_on_another_storage_are_left_to_a_run_there(h: Harness) -> None:
    recent_orders(h)
    h.sql(
        "UPDATE archive_files SET storage_url = 'az://old/archive' WHERE id = "
        "(SELECT max(id) FROM archive_files)"
    )
    done = h.cli("purge", "--table", "orders", "--older-than", "31 days")
    assert done.returncode == 0, done.stderr
    assert "purged 3000 rows in 3 files" in done.stdout
    assert "1 file of public.orders on az://old/archive, not" in done.stderr
