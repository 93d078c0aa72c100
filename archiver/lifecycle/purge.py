"""Retention: `archiver purge --table T --older-than 7y` and a policy's `retain`. The
files of T whose cutoff range lies wholly before the limit, with the files of the
tables archived with them (`--with-children`: the same chunks), leave the archive as a
ledger operation (archiver.ledger.take_out): retired in one transaction with the ledger
row naming them, out of the Delta table in its next publication, then deleted. A crash
leaves them either catalogued and whole or retired (the sweep finishes): never a
catalogued file without its blob, which verify would call lost."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from archiver import ledger
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.lifecycle.retention import Age, Expired
from archiver.model import CatalogFile
from archiver.outcome import Report

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PurgePlan:
    table: str
    age: Age
    before: dt.datetime
    expired: Expired  # of the table's own files
    children: list[CatalogFile]  # of the same chunks as expired.going


def purge(
    ctx: Context,
    conn: BulkConnection,
    plan: PurgePlan,
    report: Report,
) -> tuple[int, int]:
    """Retire and delete the plan's files: (ledger id, rows)."""
    files = plan.expired.going + plan.children
    tables = list(dict.fromkeys(f.source_table for f in files))
    request = {
        "table": plan.table,
        "older_than": str(plan.age),
        "before": plan.before.isoformat(),
    }

    def retire(_: int) -> ledger.TakenOut:
        done = ledger.TakenOut()
        for f in files:
            done.retired.append(f.id)
            done.rows += f.row_count
            counts = done.detail.setdefault(f.source_table, {"rows": 0, "retired": 0})
            counts["rows"] += f.row_count
            counts["retired"] += 1
            counts.setdefault("files", []).append(f.path)
        return done

    ledger_id, done = ledger.take_out(ctx, conn, "purge", tables, request, retire)
    for table, counts in done.detail.items():
        report(f"{table}: {counts['rows']} rows in {counts['retired']} files purged")
    return ledger_id, done.rows
