"""`archiver verify`: every catalogued file re-read and checked; deleted, truncated and
unknown blobs are named and make it exit non-zero."""

from __future__ import annotations

import uuid

from azure.storage.blob import BlobServiceClient

from archiver.testing.reference import seed_orders
from tests.support import start_worker, wait_for_text
from tests.support.harness import Harness


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


def test_an_upload_in_flight_is_not_a_stray(h: Harness) -> None:
    """A job's file uploaded and not yet committed (its worker paused before the commit)
    is its writer's, not a problem: `verify` while the nightly jobs run said "not in
    the catalog" of each upload in flight. A job's name whose job is not at work is
    still named, and so is the upload once its job has failed for good."""
    seed_orders(h.url, 3000)
    (job,) = h.enqueue("--table", "orders", "--before", "2025-01-01")
    log = h.tmp / "worker.log"
    paused = {**h.env, "ARCHIVER_FAILPOINTS": "before_commit=pause"}
    worker = start_worker(paused, log=log)
    wait_for_text(log, "failpoint before_commit reached")
    (uploaded,) = h.blobs()
    stray = f"archive/public.orders/job-{uuid.uuid4()}-a001-part-00001.parquet"
    client = BlobServiceClient.from_connection_string(
        h.azurite.connection_string
    ).get_container_client(h.container)
    client.upload_blob(stray, b"no job wrote this")
    during = h.cli("verify")
    assert during.returncode != 0
    assert during.stdout.splitlines() == [f"{stray}: not in the catalog"], during.stdout
    worker.kill()
    worker.wait(10)
    h.sql(
        "UPDATE background_jobs SET status = 'failed', finished_at = now() WHERE id = $1::uuid", job
    )
    after = h.cli("verify")
    assert sorted(after.stdout.splitlines()) == sorted(
        [f"{uploaded}: not in the catalog", f"{stray}: not in the catalog"]
    ), after.stdout
