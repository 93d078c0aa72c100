"""Where Parquet files go. A strict seam between the archive pipeline and the network:
the pipeline only sees `Storage`; Azure Blob Storage and a local directory implement it,
and `MemoryStorage` ships beside them for fast tests.
Every method is synchronous and meant to run in a worker thread, next to the ADBC reads.
A file is sent while it is written (`Storage.upload`): its bytes leave as the Parquet
writer produces them, and nothing is visible under its name until `Upload.commit`.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import shutil
import tempfile
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

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

    def upload(self, name: str) -> Upload:
        """Start sending `name`: bytes leave as they are written, and the object appears
        (replacing any earlier one of that name) only when the upload is committed."""

    def discard_unfinished(self, prefix: str) -> None:
        """Delete what uploads of names starting with `prefix` left unfinished (a killed
        worker's). Only for names no live upload is writing."""

    def stat(self, name: str) -> StoredObject | None: ...

    def list(self, prefix: str = "") -> Iterator[StoredObject]: ...

    def download(self, name: str, dest: Path) -> None: ...

    def delete(self, name: str) -> None: ...


class Upload(Protocol):
    """One object being sent. `write` in order, then `commit` once; `abort` (safe after
    either, and more than once) throws away what was sent and frees what it holds."""

    def write(self, data: bytes) -> None: ...

    def commit(self, md5: str) -> StoredObject:
        """Make the object visible under its name, with `md5` (base64, of every byte
        written) as its Content-MD5; returns what the service then reports of it."""

    def abort(self) -> None: ...


class HashingSink:
    """A binary file for a writer (pyarrow's ParquetWriter): what it is given goes to a
    local file and to an Upload, and into an MD5 on the way, so the file is never read
    back to be hashed or sent."""

    closed = False  # pyarrow refuses a sink without it

    def __init__(self, local: BinaryIO, upload: Upload) -> None:
        self._local = local
        self._upload = upload
        self._digest = hashlib.md5(usedforsecurity=False)
        self.size = 0

    def write(self, data: bytes) -> int:
        self._local.write(data)
        self._upload.write(data)
        self._digest.update(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    @property
    def md5(self) -> str:
        """Base64, the form Azure reports as Content-MD5."""
        return base64.b64encode(self._digest.digest()).decode()


def put_file(storage: Storage, name: str, path: Path) -> StoredObject:
    """Store a local file as `name` (doctor's probe)."""
    upload = storage.upload(name)
    try:
        with path.open("rb") as f:
            while block := f.read(_READ_BLOCK):
                upload.write(block)
        return upload.commit(file_md5(path))
    finally:
        upload.abort()


def file_md5(path: Path) -> str:
    """Base64 MD5 of a file, the form Azure reports as Content-MD5."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while block := f.read(_READ_BLOCK):
            digest.update(block)
    return base64.b64encode(digest.digest()).decode()


def join_name(prefix: str, relative: str) -> str:
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

    def upload(self, name: str) -> Upload:
        return _LocalUpload(self, name)

    def discard_unfinished(self, prefix: str) -> None:
        """The hidden `.partial` files (see _LocalUpload) of names under `prefix`."""
        folder, _, start = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        if base.is_dir():
            for partial in base.glob(f".{glob.escape(start)}*.partial"):
                partial.unlink(missing_ok=True)

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
        return join_name(self.location.prefix, relative)

    def upload(self, name: str) -> Upload:
        return _AzureUpload(self, name)

    def discard_unfinished(self, prefix: str) -> None:
        pass  # uncommitted blocks: the service discards them itself (after a week)

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


class _AzureUpload:
    """A block blob staged while it is written: each BLOCK_SIZE of bytes is staged as
    soon as it is complete (at most `upload_concurrency` in flight, each checked by the
    service against its MD5; a writer waits when they are all busy), and `commit` sends
    the block list with the whole file's MD5. Memory: (upload_concurrency + 1) x
    BLOCK_SIZE. A crash before the commit leaves only uncommitted blocks, which the
    service discards (after a week on Azure): no object appears under the name."""

    def __init__(self, storage: AzureStorage, name: str) -> None:
        self._storage = storage
        self._name = name
        self._blob = storage.container.get_blob_client(name)
        self._upload = uuid.uuid4().hex[:12]  # this upload's own blocks, never another's
        self._ids: list[str] = []
        self._buffer = bytearray()
        self._pool: ThreadPoolExecutor | None = None
        self._staging: deque[Future[Any]] = deque()

    def write(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= BLOCK_SIZE:
            self._stage(bytes(self._buffer[:BLOCK_SIZE]))
            del self._buffer[:BLOCK_SIZE]

    def _stage(self, data: bytes) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self._storage.max_concurrency, thread_name_prefix="upload"
            )
        while len(self._staging) >= self._storage.max_concurrency:
            self._staged(self._staging.popleft())
        block_id = base64.b64encode(f"{self._upload}-{len(self._ids):08d}".encode()).decode()
        self._ids.append(block_id)
        self._staging.append(
            self._pool.submit(
                self._blob.stage_block, block_id, data, length=len(data), validate_content=True
            )
        )

    def _staged(self, staging: Future[Any]) -> None:
        from azure.core.exceptions import AzureError

        try:
            staging.result()
        except AzureError as exc:
            raise self._storage._error("upload to", exc) from None

    def commit(self, md5: str) -> StoredObject:
        from azure.core.exceptions import AzureError
        from azure.storage.blob import BlobBlock, ContentSettings

        if self._buffer or not self._ids:
            self._stage(bytes(self._buffer))
            self._buffer.clear()
        while self._staging:
            self._staged(self._staging.popleft())
        if self._pool is not None:
            self._pool.shutdown()
        failpoints.reach("upload_staged")
        try:
            self._blob.commit_block_list(
                [BlobBlock(block_id=i) for i in self._ids],
                content_settings=ContentSettings(
                    content_type="application/vnd.apache.parquet",
                    content_md5=bytearray(base64.b64decode(md5)),
                ),
            )
        except AzureError as exc:
            raise self._storage._error("upload to", exc) from None
        stored = self._storage.stat(self._name)
        if stored is None:
            raise StorageError(
                f"{self._name} is missing from {self._storage.location} right after its upload"
            )
        return stored

    def abort(self) -> None:
        self._buffer.clear()
        self._staging.clear()
        if self._pool is not None:  # blocks already on their way finish; none start
            self._pool.shutdown(wait=False, cancel_futures=True)


class _LocalUpload:
    """Written to a hidden `.partial` file beside the target, fsynced and renamed over it
    on commit: readers see the whole file or none."""

    def __init__(self, storage: LocalStorage, name: str) -> None:
        self._storage = storage
        self._name = name
        self._target = storage.root / name
        self._target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=self._target.parent, prefix=f".{self._target.name}.", suffix=".partial"
        )
        self._partial = Path(tmp)
        self._file = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        self._file.write(data)

    def commit(self, md5: str) -> StoredObject:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        failpoints.reach("upload_staged")
        os.replace(self._partial, self._target)
        stored = self._storage.stat(self._name)
        assert stored is not None
        return stored

    def abort(self) -> None:
        self._file.close()
        self._partial.unlink(missing_ok=True)


def open_storage(settings: Settings) -> Storage:
    """The Storage for ARCHIVER_STORAGE_URL."""
    location = settings.storage_location()
    if location.scheme == "file":
        return LocalStorage(location)
    return AzureStorage(location, settings)
