"""Where Parquet files go. A strict seam between the archive pipeline and the network:
the pipeline only sees `Storage`; Azure Blob Storage and a local directory implement it,
and `MemoryStorage` ships beside them for fast tests.
Every method is synchronous and meant to run in a worker thread, next to the ADBC reads.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from archiver import failpoints
from archiver.config import Settings, StorageLocation
from archiver.errors import StorageError, first_line

_READ_BLOCK = 8 * 1024 * 1024
BLOCK_SIZE = 8 * 1024 * 1024  # per staged Azure block


@dataclass(frozen=True)
class StoredObject:
    """An object as the storage service reports it."""

    name: str  # full object name, prefix included
    size: int
    md5: str | None  # base64, as Azure's Content-MD5


class Storage(Protocol):
    """A flat namespace of immutable-once-verified files."""

    location: StorageLocation

    def check(self) -> None:
        """Raise StorageError unless the storage is reachable and writable."""

    def object_name(self, relative: str) -> str:
        """The full name of `relative` under this location's prefix."""

    def put_file(self, name: str, path: Path, md5: str) -> StoredObject:
        """Store `path` as `name`, replacing any earlier object of that name (an upload
        retried within the chunk); `md5` (base64) is sent along."""

    def stat(self, name: str) -> StoredObject | None: ...

    def list(self, prefix: str = "") -> Iterator[StoredObject]: ...

    def download(self, name: str, dest: Path) -> None: ...

    def delete(self, name: str) -> None: ...


def file_md5(path: Path) -> str:
    """Base64 MD5 of a file, the form Azure reports as Content-MD5."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while block := f.read(_READ_BLOCK):
            digest.update(block)
    return base64.b64encode(digest.digest()).decode()


def _join(prefix: str, relative: str) -> str:
    return f"{prefix}/{relative}" if prefix else relative


class LocalStorage:
    """Files in a local directory (`file:///dir`): for single machines, NFS mounts, tests."""

    def __init__(self, location: StorageLocation) -> None:
        self.location = location
        self.root = Path(location.container)

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # A probe of this process's own: workers starting together share the directory.
            fd, probe = tempfile.mkstemp(dir=self.root, prefix=".archiver-write-check-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise StorageError(f"cannot write to {self.location}: {exc.strerror}") from None

    def object_name(self, relative: str) -> str:
        return relative

    def put_file(self, name: str, path: Path, md5: str) -> StoredObject:
        target = self.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
        partial = Path(tmp)
        with path.open("rb") as src, os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst, _READ_BLOCK)
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(partial, target)
        stored = self.stat(name)
        assert stored is not None
        return stored

    def stat(self, name: str) -> StoredObject | None:
        target = self.root / name
        if not target.is_file():
            return None
        return StoredObject(name, target.stat().st_size, file_md5(target))

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        """Objects whose name starts with `prefix` (a name prefix, as Azure's)."""
        folder, _, _ = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return
        for path in sorted(base.rglob("*")):
            name = path.relative_to(self.root).as_posix()
            if path.is_file() and name.startswith(prefix) and not name.endswith(".partial"):
                yield StoredObject(name, path.stat().st_size, None)

    def download(self, name: str, dest: Path) -> None:
        shutil.copyfile(self.root / name, dest)

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)


class AzureStorage:
    """Block blobs in an Azure Storage container (`az://container/prefix`)."""

    def __init__(self, location: StorageLocation, settings: Settings) -> None:
        from azure.storage.blob import BlobServiceClient, ExponentialRetry

        self.location = location
        self.max_concurrency = settings.upload_concurrency
        # The SDK's default waits 15 s, then 18 s, 24 s... (~80 s when the service is
        # down). A few short retries instead: an outage fails the attempt and the queue
        # retries the job later, with the rows still in the table.
        options: dict[str, Any] = {
            "retry_policy": ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=3),
            "connection_timeout": 10,
            "read_timeout": 120,
        }
        try:
            if settings.azure_connection_string:
                service = BlobServiceClient.from_connection_string(
                    settings.azure_connection_string, **options
                )
            else:
                from azure.identity import DefaultAzureCredential

                assert settings.azure_account_url
                service = BlobServiceClient(
                    settings.azure_account_url, credential=DefaultAzureCredential(), **options
                )
        except ValueError as exc:
            raise StorageError(f"invalid Azure storage settings: {first_line(exc)}") from None
        self.container = service.get_container_client(location.container)

    def _error(self, action: str, exc: Exception) -> StorageError:
        return StorageError(f"{action} {self.location}: {first_line(exc)}")

    def check(self) -> None:
        from azure.core.exceptions import AzureError, ResourceExistsError

        try:
            if not self.container.exists(retry_total=0):
                self.container.create_container(retry_total=0)
        except ResourceExistsError:
            pass
        except AzureError as exc:
            raise self._error("cannot reach", exc) from None

    def object_name(self, relative: str) -> str:
        return _join(self.location.prefix, relative)

    def put_file(self, name: str, path: Path, md5: str) -> StoredObject:
        """Stage the file in blocks (at most `upload_concurrency` in flight, each checked
        by the service against its MD5), then commit the block list with the whole
        file's MD5. Memory: upload_concurrency x BLOCK_SIZE."""
        from azure.core.exceptions import AzureError
        from azure.storage.blob import BlobBlock, ContentSettings

        blob = self.container.get_blob_client(name)
        size = path.stat().st_size
        count = max(1, -(-size // BLOCK_SIZE))
        upload = uuid.uuid4().hex[:12]  # this upload's own blocks, never another's
        ids = [base64.b64encode(f"{upload}-{i:08d}".encode()).decode() for i in range(count)]

        def stage(i: int) -> None:
            with path.open("rb") as f:
                f.seek(i * BLOCK_SIZE)
                data = f.read(BLOCK_SIZE)
            blob.stage_block(ids[i], data, length=len(data), validate_content=True)

        try:
            with ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="upload") as pool:
                list(pool.map(stage, range(count)))
            failpoints.reach("upload_staged")
            blob.commit_block_list(
                [BlobBlock(block_id=i) for i in ids],
                content_settings=ContentSettings(
                    content_type="application/vnd.apache.parquet",
                    content_md5=bytearray(base64.b64decode(md5)),
                ),
            )
        except AzureError as exc:
            raise self._error("upload to", exc) from None
        stored = self.stat(name)
        if stored is None:
            raise StorageError(f"{name} is missing from {self.location} right after its upload")
        return stored

    def stat(self, name: str) -> StoredObject | None:
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        try:
            props = self.container.get_blob_client(name).get_blob_properties()
        except ResourceNotFoundError:
            return None
        except AzureError as exc:
            raise self._error("cannot read from", exc) from None
        raw_md5 = props.content_settings.content_md5
        md5 = base64.b64encode(bytes(raw_md5)).decode() if raw_md5 else None
        return StoredObject(name, props.size, md5)

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        from azure.core.exceptions import AzureError

        try:
            for props in self.container.list_blobs(name_starts_with=prefix or None):
                raw_md5 = props.content_settings.content_md5
                md5 = base64.b64encode(bytes(raw_md5)).decode() if raw_md5 else None
                yield StoredObject(props.name, props.size, md5)
        except AzureError as exc:
            raise self._error("cannot list", exc) from None

    def download(self, name: str, dest: Path) -> None:
        from azure.core.exceptions import AzureError

        try:
            with dest.open("wb") as f:
                self.container.get_blob_client(name).download_blob(
                    max_concurrency=self.max_concurrency
                ).readinto(f)
        except AzureError as exc:
            raise self._error("cannot download from", exc) from None

    def delete(self, name: str) -> None:
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        try:
            self.container.get_blob_client(name).delete_blob()
        except ResourceNotFoundError:
            pass
        except AzureError as exc:
            raise self._error("cannot delete from", exc) from None


class MemoryStorage:
    """Objects in a dict, for tests of what the data path does with storage (no I/O
    beyond the local files it is handed)."""

    def __init__(self, prefix: str = "archive") -> None:
        self.location = StorageLocation("az", "memory", prefix)
        self.objects: dict[str, bytes] = {}

    def check(self) -> None:
        pass

    def object_name(self, relative: str) -> str:
        return _join(self.location.prefix, relative)

    def put_file(self, name: str, path: Path, md5: str) -> StoredObject:
        failpoints.reach("upload_staged")
        self.objects[name] = path.read_bytes()
        stored = self.stat(name)
        assert stored is not None
        return stored

    def stat(self, name: str) -> StoredObject | None:
        data = self.objects.get(name)
        if data is None:
            return None
        digest = hashlib.md5(data, usedforsecurity=False).digest()
        return StoredObject(name, len(data), base64.b64encode(digest).decode())

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        for name in sorted(self.objects):
            if name.startswith(prefix):
                stored = self.stat(name)
                assert stored is not None
                yield stored

    def download(self, name: str, dest: Path) -> None:
        dest.write_bytes(self.objects[name])

    def delete(self, name: str) -> None:
        self.objects.pop(name, None)


def open_storage(settings: Settings) -> Storage:
    """The Storage for ARCHIVER_STORAGE_URL."""
    location = settings.storage_location()
    if location.scheme == "file":
        return LocalStorage(location)
    return AzureStorage(location, settings)
