"""A table's Iceberg table against the catalog, as `archiver verify` checks the Delta log
(archiver.delta.check): each file its current snapshot holds once, exactly the files of
the Delta log's publication the catalog says it mirrors, and that publication in its
snapshot's summary."""

from __future__ import annotations

from collections import Counter

from pyiceberg.exceptions import NoSuchTableError

from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.iceberg.catalog import data_files, identifier, object_name, open_catalog
from archiver.iceberg.publish import PUBLICATION
from archiver.store import publications


def iceberg_problems(ctx: Context, conn: BulkConnection, tables: set[str]) -> list[str]:
    """The differences between each of `tables`' Iceberg tables and the catalog."""
    location = ctx.storage().location
    url = str(location)
    catalog = ctx.iceberg(open_catalog)
    problems: list[str] = []
    for mirror in publications.iceberg_mirrors(conn, url):
        if mirror.table not in tables:
            continue
        expected = set(publications.iceberg_files(conn, url, mirror.table, mirror.mirrored))
        conn.commit()
        try:
            tbl = catalog.load_table(identifier(mirror.table))
        except NoSuchTableError:
            problems.append(
                f"{mirror.table}: no Iceberg table in catalog {ctx.settings.iceberg_catalog}, "
                f"the catalog says it holds publication {mirror.mirrored}"
            )
            continue
        snapshot = tbl.current_snapshot()
        held = snapshot.summary.get(PUBLICATION) if snapshot is not None else None
        if snapshot is None or snapshot.snapshot_id != mirror.snapshot:
            problems.append(
                f"{mirror.table}: the Iceberg table's current snapshot is "
                f"{snapshot.snapshot_id if snapshot else None}, the catalog recorded {mirror.snapshot}"
            )
        if held is not None and held != str(mirror.mirrored):
            problems.append(
                f"{mirror.table}: the Iceberg table's snapshot holds publication {held}, "
                f"the catalog says {mirror.mirrored}"
            )
        # every entry: a file twice is two
        counts = Counter(object_name(location, f.file_path) for f in data_files(tbl))
        problems += [f"{p}: in the Iceberg table {n} times" for p, n in counts.items() if n > 1]
        problems += [
            f"{p}: in the Iceberg table, not in its publication" for p in counts.keys() - expected
        ]
        problems += [
            f"{p}: in its publication, not in the Iceberg table" for p in expected - counts.keys()
        ]
    return sorted(problems)
