"""Archived rows back into PostgreSQL.

Restore is ONE transaction over all its files: each file is downloaded, bulk-loaded
with COPY BINARY (ADBC ingest) into a temporary staging table, and inserted into the
target with casts to the exact archived types (pgtypes.restore_expression) -- or, a whole
file whose every column COPY writes as archived, by one COPY straight into the target
(archiver.restore.direct). Any failure -- a conflict, a cast, a lost connection -- rolls
everything back; a dry run is the same work, rolled back at the end.

Into the archived table, restore moves rows back (archiver.ledger): the same
transaction retires each file whose rows all went back and catalogues, in place of
each file that keeps some (rows outside the range, or skipped as conflicts), its
rewrite without the restored ones. `--into` another table and `--keep-archive` copy.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import adbc_driver_manager
import pyarrow.parquet as pq

from archiver import driver_check, failpoints, ledger
from archiver.bulk import BulkConnection
from archiver.errors import InputError, RestoreFailed, first_line
from archiver.files import names
from archiver.files.rewrite import rewrite
from archiver.model import ArchivedFile, CatalogFile
from archiver.outcome import Report
from archiver.restore.insert import FileRestore, restore_file
from archiver.restore.plan import RestorePlan
from archiver.restore.remap import ArchivedColumns, check_types
from archiver.restore.target import parents_first_today, recreate_partition, target_of
from archiver.source.crossing import Crossing, PgSource, Stage
from archiver.source.references import ForeignKey
from archiver.storage.seam import Storage

__all__ = ["RestorePlan", "Restored", "restore"]

log = logging.getLogger(__name__)


@dataclass
class Restored:
    """What a restore did (or, in a dry run, would do)."""

    rows: int = 0
    retired: list[int] = field(default_factory=list)  # files whose rows all went back
    written: list[ArchivedFile] = field(default_factory=list)  # rewrites of the others
    per_table: dict[str, dict[str, int]] = field(default_factory=dict)
    target: str = ""  # the table rows went into last

    def count(self, table: str, key: str, n: int = 1) -> None:
        counts = self.per_table.setdefault(table, {"rows": 0, "retired": 0, "rewritten": 0})
        counts[key] += n


def restore(
    conn: BulkConnection,
    storage: Storage,
    plan: RestorePlan,
    workdir: Path,
    report: Report,
    catalog: BulkConnection | None = None,
) -> Restored:
    """Restore the plan's files in one transaction: what it did (or, in a dry run,
    would do). A move back also takes the rows out of the archive: in that transaction,
    or, with the catalog on `catalog` (another database), through the ledger's intent
    (archiver.ledger.record_intent, then settle once the source committed)."""
    tables = list(dict.fromkeys(f.source_table for f in plan.files))
    if len(tables) > 1 and plan.into is not None:
        raise InputError(f"files of several tables match ({', '.join(tables)}); --into takes one")
    changed = driver_check.driver_round_trip(conn)
    if changed:
        raise RestoreFailed(
            "restore refused, nothing changed: the ADBC driver does not write back what it "
            f"reads ({'; '.join(changed)}); see `archiver doctor`"
        )
    ordered, keys = parents_first_today(conn, tables)
    order = {t: i for i, t in enumerate(ordered)}
    # a stable sort: within a table the catalog's order (oldest file first) stands
    files = sorted(plan.files, key=lambda f: order[f.source_table])
    done = Restored()
    crossing = None  # a move back with the catalog in another database
    try:
        if (
            plan.moves_back
            and catalog is None
            and not ledger.lock_files(conn, [f.id for f in files])
        ):
            raise InputError(
                "some of these files left the archive meanwhile (another restore?); "
                "nothing restored, run it again"
            )
        _restore_files(conn, storage, plan, files, keys, workdir, report, done, catalog or conn)
        if plan.dry_run:
            conn.rollback()
            return done
        if plan.moves_back:
            failpoints.reach("restore_before_commit")
            crossing = _leave_archive(conn, plan, done, catalog)
        if crossing is None:
            conn.commit()
        else:
            crossing.commit()
    except BaseException as exc:
        failure = _failure(exc, conn, crossing, done.target or tables[0])
        if failure is None:
            raise
        raise failure from exc
    return done


def _failure(
    exc: BaseException, conn: BulkConnection, crossing: Crossing | None, target: str
) -> BaseException | None:
    """What a restore's failure is said as (None: as it is), its transaction rolled back
    where the source had not committed."""
    if crossing is not None and crossing.stage is Stage.COMMITTED:
        if not isinstance(exc, Exception):
            return None
        return ledger.Unsettled(  # the rows are back: the sweep finishes the catalog
            f"the rows are back, but their files' leaving the archive failed "
            f"({first_line(exc)}): the next sweep of the ledger finishes it"
        )
    with contextlib.suppress(adbc_driver_manager.Error):
        conn.rollback()
    if not isinstance(exc, adbc_driver_manager.Error):
        return None
    if crossing is not None and crossing.stage is Stage.RECORDED:
        # a COMMIT that errored may have committed: the source will say
        return ledger.Unsettled(
            f"the source's COMMIT failed ({first_line(exc)}); whether the rows went in "
            "is settled by the next sweep of the ledger"
        )
    return RestoreFailed(f"restore into {target} failed, nothing changed: {first_line(exc)}")


def _restore_files(
    conn: BulkConnection,
    storage: Storage,
    plan: RestorePlan,
    files: list[CatalogFile],
    keys: list[ForeignKey],
    workdir: Path,
    report: Report,
    done: Restored,
    holder: BulkConnection,
) -> None:
    """Each file's rows into its target, in the restore's open transaction, and in a
    move back its file retired or rewritten (`holder` holds the operation's lock)."""
    targets: dict[str, str] = {}
    said = ""  # the column differences last reported
    verb = "would be restored" if plan.dry_run else "restored"
    with conn.cursor() as cur, tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for i, f in enumerate(files, 1):
            local = Path(tmp) / "restore.parquet"
            storage.download(f.path, local)
            columns = ArchivedColumns.of(local)
            check_types(cur, columns)  # files may come from different schema versions
            if f.source_table not in targets:
                targets[f.source_table] = target_of(cur, plan.into, f.source_table, columns)
            target = done.target = targets[f.source_table]
            if columns.partition and plan.into is None:
                recreate_partition(cur, target, *columns.partition, columns.key)
            parents = [k for k in keys if k.child == f.source_table]
            with pq.ParquetFile(local) as file:
                one = restore_file(cur, file, f.path, target, plan, columns, parents)
                left = _take_out(storage, f, file, one, plan, Path(tmp), done, holder)
            done.rows += one.rows
            done.count(f.source_table, "rows", one.rows)
            if one.mapped.differences() != said:
                said = one.mapped.differences()
                report(f"{f.path}: columns: {said or 'as archived'}")
            report(
                f"{f.path}: {one.rows} of {f.row_count} rows {verb}{left}"
                f"{' by COPY straight in' if one.straight else ''} ({i}/{len(files)} files)"
            )


def _leave_archive(
    conn: BulkConnection, plan: RestorePlan, done: Restored, catalog: BulkConnection | None
) -> Crossing | None:
    """A move back's files out of the archive: in the restore's own transaction (None),
    or, with the catalog in another database, as the crossing that records the ledger's
    intent there, commits the source, then settles it (archiver.source.crossing)."""
    assert plan.operation is not None
    operation, changes = plan.operation, (done.retired, done.written, done.rows, done.per_table)
    if catalog is None:
        ledger.commit_changes(conn, operation, *changes, keep=plan.keep)
        return None
    return Crossing(
        PgSource(conn),
        lambda xid: ledger.record_intent(catalog, operation, xid, *changes),
        lambda: ledger.settle(catalog, operation, plan.keep),
        "restore_intent_recorded",
        "restore_source_committed",
    )


def _take_out(
    storage: Storage,
    f: CatalogFile,
    file: pq.ParquetFile,
    one: FileRestore,
    plan: RestorePlan,
    tmp: Path,
    done: Restored,
    holder: BulkConnection,
) -> str:
    """A move back: the file retired when all its rows went back, rewritten without them
    when some did (not in a dry run; `holder` holds the operation's lock). Says what
    happened to the file."""
    rows = file.metadata.num_rows
    if one.kept is None or 0 < rows == len(one.kept):
        return ""  # a copy, or every row kept (none in range); an empty partition's file goes
    done.retired.append(f.id)
    done.count(f.source_table, "retired")
    if len(one.kept) == 0:
        return ", the file leaves the archive"
    done.count(f.source_table, "rewritten")
    if plan.operation is None:  # a dry run
        return f", the file would be rewritten with the other {len(one.kept)}"
    name = names.rewritten_name(f.path, plan.operation)
    guard = ledger.guard(holder, plan.operation)
    written = rewrite(
        storage,
        f,
        file,
        one.kept,
        name,
        tmp / "rewrite.parquet",
        one.ordered_keys,
        guard,
        plan.operation,
    )
    done.written.append(written)
    return f", the other {len(one.kept)} kept in {name}"
