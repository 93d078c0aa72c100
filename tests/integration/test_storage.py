"""Storage.upload against a real Azurite and a real directory: a file is sent while it is
written, and nothing is visible under its name before the commit."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from archiver.config import Settings, StorageLocation
from archiver.storage import azure as azure_module
from archiver.storage.azure import AzureStorage
from archiver.storage.local import LocalStorage
from archiver.storage.seam import HashingSink, file_md5
from archiver.testing.services import Azurite

BLOCK = 256 * 1024


def azure(azurite: Azurite, container: str, concurrency: int = 2) -> AzureStorage:
    settings = Settings.from_env(
        {
            "ARCHIVER_DATABASE_URL": "postgresql://unused@127.0.0.1/unused",
            "ARCHIVER_STORAGE_URL": f"az://{container}/archive",
            "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
            "ARCHIVER_UPLOAD_CONCURRENCY": str(concurrency),
        }
    )
    storage = AzureStorage(settings.storage_location(), settings)
    storage.check()
    return storage


def md5_of(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def pieces(data: bytes) -> list[bytes]:
    """Uneven writes, as a Parquet writer makes them: tiny ones and some over a block."""
    out: list[bytes] = []
    at, sizes = 0, [75, 3 * BLOCK + 17, 4096, 1, BLOCK - 1, 900_000]
    while at < len(data):
        size = sizes[len(out) % len(sizes)]
        out.append(data[at : at + size])
        at += size
    return out


def test_azure_blocks_are_staged_while_the_file_is_written(
    azurite: Azurite, container: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(azure_module, "BLOCK_SIZE", BLOCK)
    storage = azure(azurite, container)
    data = os.urandom(13 * BLOCK + 12_345)
    name = storage.object_name("t/part-1.parquet")
    upload = storage.upload(name)
    local = tmp_path / "part-1.parquet"
    with local.open("wb") as f:
        sink = HashingSink(f, upload)
        for piece in pieces(data):
            sink.write(piece)
    blob = storage.container.get_blob_client(name)
    # Before the commit: every complete block is on the service, the object is not.
    _, uncommitted = blob.get_block_list("uncommitted")
    assert len(uncommitted) >= 13 - 2  # at most `concurrency` still on their way
    assert storage.stat(name) is None
    assert sink.md5 == file_md5(local) and sink.size == len(data) == local.stat().st_size

    stored = upload.commit(sink.md5)
    upload.abort()  # safe after a commit

    assert (stored.size, stored.md5) == (len(data), sink.md5)
    assert blob.download_blob().readall() == data
    committed, _ = blob.get_block_list("committed")
    assert [b.size for b in committed] == [BLOCK] * 13 + [12_345]


def test_azure_aborted_upload_leaves_nothing_and_a_retry_commits(
    azurite: Azurite, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(azure_module, "BLOCK_SIZE", BLOCK)
    storage = azure(azurite, container)
    name = storage.object_name("t/part-1.parquet")
    first = storage.upload(name)
    first.write(os.urandom(5 * BLOCK))
    first.abort()
    assert storage.stat(name) is None
    # The retry stages blocks of its own ids: none of the first try's can slip in.
    data = os.urandom(2 * BLOCK + 1)
    retry = storage.upload(name)
    retry.write(data)
    assert retry.commit(md5_of(data)).size == len(data)
    assert storage.container.get_blob_client(name).download_blob().readall() == data


def test_an_empty_upload_commits_an_empty_object(azurite: Azurite, container: str) -> None:
    storage = azure(azurite, container)
    name = storage.object_name("t/empty")
    upload = storage.upload(name)
    stored = upload.commit(md5_of(b""))
    assert (stored.size, stored.md5) == (0, md5_of(b""))


def test_local_upload_appears_whole_at_commit_and_abort_leaves_nothing(tmp_path: Path) -> None:
    storage = LocalStorage(StorageLocation.parse(f"file://{tmp_path}/archive"))
    storage.check()
    data = os.urandom(3 * BLOCK)
    upload = storage.upload("t/part-1.parquet")
    for piece in pieces(data):
        upload.write(piece)
    assert storage.stat("t/part-1.parquet") is None
    assert list(storage.list("t/")) == []  # the .partial file is nobody's object
    md5 = md5_of(data)
    stored = upload.commit(md5)
    assert (stored.size, stored.md5) == (len(data), md5)
    assert (tmp_path / "archive" / "t" / "part-1.parquet").read_bytes() == data

    aborted = storage.upload("t/part-2.parquet")
    aborted.write(data)
    aborted.abort()
    assert sorted(p.name for p in (tmp_path / "archive" / "t").iterdir()) == ["part-1.parquet"]


def test_azure_deletes_many_in_batches_and_names_what_it_refused(
    azurite: Azurite, container: str
) -> None:
    """A blob batch per 256 names (a compaction's inputs, a Delta log's history go by the
    thousand): each sub-request read on its own, a blob gone already no refusal, one the
    service refuses (here under a lease: 412) kept and named."""
    from azure.storage.blob import ContainerClient

    storage = azure(azurite, container)
    client = ContainerClient.from_connection_string(azurite.connection_string, container)
    names = [storage.object_name(f"public.t/job-{i:04d}.parquet") for i in range(600)]
    for name in names:
        client.upload_blob(name, b"x")
    leased = names[300]
    client.get_blob_client(leased).acquire_lease()
    refused = storage.delete_many([*names, storage.object_name("public.t/missing.parquet")])
    assert list(refused) == [leased] and refused[leased].startswith("412"), refused
    assert [b.name for b in client.list_blobs()] == [leased]
    assert storage.delete_many([]) == {}
