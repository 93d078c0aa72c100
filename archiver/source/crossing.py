"""A change that spans the source database and the catalog database where they are two
(ARCHIVER_SOURCE_URL elsewhere), bridged by the source transaction's id. Two changes
cross this way, and only here: an archive chunk's files joining the archive
(archiver.archive.commit.SeparateDatabase) and a move back's files leaving it
(archiver.restore, archiver.ledger).

 1 record  in the catalog database, committed there: what the change will do there,
           with the id of the source transaction that decides it;
 2 commit  the source transaction;
 3 apply   in the catalog database: the record made real.

A crash between 1 and 3 leaves the record. Whoever finds it asks the source what became
of that transaction (`transaction_status`: PostgreSQL's pg_xact_status): committed, the
record is applied; aborted, it is dropped; in progress or forgotten, it is left as it is
(the archive's reconcile, the ledger's sweep)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from archiver import failpoints
from archiver.bulk import BulkConnection
from archiver.source import guardrails


class SourceTransaction(Protocol):
    """The source database's side of a change: its transaction, and what PostgreSQL knows
    of earlier ones. `PgSource` is the real one; testing.memory.MemoryDatabase the
    in-memory one."""

    def transaction_id(self) -> str:
        """The open transaction's id (assigning one if it has none yet)."""

    def transaction_status(self, xid: str) -> str | None:
        """'committed', 'aborted', 'in progress', or None when too old to tell."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


class PgSource:
    def __init__(self, conn: BulkConnection) -> None:
        self.conn = conn

    def transaction_id(self) -> str:
        return guardrails.transaction_id(self.conn)

    def transaction_status(self, xid: str) -> str | None:
        return guardrails.transaction_status(self.conn, xid)

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()


class Stage(enum.IntEnum):
    """How far a crossing got: what a failure at that point leaves."""

    OPEN = 0  # nothing recorded: a failure leaves both databases as they were
    RECORDED = 1  # the record committed, the source's COMMIT not known to have happened
    COMMITTED = 2  # the source committed: the change stands, the record waits to be applied
    APPLIED = 3


@dataclass
class Crossing:
    """Steps 1-3 for one change. `record` is given the source transaction's id and
    commits what it writes; `apply` commits its own. The two failpoints are reached after
    step 1 and after step 2, where a crash leaves a record to settle."""

    source: SourceTransaction
    record: Callable[[str], None]
    apply: Callable[[], None]
    recorded_point: str
    committed_point: str
    stage: Stage = Stage.OPEN

    def commit(self) -> None:
        self.record(self.source.transaction_id())
        self.stage = Stage.RECORDED
        failpoints.reach(self.recorded_point)
        self.source.commit()
        self.stage = Stage.COMMITTED
        failpoints.reach(self.committed_point)
        self.apply()
        self.stage = Stage.APPLIED
