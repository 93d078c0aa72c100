"""`archiver verify`: every catalogued file re-read and checked; deleted, truncated and
unknown blobs are named and make it exit non-zero."""

from __future__ import annotations

from azure.storage.blob import BlobServiceClient

from archiver.testing.reference import seed_orders
from tests.harness import Harness


def test_verify_names_deleted_truncated_and_unknown_blobs(h: Harness) -> None:
    seed_orders(h.url, 3000)
    job = h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")

    clean = h.cli("verify")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "verified 3 files: 0 problems" in clean.stderr

    deleted, truncated, intact = [
        r["path"] for r in h.sql("SELECT path FROM archive_files ORDER BY part")
    ]
    client = BlobServiceClient.from_connection_string(
        h.azurite.connection_string
    ).get_container_client(h.container)
    client.delete_blob(deleted)
    head = client.get_blob_client(truncated).download_blob().readall()[:500]
    client.upload_blob(truncated, head, overwrite=True)
    unknown = "archive/public.orders/job-stray-part-00001.parquet"
    client.upload_blob(unknown, b"not catalogued")

    cases: tuple[tuple[str, ...], ...] = ((), ("--table", "orders"), ("--job", job))
    for args in cases:
        result = h.cli("verify", *args)
        assert result.returncode != 0, args
        assert "archiver: error: verify found" in result.stderr
        lines = result.stdout.splitlines()
        assert f"{deleted}: missing" in lines
        assert any(line.startswith(f"{truncated}: size 500") for line in lines)
        assert any(line.startswith(f"{truncated}: md5") for line in lines)
        assert not any(line.startswith(intact) for line in lines)
        if args and args[0] == "--job":
            assert unknown not in result.stdout  # not this job's name
        else:
            assert f"{unknown}: not in the catalog" in lines


def test_verify_catches_a_file_that_disagrees_with_its_catalog_row(h: Harness) -> None:
    seed_orders(h.url, 1500)
    h.archive("--table", "orders", "--before", "2025-01-01")
    h.sql("UPDATE archive_files SET row_count = row_count + 1, max_key = '{99999}'")
    result = h.cli("verify")
    assert result.returncode != 0
    assert "1500 rows, catalog says 1501" in result.stdout
    assert "verified 1 file: 1 problem\n" in result.stderr, result.stderr
    h.sql("UPDATE archive_files SET row_count = row_count - 1")
    result = h.cli("verify")
    assert result.returncode != 0
    assert "catalog says ['1']..['99999']" in result.stdout, result.stdout
