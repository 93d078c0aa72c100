"""Files in a local directory (`file:///dir`): written to a hidden `.partial` file beside
the target, fsynced and linked to its name at the commit (never over an existing file)."""

from __future__ import annotations

import datetime as dt
import glob
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from archiver import failpoints
from archiver.config import StorageLocation
from archiver.errors import StorageError
from archiver.storage.seam import Features, StoredObject, Upload, file_md5


class LocalStorage:
    """Files in a local directory (`file:///dir`): for single machines, NFS mounts, tests."""

    default_tier = ""  # a directory has no access tiers, index tags or immutability

    def __init__(self, location: StorageLocation) -> None:
        self.location = location
        self.root = Path(location.container)

    def check(self) -> None:
        if not self.root.parent.is_dir():  # a typo's tree is not made, as Azure makes no account
            raise StorageError(
                f"cannot write to {self.location}: no directory {self.root.parent} (archiver "
                "makes the last directory of the path only)"
            )
        try:
            self.root.mkdir(exist_ok=True)
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
        return StoredObject(name, target.stat().st_size, file_md5(target), modified=_mtime(target))

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        """Objects whose name starts with `prefix` (a name prefix, as Azure's)."""
        folder, _, _ = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return
        for path in sorted(base.rglob("*")):
            name = path.relative_to(self.root).as_posix()
            if path.is_file() and name.startswith(prefix) and not name.endswith(".partial"):
                yield StoredObject(name, path.stat().st_size, None, modified=_mtime(path))

    def download(self, name: str, dest: Path) -> None:
        shutil.copyfile(self.root / name, dest)

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)

    def delete_many(self, names: Sequence[str]) -> dict[str, str]:
        for name in names:
            self.delete(name)
        return {}

    def create(self, name: str, data: bytes) -> bool:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except FileExistsError:
            return False
        return True

    def set_tier(self, name: str, tier: str, priority: str = "Standard") -> None:
        raise StorageError(f"access tiers need Azure storage; {self.location} is a directory")

    def protect(self, name: str, until: dt.datetime | None, legal_hold: bool | None) -> None:
        raise StorageError(
            f"immutability policies and legal holds need Azure storage; {self.location} "
            "is a directory"
        )

    def features(self) -> Features:
        return [
            (
                "a local directory: no versions, soft delete, tiers, index tags or immutability",
                "purge and erase delete files for good; write-once storage needs Azure",
            )
        ]


class _LocalUpload:
    """Written to a hidden `.partial` file beside the target, fsynced and linked to the
    target's name on commit: readers see the whole file or none."""

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

    def commit(
        self, md5: str, *, tags: Mapping[str, str] | None = None, tier: str = ""
    ) -> StoredObject:
        if tier:
            raise StorageError(
                f"access tiers need Azure storage; {self._storage.location} is a directory"
            )
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        failpoints.reach("upload_staged")
        exists = StorageError(
            f"{self._name} already exists in {self._storage.location}; archiver never "
            "overwrites a file"
        )
        try:  # never over an existing file (os.replace would): a name is written once
            os.link(self._partial, self._target)
        except FileExistsError:
            raise exists from None
        except OSError:  # no hard links here (SMB, FUSE mounts): checked, then renamed
            if self._target.exists():
                raise exists from None
            os.replace(self._partial, self._target)
        else:
            self._partial.unlink()
        stored = self._storage.stat(self._name)
        assert stored is not None
        return stored

    def abort(self) -> None:
        self._file.close()
        self._partial.unlink(missing_ok=True)


def _mtime(path: Path) -> dt.datetime:
    return dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
