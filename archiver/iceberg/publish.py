"""A table's Iceberg table made to hold exactly the files of its Delta log, in one commit,
by the publisher that just published the log (archiver.delta.publish, holding the
table's publisher lock, before the retired files' blobs go).

Exactly once, by reconciling rather than replaying: the files the Delta log holds after
publication N (the catalog says which: store/publications.sql, iceberg_files) are
compared with the data files of the Iceberg table's current snapshot; one snapshot adds
the missing ones (registered where they are, never copied) and removes the extra ones.
A file is never added twice (only a file the current snapshot lacks is added, and no
other writer commits while the lock is held) nor missed (the next run adds what a crash
left out). The snapshot carries `archiver.publication = N`; the catalog's record of it
(delta_tables.iceberg_published) comes after, so a crash between Iceberg's commit and
that record leaves nothing to redo but the record, which the next run writes. A retired
file's blob is deleted only once both the Delta log and this record are past its
removal (store/archive_files.sql, reapable).

Then housekeeping: snapshots older than ARCHIVER_READER_RETENTION (as long as the
files a change took out are kept for the Delta log's readers: every retained snapshot's
files are there) expired, all but the current one after an erasure (no retained
snapshot reads an erased row), and every metadata object no retained snapshot
or metadata file references deleted (pyiceberg leaves expired snapshots' manifests).
Appends merge manifests, so a table a year of nightly publications old plans from one or two.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.table import TableProperties
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from archiver import failpoints
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.errors import ArchiverError
from archiver.iceberg.catalog import (
    file_uri,
    identifier,
    live_files,
    object_name,
    open_catalog,
    table_location,
)
from archiver.store import publications, publisher_lock
from archiver.text import counted

log = logging.getLogger(__name__)

PUBLICATION = "archiver.publication"  # the snapshot's summary: the Delta publication it holds
TABLE_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "10",
    "commit.manifest-merge.enabled": "true",
    # a commit that finds another landed first fails, never retried on the newer table:
    # its adds were reckoned against the older one (the next run reconciles again)
    "commit.retry.num-retries": "0",
    # every append merges the manifests (bin-packed to 8 MB): a scan plans from one or
    # two, whatever the table's age, and a merge drops the entries of files long removed
    "commit.manifest.min-count-to-merge": "2",
}


class IcebergRefused(ArchiverError):
    """A file of the Delta log the Iceberg table cannot hold: the table stays as it was
    (its files are none of them gone), and the publication says which and why."""


@dataclass
class Mirrored:
    """What one run did to a table's Iceberg table."""

    table: str
    publication: int
    snapshot: int | None = None
    added: int = 0
    removed: int = 0
    expired: int = 0
    deleted: list[str] = field(default_factory=list)  # metadata objects no longer referenced


def mirror(ctx: Context, conn: BulkConnection, table: str) -> Mirrored | None:
    """Make `table`'s Iceberg table hold its Delta log's files (the module says how);
    None when the log holds none yet. The caller holds the table's publisher lock."""
    settings, storage = ctx.settings, ctx.storage()
    location, url = storage.location, str(storage.location)
    published, mirrored = publications.iceberg_state(conn, url, table)
    paths = publications.iceberg_files(conn, url, table, published)
    if mirrored is None and paths:  # before its first commit: nothing reaped meanwhile
        publications.iceberg_published(conn, url, table, 0, None)
    conn.commit()
    catalog = ctx.iceberg(open_catalog)
    want = {file_uri(settings, location, p): p for p in paths}
    tbl = _table(catalog, table, table_location(settings, location, table), list(want))
    if tbl is None:  # none, and nothing to hold: nothing of the table's is waited for
        if mirrored is not None:
            publications.iceberg_dropped(conn, url, table, settings.iceberg_catalog)
            conn.commit()
        return None
    done = Mirrored(table, published)
    current = live_files(tbl)
    adds = [uri for uri in want if uri not in current]
    removes = [data_file for uri, data_file in current.items() if uri not in want]
    if adds or removes:
        if not publisher_lock.held(conn, url, table):  # its session died: another may redo it
            raise RuntimeError(f"{table}: the publisher lock was lost; no Iceberg commit")
        _commit(tbl, adds, removes, published)  # `tbl` is the committed table after it
        done.added, done.removed = len(adds), len(removes)
    failpoints.reach("after_iceberg_commit")
    erased = publications.erasure_out(conn, url, table, published, iceberg=True)
    conn.commit()
    retention = dt.timedelta(seconds=settings.reader_retention)
    done.expired = _expire(tbl, retention, everything_before_current=erased is not None)
    if adds or removes or done.expired:  # what a commit or an expiry left behind goes
        done.deleted = _clean(ctx, tbl, table, only_current_metadata=erased is not None)
    snapshot = tbl.current_snapshot()
    done.snapshot = snapshot.snapshot_id if snapshot is not None else None
    if erased is not None:
        publications.iceberg_history_forgotten(conn, url, table, erased)
    publications.iceberg_published(conn, url, table, published, done.snapshot)
    conn.commit()
    if adds or removes or done.expired:
        log.info(
            "%s: Iceberg snapshot %s holds publication %d: %s added, %d removed, %s expired",
            table, done.snapshot, published, counted(done.added, "file"), done.removed,
            counted(done.expired, "snapshot"),
        )  # fmt: skip
    return done


def _table(catalog: Any, table: str, location: str, uris: list[str]) -> Any:
    """The table's Iceberg table, made (with its namespace) from its first file's
    columns when it has none; None when it has none and no file is in the log."""
    ident = identifier(table)
    try:
        return catalog.load_table(ident)
    except NoSuchTableError:
        if not uris:
            return None
    catalog.create_namespace_if_not_exists(ident[0])
    schema = _arrow_schema(load_file_io(catalog.properties, location), uris[0])
    return catalog.create_table_if_not_exists(
        ident, schema=schema, location=location, properties=TABLE_PROPERTIES
    )


def _arrow_schema(io: Any, uri: str) -> pa.Schema:
    with io.new_input(uri).open() as stream:
        return pq.read_metadata(stream).schema.to_arrow_schema()


def _commit(tbl: Any, adds: list[str], removes: list[Any], published: int) -> None:
    """One snapshot: `adds` registered where they are, `removes` taken out, the table's
    columns grown by name to hold the added files' (the name mapping with them)."""
    io = tbl.io
    with tbl.transaction() as tx:
        if tx.table_metadata.name_mapping() is None:  # files without field ids read by name
            mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
            tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING: mapping})
        if adds:  # one union of theirs: unions one by one add a new column once each
            schemas = [_arrow_schema(io, uri) for uri in adds]
            with tx.update_schema() as update:
                update.union_by_name(pa.unify_schemas(schemas, promote_options="permissive"))
        data_files = [_data_file(tx, io, uri) for uri in adds]
        properties = {PUBLICATION: str(published)}
        snapshot = tx.update_snapshot(snapshot_properties=properties)
        with snapshot.overwrite() if removes else snapshot.merge_append() as producer:
            for data_file in removes:
                producer.delete_data_file(data_file)
            for data_file in data_files:
                producer.append_data_file(data_file)
        if removes:  # and its manifests merged, the removed files' entries dropped, in
            # the same commit (an append of nothing): pyiceberg 0.12 rewrites manifests
            # only as it merges an append's
            with tx.update_snapshot(snapshot_properties=properties).merge_append():
                pass


def _data_file(tx: Any, io: Any, uri: str) -> Any:
    """The data file of `uri`, its columns' bounds from its footer's statistics. A date
    or timestamp beyond Python's years 1-9999 (PostgreSQL holds 4713 BC to 294276 AD)
    has bounds pyiceberg cannot convert (OverflowError): the table then keeps counts
    only for its date and time columns, and their bounds prune no file for any engine."""
    try:
        return parquet_file_to_data_file(io, tx.table_metadata, uri)
    except OverflowError:
        temporal = [
            f.name
            for f in tx.table_metadata.schema().fields
            if isinstance(f.field_type, DateType | TimestampType | TimestamptzType)
        ]
        tx.set_properties(**{f"write.metadata.metrics.column.{n}": "counts" for n in temporal})
        log.warning(
            "%s: dates beyond years 1-9999: the Iceberg table keeps no bounds of %s",
            uri, ", ".join(temporal),
        )  # fmt: skip
    try:
        return parquet_file_to_data_file(io, tx.table_metadata, uri)
    except (ValueError, TypeError, NotImplementedError, OverflowError) as exc:
        raise IcebergRefused(f"{uri}: the Iceberg table cannot hold it: {exc}") from None


def _expire(tbl: Any, retention: dt.timedelta, *, everything_before_current: bool) -> int:
    """Expire the snapshots older than `retention`, or every one but the current."""
    current = tbl.current_snapshot()
    if current is None:
        return 0
    oldest = int((dt.datetime.now(dt.UTC) - retention).timestamp() * 1000)
    ids = [  # after an erasure every one, whatever the clock of the host that wrote it
        s.snapshot_id
        for s in tbl.snapshots()
        if s.snapshot_id != current.snapshot_id
        and (everything_before_current or s.timestamp_ms < oldest)
    ]
    if ids:
        tbl.maintenance.expire_snapshots().by_ids(ids).commit()
    return len(ids)


def _clean(ctx: Context, tbl: Any, table: str, *, only_current_metadata: bool) -> list[str]:
    """Delete the objects under the table's `metadata/` that neither the current metadata
    file (nor, unless `only_current_metadata`, one its log keeps) nor a retained
    snapshot's manifest list or manifests names: what expired snapshots left."""
    storage, location = ctx.storage(), ctx.storage().location
    kept = {tbl.metadata_location}
    if not only_current_metadata:
        kept |= {entry.metadata_file for entry in tbl.metadata.metadata_log}
    for snapshot in tbl.snapshots():
        kept.add(snapshot.manifest_list)
        kept |= {m.manifest_path for m in snapshot.manifests(tbl.io)}
    names = {object_name(location, uri) for uri in kept}
    root = storage.object_name(f"{table}/metadata/")
    listed = [o.name for o in storage.list(root)]
    if object_name(location, tbl.metadata_location) not in listed:  # names not understood:
        log.warning("%s: Iceberg metadata not found where expected; none deleted", table)
        return []  # deleting by them would delete the current metadata
    stale = [name for name in listed if name not in names]
    if stale:
        refused = storage.delete_many(stale)
        for name, why in refused.items():
            log.warning("%s: Iceberg metadata %s not deleted: %s", table, name, why)
        stale = [name for name in stale if name not in refused]
    return stale
