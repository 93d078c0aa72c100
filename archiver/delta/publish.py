"""The catalog's files into their table's Delta log, exactly once.

The catalog (archive_files) is the truth and the Delta log is derived from it, in
numbered publications, one publisher per table at a time (a session advisory lock on
the catalog: Delta's own conflict check lets two concurrent appends through):

 1 number  one catalog transaction gives every committed file of the table that is not
           in the log yet, and every retired one that is (archiver.ledger), the next
           publication number. A publication numbered before a crash is done again with
           the same files.
 2 commit  unless the Delta log's app transaction `archiver` is at that number already
           (the crash came after the commit), one Delta commit adds the new files, with
           their statistics, removes the retired ones and records txn(archiver, number):
           a file and its rewrite change places in one version, so no reader sees
           their rows twice or not at all. New columns and widened types reach the
           table's schema first, in commits of their own (repeating one changes nothing).
 3 record  the catalog notes the number as published; then the retired files out of the
           log are deleted (ledger.reap).

So a file is never in the Delta table twice (its number is committed once), never
before its chunk committed (only committed files are numbered), and none is missing
once a publisher has run after it (the worker's sweep finds what a crash left).
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archiver import failpoints, ledger
from archiver.bulk import BulkConnection
from archiver.config import StorageLocation
from archiver.context import Context
from archiver.delta.check import LOG_DIR
from archiver.delta.commits import APP_ID, LogWriter
from archiver.delta.convert import convert
from archiver.delta.evolve import Merged, SchemaRefused, evolve_table, merge
from archiver.delta.history import forget_history
from archiver.delta.location import storage_options, table_uri
from archiver.files import offline
from archiver.files.facts import NotDeltaType, file_facts
from archiver.ident import as_typed
from archiver.store import archive_files, publications, publisher_lock
from archiver.text import counted

log = logging.getLogger(__name__)

BATCH_FILES = 10_000  # files one publication adds at most


@dataclass
class Published:
    """What one run of the publisher did for a table."""

    table: str
    files: int = 0
    rows: int = 0
    removed: int = 0  # retired files taken out
    version: int | None = None
    refused: list[str] = field(default_factory=list)
    iceberg_snapshot: int | None = None  # the Iceberg table's, when ARCHIVER_ICEBERG is on


class Publisher:
    """Publishes one table's files, on a catalog connection of its own (ADBC), to the
    context's storage; what it commits is said to the context (a command's outcome)."""

    def __init__(self, ctx: Context, conn: BulkConnection, table: str) -> None:
        self.ctx, self.conn, self.table = ctx, conn, table
        self.storage = storage = ctx.storage()
        self.location: StorageLocation = storage.location
        self.options = storage_options(ctx.settings, storage.location)
        self.url = str(self.location)
        self.uri = table_uri(self.location, table)
        self.root = storage.object_name(table)  # object names start with root + "/"
        self.writer = LogWriter(storage, self.root, self.uri, self.options)

    def run(
        self, *, rebuild: bool = False, sweep_only: bool = False, lock_wait: float | None = None
    ) -> Published:
        """Publish until no committed file of the table is left out of its Delta log.
        `sweep_only` (publishing is off): publications only to take retired or offline
        files out of a Delta log that exists (rewrites join it). Either way, the table's
        retired files out of its log are deleted after (ledger.reap: the publisher holds
        the lock that keeps them out); what dead operations left is the ledger sweep's,
        a maintenance duty of its own (archiver.maintenance.settle).
        `lock_wait`: seconds to wait for the table's publisher lock (None: as long as it
        takes), else PublisherBusy."""
        done = Published(self.table)
        publisher_lock.take(self.conn, self.url, self.table, lock_wait)
        try:
            if sweep_only and not publications.removals_pending(self.conn, self.url, self.table):
                self._mirror(done)
                ledger.reap(self.conn, self.storage, self.table)
                offline.move_due(self.ctx, self.conn, self.table)
                return done
            if rebuild or publications.rebuilding(self.conn, self.url, self.table):  # or cut short
                self._forget()
            while (number := self._number()) is not None:
                self._publish(number, done)
            self._mirror(done)  # before the reap: a retired file's blob waits for both
            ledger.reap(self.conn, self.storage, self.table)
            offline.move_due(self.ctx, self.conn, self.table)
            if done.version is None and (table := self._table()) is not None:
                done.version = table.version()  # nothing new: the version as it stands
        finally:
            publisher_lock.release(self.conn, self.url, self.table)
        return done

    def _mirror(self, done: Published) -> None:
        """The table's Iceberg table made to hold the log's files (archiver.iceberg); with
        ARCHIVER_ICEBERG off, one it had taken out of the catalog, no longer kept."""
        settings = self.ctx.settings
        if settings.iceberg:
            from archiver.iceberg.publish import mirror  # pyiceberg: only where it is on

            mirrored = mirror(self.ctx, self.conn, self.table)
            done.iceberg_snapshot = mirrored.snapshot if mirrored is not None else None
        elif publications.iceberg_state(self.conn, self.url, self.table)[1] is not None:
            publications.iceberg_dropped(self.conn, self.url, self.table, settings.iceberg_catalog)
            log.warning(
                "%s: ARCHIVER_ICEBERG is off: its Iceberg table is out of catalog %s, no "
                "longer kept (its metadata files stay)",
                self.table,
                settings.iceberg_catalog,
            )
        self.conn.commit()

    def _still_locked(self) -> None:
        """Raise unless this session still holds the table's publisher lock: a session
        that died (and took the lock with it) must not commit a publication another
        publisher may be redoing. (A death between this check and the commit remains.)"""
        if not publisher_lock.held(self.conn, self.url, self.table):
            raise RuntimeError(f"{self.table}: the publisher lock was lost; not committing")

    def _forget(self) -> None:
        """Drop the Delta log and number every file again: the log is derived. Marked
        first, so a rebuild a crash cut short is finished by the next publisher (a
        half-dropped log, or a dropped one the catalog still counts as published,
        would otherwise stay)."""
        publications.ensure(self.conn, self.url, self.table)
        publications.mark_rebuilding(self.conn, self.url, self.table)
        self.conn.commit()
        self.ctx.committed(
            f"{self.table}: its Delta log is being rebuilt from the catalog",
            f"the next publication (a worker's, or `archiver publish --table {as_typed(self.table)}`) "
            "finishes the rebuild",
            partial=True,
        )
        for stored in list(self.storage.list(f"{self.root}/{LOG_DIR}/")):
            self.storage.delete(stored.name)
        publications.renumber_all(self.conn, self.url, self.table)
        self.conn.commit()
        log.info("%s: Delta log dropped, to be rebuilt from the catalog", self.table)

    def _number(self) -> int | None:
        """Step 1: the publication to do now (one left in flight first), or None."""
        publications.ensure(self.conn, self.url, self.table)
        numbered, published = publications.state(self.conn, self.url, self.table)
        if numbered > published:
            self.conn.commit()
            return int(numbered)
        counted = publications.number(self.conn, self.url, self.table, numbered + 1, BATCH_FILES)
        self.conn.commit()
        return int(numbered) + 1 if counted else None

    def _publish(self, number: int, done: Published) -> None:
        from deltalake import DeltaTable

        files = self._files(number, done)
        removals = publications.removals(self.conn, self.url, self.table, number)
        self.conn.commit()
        table = self._table()
        fields = json.loads(table.schema().to_json())["fields"] if table else []
        adds, removals, changes, rows = self._actions(files, removals, fields, done)
        table = evolve_table(table, changes, self.uri, self.options, self.writer, self.table)
        if table is not None and (table.transaction_version(APP_ID) or 0) >= number:
            log.info("%s: publication %d was committed before a restart", self.table, number)
        elif adds or removals:
            assert table is not None
            self._still_locked()
            failpoints.reach("before_delta_commit")
            # at the version after the one read above, put-if-absent, never rebased:
            # a publisher that lost its lock while it waited here must not land a
            # publication another has redone (and later ones may have undone)
            if removals:
                landed = self.writer.replace(table, number, adds, removals)
            else:
                landed = self.writer.append(table, number, adds)
            if landed:
                self.ctx.committed(
                    f"{self.table}: publication {number} is in its Delta log",
                    "the next publication (a worker's, or `archiver publish`) records it",
                )
            failpoints.reach("after_delta_commit")
            table = DeltaTable(self.uri, storage_options=self.options)
            if not landed:
                if (table.transaction_version(APP_ID) or 0) < number:
                    raise RuntimeError(
                        f"{self.table}: Delta version {table.version()} was written by "
                        f"another writer while publication {number} was being committed"
                    )
                log.warning(
                    "%s: publication %d was committed meanwhile by another publisher",
                    self.table,
                    number,
                )
            else:
                done.files += len(adds)
                done.rows += rows
                done.removed += len(removals)
        erased = publications.erasure_out(self.conn, self.url, self.table, number)
        if erased is not None:  # an erasure's removals are in the log: its history goes
            if table is not None:
                forget_history(self.storage, self.uri, self.options, self.root, self.table)
            publications.history_forgotten(self.conn, self.url, self.table, erased)
        version = table.version() if table is not None else None
        publications.published(
            self.conn, self.url, self.table, number, version, self.ctx.settings.reader_retention
        )
        self.conn.commit()
        done.version = version
        log.info(
            "%s: publication %d: %s added to the Delta table, %s removed (version %s)",
            self.table,
            number,
            counted(len(adds), "file"),
            len(removals),
            version,
        )

    def _actions(
        self,
        files: list[dict[str, Any]],
        removals: list[publications.Removal],
        fields: list[Any],
        done: Published,
    ) -> tuple[list[Any], list[publications.Removal], Merged, int]:
        """The publication's add actions (a file whose schema the table cannot take is
        refused), its removals, the schema changes its files bring, and their rows."""
        from deltalake.transaction import AddAction

        # a merge whose inputs leave the log in this publication and whose files enter
        # it moves rows: no data change (its files refused below: its inputs' rows go)
        merged_out = {r.merged_by for r in removals if r.merged_by is not None}
        adds: list[AddAction] = []
        made_by: list[int | None] = []
        rows = 0
        changes = Merged(fields)
        for f in files:
            try:
                incoming = json.loads(f["schema"])["fields"]
                merged = merge(changes.fields, incoming, self.table)
            except SchemaRefused as exc:
                self._refuse(f["id"], str(exc), done)
                continue
            changes = Merged(
                merged.fields, changes.added + merged.added, changes.widened + merged.widened
            )
            adds.append(AddAction(f["path"], f["size"], {}, f["created_ms"], True, f["stats"]))
            made_by.append(f["made_by"])
            rows += f["rows"]
        merges = merged_out & set(made_by)
        for add, op in zip(adds, made_by, strict=True):
            add.data_change = op not in merges
        removals = [r._replace(merged_by=r.merged_by if r.merged_by in merges else None)
                    for r in removals]  # fmt: skip
        return adds, removals, changes, rows

    def _files(self, number: int, done: Published) -> list[dict[str, Any]]:
        """The files of publication `number`, their facts read from their footers where
        the catalog has none (files archived before Delta publishing)."""
        out = []
        listed = archive_files.in_publication(self.conn, self.url, self.table, number)
        self.conn.commit()  # never idle in a transaction across downloads and Delta commits
        for id_, path, size, rows, schema, stats, created_ms, made_by in listed:
            if not schema:
                try:
                    schema, stats, mode = self._read_facts(path)
                except NotDeltaType as exc:
                    # an older release's types: rewritten with Delta's, the rewrite
                    # catalogued for the next publication; else left out, named
                    if convert(self.ctx, self.conn, id_) is None:
                        self._refuse(id_, f"{path}: {exc}", done)
                    continue
                if mode != "move":  # a copy whose job was pruned before 008 could tell
                    archive_files.mark_not_in_delta(self.conn, id_)
                    self.conn.commit()
                    continue
                archive_files.set_facts(self.conn, id_, schema, stats)
                self.conn.commit()
            out.append(
                {
                    "id": id_,
                    "path": path[len(self.root) + 1 :],  # relative to the table's folder
                    "size": int(size),
                    "rows": int(rows),
                    "schema": schema,
                    "stats": stats,
                    "created_ms": int(created_ms),
                    "made_by": made_by,
                }
            )
        return out

    def _read_facts(self, path: str) -> tuple[str, str, str]:
        """(Delta schema, stats, the archive's mode) from a file's footer."""
        import pyarrow.parquet as pq

        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "file.parquet"
            self.storage.download(path, local)
            meta = pq.read_metadata(local).metadata or {}
            mode = meta.get(b"archiver.mode", b"move").decode()
            if mode != "move":
                return "", "", mode
            return (*file_facts(local), mode)

    def _refuse(self, file_id: int, why: str, done: Published) -> None:
        """The file stays archived and restorable, outside the Delta table."""
        archive_files.refuse_for_delta(self.conn, file_id, why)
        self.conn.commit()
        done.refused.append(why)
        log.error("%s: a file left out of the Delta table: %s", self.table, why)

    def _table(self) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.uri, storage_options=self.options)
        except TableNotFoundError:
            return None


def publish_table_on(ctx: Context, conn: BulkConnection, table: str, **run: Any) -> Published:
    """Publish `table` on catalog connection `conn` (the publish job's and `archiver
    publish`'s one set-up); `run`: Publisher.run's."""
    return Publisher(ctx, conn, table).run(**run)
