"""Steps 5 and 6 of a chunk -- record the file and the job's progress, COMMIT -- in the one
form each kind of job needs, and the settling of what a crash left between the two.

- `SameDatabase` (move, catalog in the source database, the default): the file row and
  the progress are written in the source transaction that deleted the rows; one COMMIT
  makes all of it real, or none.
- `SeparateDatabase` (move, ARCHIVER_SOURCE_URL elsewhere): the file is recorded
  `pending` with the source transaction's id before the source COMMIT and confirmed
  after it. A crash in between leaves a pending file that `reconcile` settles from
  pg_xact_status on the source: committed -> confirmed, aborted -> forgotten.
- `CopyOnly` (copy): the source changes nothing, so the file is simply recorded.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from archiver import failpoints
from archiver.catalog import Catalog
from archiver.errors import JobStateError
from archiver.model import ArchivedFile, Progress
from archiver.source.crossing import Crossing, SourceTransaction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settled:
    part: int
    path: str
    committed: bool  # False: the source rolled back; the file is forgotten


class CommitStrategy(Protocol):
    def commit_chunk(self, files: Sequence[ArchivedFile], progress: Progress) -> None:
        """Record the chunk's files (one per table) and `progress`, and commit the chunk's
        source transaction: all of them, or none."""

    def reconcile(self) -> list[Settled]:
        """Settle files a crash left pending between the two databases' commits."""


class _Settles:
    """Pending files exist only where a job ran against a separate source; any job
    settles its own first (settings may have changed since), at no cost when none is."""

    source: SourceTransaction
    catalog: Catalog

    def reconcile(self) -> list[Settled]:
        settled = []
        for pending in self.catalog.pending_files():
            outcome = self.source.transaction_status(pending.source_xid)
            if outcome not in ("committed", "aborted"):  # its old worker may still finish
                raise JobStateError(
                    f"part {pending.part}: source transaction {pending.source_xid} is "
                    f"{outcome or 'unknown'}; its file cannot be confirmed or dropped yet"
                )
            committed = outcome == "committed"
            if committed:
                self.catalog.confirm(pending.part)
            else:
                self.catalog.drop_rolled_back(pending.part)
            self.catalog.commit()
            settled.append(Settled(pending.part, pending.path, committed))
        return settled


class SameDatabase(_Settles):
    """`writer` is a catalog on the source connection itself: its writes join the delete."""

    def __init__(self, source: SourceTransaction, catalog: Catalog, writer: Catalog) -> None:
        self.source, self.catalog, self.writer = source, catalog, writer

    def commit_chunk(self, files: Sequence[ArchivedFile], progress: Progress) -> None:
        for f in files:
            self.writer.add_committed(f, progress)
        failpoints.reach("before_commit")
        self.source.commit()


class SeparateDatabase(_Settles):
    def __init__(self, source: SourceTransaction, catalog: Catalog) -> None:
        self.source, self.catalog = source, catalog

    def commit_chunk(self, files: Sequence[ArchivedFile], progress: Progress) -> None:
        """The files pending with the source transaction's id, the source committed, the
        files confirmed (archiver.source.crossing); reconcile() closes the window between."""

        def recorded(xid: str) -> None:
            with _own_transaction(self.catalog):
                for f in files:
                    self.catalog.add_pending(f, xid)

        def applied() -> None:  # the files are real, whoever holds the job now
            with _own_transaction(self.catalog):
                for f in files:
                    self.catalog.confirm(f.part)
            with _own_transaction(self.catalog):
                self.catalog.checkpoint(progress)

        Crossing(self.source, recorded, applied, "before_commit", "source_committed").commit()


class CopyOnly(_Settles):
    def __init__(self, source: SourceTransaction, catalog: Catalog) -> None:
        self.source, self.catalog = source, catalog

    def commit_chunk(self, files: Sequence[ArchivedFile], progress: Progress) -> None:
        with _own_transaction(self.catalog):
            for f in files:
                self.catalog.add_committed(f, progress)


@contextlib.contextmanager
def _own_transaction(catalog: Catalog) -> Iterator[None]:
    """The catalog writes inside, in a transaction of their own: committed, or rolled back
    and raised."""
    try:
        yield
        catalog.commit()
    except BaseException:
        catalog.rollback()
        raise
