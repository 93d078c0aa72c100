"""The seam between the archive pipeline and where files go: `Storage` and `Upload`, what
a stored object looks like, and the hashing sink a file is written through.
Every method is synchronous and meant to run in a worker thread, next to the ADBC reads.
A file is sent while it is written (`Storage.upload`): its bytes leave as the Parquet
writer produces them, and nothing is visible under its name until `Upload.commit`."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from archiver.config import ARCHIVE_TIER, StorageLocation
from archiver.errors import VerificationError

_READ_BLOCK = 8 * 1024 * 1024


@dataclass(frozen=True)
class StoredObject:
    """An object as the storage service reports it."""

    name: str  # full object name, prefix included
    size: int
    md5: str | None  # base64, as Azure's Content-MD5
    tier: str | None = None  # Azure's access tier (None: not reported, or no tiers)
    rehydrating: str | None = None  # Azure's archive status: rehydrate-pending-to-hot...
    immutable_until: dt.datetime | None = None
    legal_hold: bool = False
    modified: dt.datetime | None = None  # when it was written (None: not reported)

    @property
    def offline(self) -> bool:
        """In the Archive tier: its bytes cannot be read until it is rehydrated."""
        return self.tier == ARCHIVE_TIER


# doctor's lines about a container: (what it does, what that means for purge and erase)
Features = list[tuple[str, str]]


class Storage(Protocol):
    """A flat namespace of files, each written once under a name never used before
    (write-once storage needs it: an upload never replaces an object)."""

    location: StorageLocation
    default_tier: str  # the access tier files are written in ("": the service's default)

    def check(self) -> None:
        """Raise StorageError unless the storage is reachable and writable."""

    def object_name(self, relative: str) -> str:
        """The full name of `relative` under this location's prefix."""

    def upload(self, name: str) -> Upload:
        """Start sending `name`: bytes leave as they are written, and the object appears
        only when the upload is committed (refused if one of that name exists)."""

    def discard_unfinished(self, prefix: str) -> None:
        """Delete what uploads of names starting with `prefix` left unfinished (a killed
        worker's). Only for names no live upload is writing."""

    def stat(self, name: str) -> StoredObject | None: ...

    def list(self, prefix: str = "") -> Iterator[StoredObject]: ...

    def download(self, name: str, dest: Path) -> None: ...

    def delete(self, name: str) -> None: ...

    def delete_many(self, names: Sequence[str]) -> dict[str, str]:
        """Delete `names` (one request per 256 on Azure: a blob batch); those the
        storage refused, with why (an object missing is no refusal). StorageError when
        the storage cannot be reached."""

    def create(self, name: str, data: bytes) -> bool:
        """Write `name` only if no object has that name (put-if-absent, as the Delta
        log's commits need): False, and nothing written, when one does."""

    def set_tier(self, name: str, tier: str, priority: str = "Standard") -> None:
        """Move `name` to access tier `tier` (from Archive: start its rehydration, at
        `priority`). StorageError where the service has no tiers."""

    def protect(self, name: str, until: dt.datetime | None, legal_hold: bool | None) -> None:
        """Set a per-blob immutability policy ending `until` (unlocked) and/or a legal
        hold on `name`. StorageError where the service has none."""

    def features(self) -> Features:
        """What the container does that matters to purge and erase, for doctor: (what,
        what it means) lines."""


class Upload(Protocol):
    """One object being sent. `write` in order, then `commit` once; `abort` (safe after
    either, and more than once) throws away what was sent and frees what it holds."""

    def write(self, data: bytes) -> None: ...

    def commit(
        self, md5: str, *, tags: Mapping[str, str] | None = None, tier: str = ""
    ) -> StoredObject:
        """Make the object visible under its name, with `md5` (base64, of every byte
        written) as its Content-MD5, index `tags` and access `tier` ("": the storage's
        default) where the service has them; returns what the service then reports."""

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


def put_file(
    storage: Storage,
    name: str,
    path: Path,
    tags: Mapping[str, str] | None = None,
    tier: str = "",
) -> StoredObject:
    """Store a local file as `name` (a rewritten file; doctor's probe)."""
    upload = storage.upload(name)
    try:
        with path.open("rb") as f:
            while block := f.read(_READ_BLOCK):
                upload.write(block)
        return upload.commit(file_md5(path), tags=tags, tier=tier)
    finally:
        upload.abort()


_TAG_CHARS = re.compile(r"[^A-Za-z0-9 +\-./:=_]")


def file_tags(
    table: str, job_id: str, min_cutoff: str | None, max_cutoff: str | None
) -> dict[str, str]:
    """A file's blob index tags, for Azure lifecycle rules and find-by-tags queries:
    its table, job and cutoff range (`-infinity`/`infinity` when unbounded). Tag values
    allow letters, digits, space and `+-./:=_`, 256 of them: any other character of a
    table name becomes `_`."""

    def value(text: str) -> str:
        return _TAG_CHARS.sub("_", text)[:256]

    return {
        "archiver-table": value(table),
        "archiver-job": value(job_id),
        "archiver-cutoff-min": value(min_cutoff or "-infinity"),
        "archiver-cutoff-max": value(max_cutoff or "infinity"),
    }


def check_stored(name: str, local: Path, md5: str, stored: StoredObject) -> int:
    """The service holds what was sent (size and MD5 as it reports them); the size."""
    size = local.stat().st_size
    if stored.size != size or stored.md5 != md5:
        raise VerificationError(
            f"{name}: storage reports {stored.size} bytes md5 {stored.md5}, "
            f"sent {size} bytes md5 {md5}"
        )
    return size


def file_md5(path: Path) -> str:
    """Base64 MD5 of a file, the form Azure reports as Content-MD5."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while block := f.read(_READ_BLOCK):
            digest.update(block)
    return base64.b64encode(digest.digest()).decode()


def join_name(prefix: str, relative: str) -> str:
    return f"{prefix}/{relative}" if prefix else relative
