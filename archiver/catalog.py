"""The archive catalog of one job: its files (archive_files) and its committed progress.

A seam between the data path and the queue database. `PgCatalog` is the real one, on a
synchronous ADBC connection (the job's thread), so that when the catalog shares the
source database a chunk's file row and progress commit in the very transaction that
deletes the chunk's rows. `MemoryDatabase` ships beside it, the way httpx ships
MockTransport beside its network transport: the commit strategies are tested against it
in milliseconds, with crashes at every step.

Writes go into the connection's open transaction; the caller commits. Every write that
records a file first checks the job is still this worker's, and raises LeaseLost if not.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from archiver.bulk import BulkConnection
from archiver.errors import LeaseLost
from archiver.model import ArchivedFile, FileState, PendingFile, Progress
from archiver.store import archive_files, jobs


class Catalog(Protocol):
    def next_part(self) -> int:
        """The part number of the job's next file."""

    def catalogued_paths(self) -> set[str]:
        """Object names of every file the job has recorded, in any state."""

    def committed_progress(self, saved: Progress) -> Progress:
        """The progress a (re)started job resumes from: what its committed files say."""

    def pending_files(self) -> list[PendingFile]: ...

    def add_committed(self, f: ArchivedFile, progress: Progress) -> None:
        """Record `f` and checkpoint the job's progress (LeaseLost if not held)."""

    def add_pending(self, f: ArchivedFile, source_xid: str) -> None:
        """Record `f` as pending on `source_xid`, locking the job row (LeaseLost if not held)."""

    def confirm(self, part: int) -> None: ...

    def drop_rolled_back(self, part: int) -> None: ...

    def checkpoint(self, progress: Progress) -> None:
        """Save the job's progress (LeaseLost if not held)."""

    def limits(self) -> dict[str, Any]:
        """The job's limits as they are now (operators change them while it runs)."""

    def set_throttled(self, reason: str | None) -> None:
        """Say why the job waits (None: it no longer does), in its own transaction."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


class PgCatalog:
    """The catalog in PostgreSQL, for job `job_id` held by `worker`. Reads roll back at
    once, so only ever read through a catalog whose connection holds no open work."""

    def __init__(self, conn: BulkConnection, job_id: str, worker: str) -> None:
        self.conn, self.job_id, self.worker = conn, job_id, worker

    def _lost(self) -> LeaseLost:
        return LeaseLost(f"job {self.job_id} is no longer held by {self.worker}")

    def next_part(self) -> int:
        return archive_files.next_part(self.conn, self.job_id)

    def catalogued_paths(self) -> set[str]:
        return archive_files.job_paths(self.conn, self.job_id)

    def file_schemas(self, table: str) -> list[str | None]:
        """The distinct Delta schemas of `table`'s committed files (None: files written
        before Delta publishing, sql/008)."""
        return archive_files.file_schemas(self.conn, table)

    def committed_progress(self, saved: Progress) -> Progress:
        count, rows, nbytes, last_key = archive_files.committed_totals(self.conn, self.job_id)
        return resumed(saved, int(count), int(rows), int(nbytes), last_key)

    def pending_files(self) -> list[PendingFile]:
        rows = archive_files.pending(self.conn, self.job_id)
        return [PendingFile(int(part), str(path), str(xid)) for part, path, xid in rows]

    def add_committed(self, f: ArchivedFile, progress: Progress) -> None:
        self.checkpoint(progress)  # first: a job that is no longer ours is LeaseLost
        archive_files.insert(self.conn, f, FileState.COMMITTED)

    def add_pending(self, f: ArchivedFile, source_xid: str) -> None:
        # Locks the job row until this commits: a rescue cannot slip in between.
        if not jobs.still_held(self.conn, self.job_id, self.worker):
            raise self._lost()
        archive_files.insert(self.conn, f, FileState.PENDING, source_xid)

    def confirm(self, part: int) -> None:
        archive_files.confirm(self.conn, self.job_id, part)

    def drop_rolled_back(self, part: int) -> None:
        archive_files.drop_rolled_back(self.conn, self.job_id, part)

    def checkpoint(self, progress: Progress) -> None:
        if not jobs.checkpoint(self.conn, self.job_id, self.worker, progress.to_json()):
            raise self._lost()

    def limits(self) -> dict[str, Any]:
        return jobs.limits_now(self.conn, self.job_id)

    def set_throttled(self, reason: str | None) -> None:
        jobs.set_throttled(self.conn, self.job_id, self.worker, reason)

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()


def resumed(saved: Progress, files: int, rows: int, nbytes: int, last_key: Any) -> Progress:
    progress = Progress.from_json(saved.to_json())
    progress.files, progress.rows, progress.bytes = files, rows, nbytes
    progress.last_key = (json.loads(last_key) if isinstance(last_key, str) else last_key) or None
    return progress
