"""`archiver remove-orphans` and the workers' orphan sweep: archived files nothing
references, deleted once older than the grace period (archiver.lifecycle.orphans), one
table folder at a time. The tables are the storage's own folders, not the catalog's: a
table whose every chunk rolled back has blobs and no catalog row."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from archiver import ledger
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.errors import InputError
from archiver.lifecycle.orphans import Orphans, remove

__all__ = ["Orphans", "remove_orphans"]
from archiver.storage.seam import StoredObject

Report = Callable[[Orphans], None]


async def remove_orphans(
    ctx: Context,
    table: str | None,
    *,
    grace: dt.timedelta | None = None,
    dry_run: bool = False,
    report: Report = lambda orphans: None,
) -> list[Orphans]:
    """Each table folder's orphans (of `table` alone: schema.table, or a bare name one
    schema has), deleted unless `dry_run`; `report` is told each table's as it is done.
    What dead operations left is settled first (unless `dry_run`), as the workers' ledger
    sweep would: a killed erasure's rewrites are its own until then, kept as "busy"."""
    storage = ctx.storage()
    wait = grace if grace is not None else dt.timedelta(seconds=ctx.settings.orphan_grace)

    def run(conn: BulkConnection) -> list[Orphans]:
        if not dry_run:
            ledger.sweep(ctx, conn)
        root = storage.object_name("")
        by_table = by_folder(storage.list(root), root)  # one listing of the whole storage
        tables = sorted(by_table) if table is None else [_one(table, sorted(by_table))]
        done = []
        for name in tables:
            done.append(remove(conn, storage, name, wait, listed=by_table[name], dry_run=dry_run))
            report(done[-1])
        return done

    return await ctx.in_thread(ctx.settings.database_url, run)


def by_folder(objects: Iterable[StoredObject], root: str) -> dict[str, list[StoredObject]]:
    """Objects under `root` by the first folder of their name where it is a table's
    (schema.table): archiver's table folders."""
    found: dict[str, list[StoredObject]] = {}
    for o in objects:
        folder, slash, _ = o.name[len(root) :].lstrip("/").partition("/")
        if slash and "." in folder:
            found.setdefault(folder, []).append(o)
    return found


def _one(table: str, folders: list[str]) -> str:
    matches = [f for f in folders if f == table or ("." not in table and f.endswith(f".{table}"))]
    if not matches:
        raise InputError(f"remove-orphans: no archived files of table {table!r} on this storage")
    if len(matches) > 1:
        raise InputError(
            f"remove-orphans: {table!r} is ambiguous ({', '.join(matches)}): name the schema"
        )
    return matches[0]
