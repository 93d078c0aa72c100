"""Access tiers, index tags and rehydration on a real Azurite (which emulates tiers,
tags, find-by-tags and the 409 BlobArchived of a read): files written in the configured
tier with their tags; Archive only for verified files, offline files out of the Delta
table while readers go on; restore and verify refuse them in one line naming
`archiver rehydrate`; a SIGKILL mid-move and a lifecycle rule behind archiver's back
end with every row archived exactly once."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient

from archiver.testing.reference import seed_orders
from tests.support import archiver_cmd, assert_refused, start_process, wait_for_text
from tests.support.console import one_page
from tests.support.delta import delta
from tests.support.harness import Harness


def refused_in_one_line(result: subprocess.CompletedProcess[str], *says: str) -> None:
    assert_refused(result, *says, code=1)


IDS = set(range(1, 3001))


@pytest.fixture
def t(h: Harness) -> Harness:
    """3,000 orders archived in three files written in the Cool tier, published."""
    h = h.with_env(ARCHIVER_DELTA="true", ARCHIVER_ACCESS_TIER="Cool")
    seed_orders(h.url, 3000)
    h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")
    return h


def container(h: Harness) -> Any:
    service = BlobServiceClient.from_connection_string(h.azurite.connection_string)
    return service.get_container_client(h.container)


def tiers(h: Harness) -> list[str]:
    return sorted(
        container(h).get_blob_client(b).get_blob_properties().blob_tier for b in h.blobs()
    )


def published_rows(h: Harness) -> int:
    h.drain()
    return int(delta(h).to_pyarrow_table(columns=["id"]).num_rows)


def test_files_carry_their_tier_and_tags_and_archive_tier_files_go_offline(t: Harness) -> None:
    h = t
    assert tiers(h) == ["Cool"] * 3
    tags = container(h).get_blob_client(h.blobs()[0]).get_blob_tags()
    assert tags["archiver-table"] == "public.orders"
    assert set(tags) == {
        "archiver-table",
        "archiver-job",
        "archiver-cutoff-min",
        "archiver-cutoff-max",
    }
    job = tags["archiver-job"]
    found = container(h).find_blobs_by_tags(
        f"\"archiver-job\" = '{job}' AND \"archiver-cutoff-max\" < '2024-12-31T12'"
    )
    assert len(list(found)) == 2  # the two older files of the three

    # Archive only for files verify found sound: they cannot be read there
    refused_in_one_line(
        h.cli("tier", "--table", "orders", "--tier", "Archive"), "were not verified"
    )
    assert tiers(h) == ["Cool"] * 3
    assert h.cli("verify", "--table", "public.orders").returncode == 0
    moved = h.cli("tier", "--table", "orders", "--tier", "Archive")
    assert moved.returncode == 0, moved.stderr
    assert "moved 3 files to Archive" in moved.stdout
    assert tiers(h) == ["Archive"] * 3
    assert h.value("SELECT count(*) FROM archive_files WHERE offline AND tier = 'Archive'") == 3
    # out of the Delta table before the bytes went offline: readers go on, on no file
    assert published_rows(h) == 0
    # a query never answers over less than the archive: naming them, it refuses
    refused_in_one_line(
        h.cli("query", "SELECT count(*) FROM orders"), "Archive tier", "archiver rehydrate"
    )
    refused_in_one_line(
        h.cli("query", "--with-live", "SELECT count(*) FROM public.orders"),
        "Archive tier",
        "archiver rehydrate",
    )

    refused_in_one_line(h.cli("restore", "--table", "orders"), "Archive tier", "archiver rehydrate")
    refused_in_one_line(
        h.cli("verify", "--table", "public.orders"), "Archive tier", "archiver rehydrate"
    )
    status, page = one_page(h, h.tmp, "/archive/public.orders")
    assert status == 200 and "<td>Archive</td><td>3</td><td>3</td>" in page
    assert "archiver rehydrate --table public.orders" in page
    skipped = h.cli("verify", "--table", "public.orders", "--skip-offline")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert h.keys() == set()

    back = h.cli("rehydrate", "--table", "orders", "--tier", "Cool")
    assert back.returncode == 0, back.stderr
    assert "3 back online" in back.stdout  # Azurite rehydrates at once; Azure takes hours
    assert tiers(h) == ["Cool"] * 3
    assert published_rows(h) == 3000
    h.exactly_once(IDS)
    assert h.cli("verify", "--table", "public.orders").returncode == 0


def test_a_tier_move_killed_midway_comes_back_whole(t: Harness, tmp_path: Path) -> None:
    h = t
    assert h.cli("verify", "--table", "public.orders").returncode == 0
    log = tmp_path / "tier.log"
    proc = start_process(
        archiver_cmd("tier", "--table", "orders", "--tier", "Archive"),
        {**h.env, "ARCHIVER_FAILPOINTS": "tier_moved=pause"},
        log,
    )
    wait_for_text(log, "failpoint tier_moved reached")
    proc.kill()
    proc.wait(10)
    # every file marked offline (and out of the Delta table) before the first moved
    assert tiers(h) == ["Archive", "Cool", "Cool"]
    assert h.value("SELECT count(*) FROM archive_files WHERE offline") == 3
    assert published_rows(h) == 0
    again = h.cli("tier", "--table", "orders", "--tier", "Archive")
    assert again.returncode == 0, again.stderr
    assert tiers(h) == ["Archive"] * 3
    assert h.cli("rehydrate", "--table", "orders").returncode == 0
    assert tiers(h) == ["Hot"] * 3
    assert published_rows(h) == 3000
    h.exactly_once(IDS)
    assert h.cli("verify", "--table", "public.orders").returncode == 0


def test_a_file_a_lifecycle_rule_archived_is_found_and_taken_offline(t: Harness) -> None:
    """An Azure lifecycle rule moves blobs without telling archiver: the first read
    that meets one says so in one line and takes it out of the Delta table."""
    h = t
    first = sorted(h.blobs())[0]
    container(h).get_blob_client(first).set_standard_blob_tier("Archive")
    refused_in_one_line(
        h.cli("verify", "--table", "public.orders"), "Archive tier", "archiver rehydrate"
    )
    assert [r[0] for r in h.sql("SELECT path FROM archive_files WHERE offline")] == [first]
    assert published_rows(h) == 2000
    refused_in_one_line(h.cli("restore", "--table", "orders"), "Archive tier", "archiver rehydrate")
    assert h.keys() == set()
    assert "1 back online" in h.cli("rehydrate", "--table", "orders").stdout
    assert published_rows(h) == 3000
    h.exactly_once(IDS)


def test_tiers_need_azure_and_known_names(h: Harness, tmp_path: Path) -> None:
    local = h.with_env(
        ARCHIVER_STORAGE_URL=f"file://{tmp_path}/archive", ARCHIVER_ACCESS_TIER="Cool"
    )
    refused_in_one_line(
        local.cli("verify"), "ARCHIVER_ACCESS_TIER and ARCHIVER_ENCRYPTION_SCOPE need Azure"
    )
    bad = h.with_env(ARCHIVER_ACCESS_TIER="Archive")
    refused_in_one_line(bad.cli("verify"), "ARCHIVER_ACCESS_TIER: expected one of Hot, Cool, Cold")


def test_a_name_is_never_written_twice(h: Harness, tmp_path: Path) -> None:
    """Write-once containers refuse an overwrite; archiver never asks for one: a commit
    over an existing name is refused by the service (If-None-Match: *) and the first
    file stays as it was."""
    from archiver.config import Settings
    from archiver.errors import StorageError
    from archiver.storage import open_storage
    from archiver.storage.seam import put_file

    storage = open_storage(Settings.from_env(h.env))
    storage.check()
    local = tmp_path / "f"
    local.write_bytes(b"first")
    name = storage.object_name("public.t/job-x-a001-part-00001.parquet")
    put_file(storage, name, local)
    local.write_bytes(b"second, longer")
    with pytest.raises(StorageError, match=r"already exists .* archiver never overwrites"):
        put_file(storage, name, local)
    stored = storage.stat(name)
    assert stored is not None and stored.size == len(b"first")


def test_a_job_or_a_policy_chooses_its_tier(h: Harness) -> None:
    seed_orders(h.url, 100)
    h.archive("--table", "orders", "--before", "2025-01-01", "--tier", "Cold")
    assert tiers(h) == ["Cold"]
    assert h.value("SELECT tier FROM archive_files") == "Cold"
    local = h.with_env(ARCHIVER_STORAGE_URL="file:///tmp/archiver-no-tiers")
    refused_in_one_line(local.cli("enqueue", "--table", "orders", "--before", "2025-01-01", "--tier", "Cool"),
             "access tiers need Azure storage")  # fmt: skip
