"""The purge kind: a policy's `retain` on its table (archiver.operations.purge), queued by
the scheduler with each of the policy's slots."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from archiver.context import Context
from archiver.ident import as_typed
from archiver.kinds.kind import JobRun, Kind
from archiver.lifecycle.retention import Age
from archiver.model import Queueing
from archiver.operations.purge import purge_table
from archiver.text import counted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PurgeRequest:
    KIND: ClassVar[str] = "purge"

    table: str
    retain: str  # an age, as the policy says it ('7 years')

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> PurgeRequest:
        return cls(str(payload["table"]), str(payload["retain"]))

    def payload(self) -> dict[str, Any]:
        return {"table": self.table, "retain": self.retain}

    def queueing(self) -> Queueing:  # one queued and one running per table at a time
        return Queueing(f"purge:{self.table}", f"purge:{self.table}")


@dataclass(frozen=True)
class PurgeResult:
    purged_rows: int
    purged_files: int
    ledger: int | None  # the ledger operation (None: nothing was old enough)

    def to_json(self) -> dict[str, Any]:
        return vars(self).copy()

    def said(self) -> str:
        files = counted(self.purged_files, "file")
        return f"{counted(self.purged_rows, 'row')} in {files} purged"


async def purge(ctx: Context, run: JobRun, request: PurgeRequest) -> PurgeResult:
    """Its table's files older than `retain` purged (those under an immutability policy
    or legal hold kept, and said)."""
    table = request.table
    done = await purge_table(
        ctx,
        as_typed(table),
        Age.parse(request.retain, "retain"),
        skip_protected=True,
        missing_ok=True,
        report=lambda line: log.info("job %s: %s", run.job.id, line),
    )
    if done.skipped:
        log.warning("job %s: %s: kept, for their protection: %s", run.job.id, table, done.skipped)
    return PurgeResult(done.rows, done.files, done.ledger)


KIND = Kind.of(PurgeRequest, purge, threaded=False)
