"""`archiver restore`: by job or by cutoff range (reading only overlapping files), into
the original table or another, conflicts refused or skipped, dry runs and failures
changing nothing. (Rows leaving the archive as they go back: tests/integration/test_restore_move.py.)"""

from __future__ import annotations

from azure.storage.blob import BlobServiceClient

from archiver.testing.reference import seed_orders
from tests.support import assert_refused, sql_value
from tests.support.harness import Harness


def same_rows(url: str, a: str, b: str) -> bool:
    return all(
        sql_value(url, f"SELECT count(*) FROM (SELECT * FROM {x} EXCEPT ALL SELECT * FROM {y}) d")
        == 0
        for x, y in ((a, b), (b, a))
    )


def move_all(h: Harness, rows: int) -> str:
    seed_orders(h.url, rows)
    h.sql("CREATE TABLE snapshot AS SELECT * FROM orders")
    job = h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")
    assert h.value("SELECT count(*) FROM orders") == 0
    return job


def test_restore_by_range_reads_only_overlapping_files(h: Harness) -> None:
    move_all(h, 6000)  # row g is g minutes before 2025-01-01: 6 files
    lo, hi = "2024-12-28T12:00:00+00:00", "2024-12-29T06:00:00+00:00"
    overlapping = [
        r["path"]
        for r in h.sql(
            "SELECT path FROM archive_files WHERE max_cutoff_value >= $1::text::timestamptz "
            "AND min_cutoff_value < $2::text::timestamptz ORDER BY path",
            lo,
            hi,
        )
    ]
    others = [
        r["path"]
        for r in h.sql("SELECT path FROM archive_files ORDER BY path")
        if r["path"] not in overlapping
    ]
    assert 1 < len(overlapping) < 6 and others
    # A file outside the range is gone: a restore that read it would fail.
    client = BlobServiceClient.from_connection_string(
        h.azurite.connection_string
    ).get_container_client(h.container)
    client.delete_blob(others[0])
    expected = h.value(
        "SELECT count(*) FROM snapshot WHERE created_at >= $1::text::timestamptz "
        "AND created_at < $2::text::timestamptz",
        lo,
        hi,
    )

    dry = h.cli("restore", "--table", "orders", "--from", lo, "--to", hi, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert sorted(p for p in overlapping if p in dry.stdout) == overlapping
    assert not any(p in dry.stdout for p in others)
    assert f"would restore {expected} rows from {len(overlapping)} files" in dry.stdout
    assert h.value("SELECT count(*) FROM orders") == 0

    done = h.cli("restore", "--table", "orders", "--from", lo, "--to", hi)
    assert done.returncode == 0, done.stderr
    assert all(p in done.stderr for p in overlapping)  # progress, per file
    assert f"restored {expected} rows" in done.stdout
    h.sql(
        "CREATE TABLE in_range AS SELECT * FROM snapshot WHERE created_at >= $1::text::timestamptz "
        "AND created_at < $2::text::timestamptz",
        lo,
        hi,
    )
    assert same_rows(h.url, "orders", "in_range")


def test_restore_into_original_refuses_conflicts_then_skips_them(h: Harness) -> None:
    job = move_all(h, 3000)
    first = h.cli("restore", "--job", job, "--keep-archive")  # a copy: the files stay
    assert first.returncode == 0, first.stderr
    assert same_rows(h.url, "orders", "snapshot")

    h.sql("DELETE FROM orders WHERE id % 2 = 0")
    refused = h.cli("restore", "--job", job)
    assert_refused(
        refused, "already in", f"public.orders/job-{job}-a001-part-00001.parquet have keys"
    )
    assert h.value("SELECT count(*) FROM orders") == 1500  # unchanged

    skipped = h.cli("restore", "--job", job, "--on-conflict", "skip")
    assert skipped.returncode == 0, skipped.stderr
    assert "restored 1500 rows" in skipped.stdout
    assert same_rows(h.url, "orders", "snapshot")
    # the rows skipped stay archived (their keys are live with other values, maybe):
    # each file rewritten with only those
    assert "they left the archive: 3 files rewritten without them" in skipped.stdout
    assert sorted(r["id"] for r in h.archived()) == list(range(1, 3001, 2))

    # a copy of a range skipping conflicts counts what went in, as a move does
    h.sql("DELETE FROM orders WHERE id % 4 = 1")
    since = ("--table", "orders", "--from", "2000-01-01")  # a range: bound parameters
    copied = h.cli("restore", *since, "--keep-archive", "--on-conflict", "skip")
    assert copied.returncode == 0, copied.stderr
    assert "restored 750 rows" in copied.stdout, copied.stdout
    assert same_rows(h.url, "orders", "snapshot")


def test_restore_into_another_table_and_a_failure_changes_nothing(h: Harness) -> None:
    job = move_all(h, 3000)
    created = h.cli("restore", "--job", job, "--into", "orders_restored")
    assert created.returncode == 0, created.stderr
    assert same_rows(h.url, "orders_restored", "snapshot")
    assert h.value("SELECT count(*) FROM orders") == 0

    # The third file breaks a constraint: the first two files' rows are rolled back too.
    h.sql("CREATE TABLE picky (LIKE orders, CHECK (id <= 2500), PRIMARY KEY (id))")
    failed = h.cli("restore", "--job", job, "--into", "picky")
    assert failed.returncode != 0
    assert "nothing changed" in failed.stderr and "picky_id_check" in failed.stderr
    assert h.value("SELECT count(*) FROM picky") == 0


def test_restore_bad_input_is_one_line(h: Harness) -> None:
    for args, message in (
        (("restore",), "give either --job ID or --table T"),
        (("restore", "--table", "nosuch"), "no archived files match"),
        (("restore", "--table", "orders", "--from", "yesterday"), "--from: 'yesterday'"),
        (("restore", "--job", "1", "--table", "orders"), "give either"),
    ):
        result = h.cli(*args)
        assert result.returncode != 0
        assert result.stderr.startswith("archiver: error: ") and message in result.stderr, (
            result.stderr
        )
