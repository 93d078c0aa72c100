"""Steps 1-3 of a query tied together: the catalog at one snapshot, the views over it
(with `--with-live`, the live rows at that snapshot), the statement run; again at a new
snapshot when a file went meanwhile."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from archiver import failpoints
from archiver.bulk import BulkConnection
from archiver.config import Settings, StorageLocation
from archiver.errors import InputError, StorageError, first_line
from archiver.ident import as_typed
from archiver.query import catalog, engine, statement
from archiver.query.catalog import Snapshot
from archiver.query.live import attached, import_snapshot, pin_scans
from archiver.query.views import create_views

RETRIES = 3


def answer(
    conn: BulkConnection,
    settings: Settings,
    sql: str,
    run: Any,
    *,
    live: bool,
    local_files: bool = False,
) -> Any:
    """Steps 1-3 on the catalog connection `conn` (`live` False: step 1, then views over
    each table's archive alone), then `run(con)` on the DuckDB connection holding the
    views: its result. Run again at a new snapshot when a file of the catalog's snapshot
    was deleted before it was read (up to RETRIES times). `sql` naming a table with
    Archive-tier files is refused in one line: their rows cannot be read. The statement
    reads the archive and nothing else, as through serve (engine.confine), unless
    `local_files`: an operator's own files too."""
    import duckdb

    command = "query --with-live" if live else "query"
    if live and settings.source_url and settings.source_url != settings.database_url:
        raise InputError(
            "query --with-live: the catalog is in another database than the source "
            "(ARCHIVER_SOURCE_URL), so no one snapshot sees both the live rows and the "
            "archive; query the archive alone (without --with-live)"
        )
    location = settings.storage_location()
    refs = statement.references(sql)  # None: not known, every archived table is read
    named = None if refs is None else {r.table for r in refs}
    for attempt in range(1, RETRIES + 1):
        snapshot = catalog.read_catalog(
            conn,
            str(location),
            named,
            live=live,
            bounded=lambda t: refs is not None and catalog.bounded(t, refs),
        )
        if refs is not None:
            catalog.prune(snapshot, refs)
        statement.refuse_tables(sql, {
            table: f"{command}: {n} archived files of {table} are in the Archive tier and "
            f"cannot be read: `archiver rehydrate --table {as_typed(table)}`; nothing returned"
            for table, n in snapshot.offline.items()
        })  # fmt: skip
        failpoints.reach("live_catalog_read")
        try:
            with engine.engine(settings, location) as con, _source(con, settings, live):
                if live:
                    import_snapshot(con, snapshot)
                    _pin_scans(con, location, snapshot, sql)
                create_views(con, location, snapshot, live=live)
                if not local_files:
                    engine.confine(con, location)
                return run(con)
        except duckdb.IOException as exc:
            if attempt == RETRIES or not _a_file_went(exc, snapshot, location):
                # storage unreachable (found by the soak, Azurite restarting): one line
                raise StorageError(
                    f"{command}: the archive could not be read: {first_line(exc)}"
                ) from None
        finally:
            conn.rollback()
    raise AssertionError("unreachable")


def _pin_scans(con: Any, location: StorageLocation, snapshot: Snapshot, sql: str) -> None:
    """pin_scans, planned over views of the live rows alone: the archive's branches hold
    no scan of the source, and binding them would open a footer of each file. A view
    that cannot be made so (a table gone from the source) leaves every scan unranged."""
    bare = dataclasses.replace(snapshot, files={t: [] for t in snapshot.files})
    try:
        create_views(con, location, bare, live=True)
    except InputError:
        return
    pin_scans(con, sql)


def _source(con: Any, settings: Settings, live: bool) -> contextlib.AbstractContextManager[None]:
    return attached(con, settings) if live else contextlib.nullcontext()


def _a_file_went(exc: Exception, snapshot: Snapshot, location: StorageLocation) -> bool:
    """Whether `exc` is about a file of the snapshot (deleted since: retired by a
    restore, erase or purge that committed after it)."""
    text = str(exc)
    return any(
        location.reader_uri(f.path) in text for files in snapshot.files.values() for f in files
    )
