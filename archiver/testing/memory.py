"""In-memory implementations of archiver's seams, for fast tests of the code above them:
`MemoryDatabase` (a catalog and a source with transactions, the way httpx ships
MockTransport beside its network transport: the commit strategies are tested against it
in milliseconds, with crashes at every step) and `MemoryStorage`. Never used by archiver
itself; the integration tests use the real PostgreSQL and Azurite."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archiver import failpoints
from archiver.catalog import resumed
from archiver.config import ARCHIVE_TIER, StorageLocation
from archiver.errors import LeaseLost, OfflineError, StorageError
from archiver.model import ArchivedFile, FileState, PendingFile, Progress
from archiver.storage.seam import Features, StoredObject, Upload, join_name


@dataclass
class _Tables:
    """What a MemoryDatabase holds: the catalog's rows and the job's lease."""

    files: dict[int, tuple[ArchivedFile, FileState, str | None]] = field(default_factory=dict)
    progress: Progress = field(default_factory=Progress)
    held: bool = True  # the job is still this worker's
    limits: dict[str, Any] = field(default_factory=dict)
    throttled: list[str | None] = field(default_factory=list)  # every reason said, in order


class MemoryDatabase:
    """A database in memory with transactions, for tests of the commit protocol: the
    catalog's rows (a Catalog) and a source whose transactions commit or abort (a
    SourceTransaction, see source.crossing). One instance serving as both is the
    same-database case; two instances, the separate one. Writes stay in the open
    transaction until commit(); `statuses` is what pg_xact_status would say."""

    def __init__(self) -> None:
        self.committed = _Tables()
        self._open: list[tuple[str, Any]] = []
        self._xid = 100
        self.statuses: dict[str, str] = {}
        self.commits = 0

    # -- the source side ---------------------------------------------------------------

    def transaction_id(self) -> str:
        self.statuses.setdefault(str(self._xid), "in progress")
        return str(self._xid)

    def transaction_status(self, xid: str) -> str | None:
        return self.statuses.get(xid)

    def commit(self) -> None:
        tables = self.committed
        for op, arg in self._open:
            if op == "file":
                f, state, xid = arg
                tables.files[f.part] = (f, state, xid)
            elif op == "confirm" and arg in tables.files:
                f, _, _ = tables.files[arg]
                tables.files[arg] = (f, FileState.COMMITTED, None)
            elif op == "forget":
                tables.files.pop(arg, None)
            elif op == "progress":
                tables.progress = arg
        self._open.clear()
        self.statuses[str(self._xid)] = "committed"
        self._xid += 1
        self.commits += 1

    def rollback(self) -> None:
        self._open.clear()
        if self.statuses.get(str(self._xid)) == "in progress":
            self.statuses[str(self._xid)] = "aborted"
        self._xid += 1

    # -- the catalog side --------------------------------------------------------------

    def _check_held(self) -> None:
        if not self.committed.held:
            raise LeaseLost("job is no longer held by this worker")

    def next_part(self) -> int:
        return max(self.committed.files, default=0) + 1

    def catalogued_paths(self) -> set[str]:
        return {f.path for f, _, _ in self.committed.files.values()}

    def committed_progress(self, saved: Progress) -> Progress:
        done = sorted(
            (f for f, state, _ in self.committed.files.values() if state == FileState.COMMITTED),
            key=lambda f: f.part,
        )
        last_key = done[-1].max_key if done else None
        return resumed(
            saved,
            len(done),
            sum(f.row_count for f in done),
            sum(f.byte_size for f in done),
            last_key,
        )

    def pending_files(self) -> list[PendingFile]:
        return [
            PendingFile(part, f.path, xid or "")
            for part, (f, state, xid) in sorted(self.committed.files.items())
            if state == FileState.PENDING
        ]

    def add_committed(self, f: ArchivedFile, progress: Progress) -> None:
        self.checkpoint(progress)
        self._open.append(("file", (f, FileState.COMMITTED, None)))

    def add_pending(self, f: ArchivedFile, source_xid: str) -> None:
        self._check_held()
        self._open.append(("file", (f, FileState.PENDING, source_xid)))

    def confirm(self, part: int) -> None:
        self._open.append(("confirm", part))

    def drop_rolled_back(self, part: int) -> None:
        self._open.append(("forget", part))

    def checkpoint(self, progress: Progress) -> None:
        self._check_held()
        self._open.append(("progress", progress))

    def limits(self) -> dict[str, Any]:
        return dict(self.committed.limits)

    def set_throttled(self, reason: str | None) -> None:
        self.committed.throttled.append(reason)


class MemoryStorage:
    """Objects in a dict, for tests of what the data path does with storage (no I/O
    beyond the local files it is handed)."""

    default_tier = ""

    def __init__(self, prefix: str = "archive") -> None:
        self.location = StorageLocation("az", "memory", prefix)
        self.objects: dict[str, bytes] = {}
        self.tiers: dict[str, str] = {}
        self.tags: dict[str, dict[str, str]] = {}
        self.protection: dict[str, tuple[dt.datetime | None, bool | None]] = {}
        self.written: dict[str, dt.datetime] = {}

    def check(self) -> None:
        pass

    def object_name(self, relative: str) -> str:
        return join_name(self.location.prefix, relative)

    def upload(self, name: str) -> Upload:
        return _MemoryUpload(self, name)

    def discard_unfinished(self, prefix: str) -> None:
        pass  # an unfinished upload lives and dies with its process

    def stat(self, name: str) -> StoredObject | None:
        data = self.objects.get(name)
        if data is None:
            return None
        digest = hashlib.md5(data, usedforsecurity=False).digest()
        until, hold = self.protection.get(name, (None, None))
        return StoredObject(
            name,
            len(data),
            base64.b64encode(digest).decode(),
            tier=self.tiers.get(name, "Hot"),
            immutable_until=until,
            legal_hold=bool(hold),
            modified=self.written.get(name),
        )

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        for name in sorted(self.objects):
            if name.startswith(prefix):
                stored = self.stat(name)
                assert stored is not None
                yield stored

    def download(self, name: str, dest: Path) -> None:
        if self.tiers.get(name) == ARCHIVE_TIER:
            raise OfflineError(name)
        dest.write_bytes(self.objects[name])

    def delete(self, name: str) -> None:
        self.objects.pop(name, None)
        self.written.pop(name, None)
        self.tiers.pop(name, None)
        self.tags.pop(name, None)

    def delete_many(self, names: Sequence[str]) -> dict[str, str]:
        for name in names:
            self.delete(name)
        return {}

    def set_tier(self, name: str, tier: str, priority: str = "Standard") -> None:
        self.tiers[name] = tier  # rehydration is instant here (as in Azurite)

    def protect(self, name: str, until: dt.datetime | None, legal_hold: bool | None) -> None:
        self.protection[name] = (until, legal_hold)

    def features(self) -> Features:
        return [("memory", "tests only")]

    def create(self, name: str, data: bytes) -> bool:
        if name in self.objects:
            return False
        self.objects[name] = data
        self.written[name] = dt.datetime.now(dt.UTC)
        return True


class _MemoryUpload:
    def __init__(self, storage: MemoryStorage, name: str) -> None:
        self._storage = storage
        self._name = name
        self._buffer = bytearray()

    def write(self, data: bytes) -> None:
        self._buffer += data

    def commit(
        self, md5: str, *, tags: Mapping[str, str] | None = None, tier: str = ""
    ) -> StoredObject:
        failpoints.reach("upload_staged")
        if self._name in self._storage.objects:
            raise StorageError(f"{self._name} already exists; archiver never overwrites a file")
        self._storage.objects[self._name] = bytes(self._buffer)
        self._storage.written[self._name] = dt.datetime.now(dt.UTC)
        self._storage.tiers[self._name] = tier or "Hot"
        self._storage.tags[self._name] = dict(tags or {})
        stored = self._storage.stat(self._name)
        assert stored is not None
        return stored

    def abort(self) -> None:
        self._buffer.clear()
