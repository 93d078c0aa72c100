"""`archiver publish`: a table's catalogued files into its Delta table now (workers do it
after every job), or the Delta log dropped and rebuilt from the catalog."""

from __future__ import annotations

from typing import TYPE_CHECKING

from archiver import db, jobqueue
from archiver.bulk import on_source
from archiver.config import Settings
from archiver.errors import InputError

if TYPE_CHECKING:
    from archiver.delta.publish import Published

CATALOGUED = "SELECT EXISTS (SELECT 1 FROM archive_files WHERE source_table = $1)"


async def publish_table(
    settings: Settings, table: str, *, rebuild: bool = False, sweep_only: bool = False
) -> Published:
    """Publish `table` (schema.table, or a name the catalog holds under one schema).
    `sweep_only`: only take out what left the archive or went offline."""
    from archiver.delta.location import storage_options
    from archiver.delta.publish import publish
    from archiver.storage import open_storage

    async with db.connection(settings.database_url) as conn:
        found = [
            t
            for t in await jobqueue.catalogued_tables(conn, table)
            if await conn.fetchval(CATALOGUED, t)
        ]
    if not found:
        raise InputError(f"publish: no archived files of table {table!r} in the catalog")
    if len(found) > 1:
        raise InputError(f"publish: {table!r} is ambiguous ({', '.join(found)}): name the schema")
    storage = open_storage(settings)
    options = storage_options(settings, storage.location)
    return await on_source(
        settings.database_url,
        lambda conn: publish(
            conn, storage, options, found[0], rebuild=rebuild, sweep_only=sweep_only
        ),
    )
