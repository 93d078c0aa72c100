"""`archiver publish`: a table's catalogued files into its Delta table now (workers do it
after every job), or the Delta log dropped and rebuilt from the catalog."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from archiver.context import Context
from archiver.errors import InputError, PublisherBusy, error_line
from archiver.ident import as_typed
from archiver.kinds.publish import queue_publications
from archiver.outcome import Report
from archiver.store import archive_files
from archiver.text import counted, period

if TYPE_CHECKING:
    from archiver.delta.publish import Published


async def publish_table(
    ctx: Context,
    table: str,
    *,
    rebuild: bool = False,
    sweep_only: bool = False,
    lock_wait: float | None = None,
) -> Published:
    """Publish `table` (schema.table, or a name the catalog holds under one schema).
    `sweep_only`: only take out what left the archive or went offline. `lock_wait`:
    seconds to wait for a worker publishing it (None: as long as it takes), else
    PublisherBusy."""
    from archiver.delta.publish import publish_table_on

    async with ctx.catalog() as conn:
        found = [
            t
            for t in await archive_files.catalogued_tables(conn, table)
            if await archive_files.has_files(conn, t)
        ]
    if not found:
        raise InputError(f"publish: no archived files of table {table!r} in the catalog")
    if len(found) > 1:
        raise InputError(f"publish: {table!r} is ambiguous ({', '.join(found)}): name the schema")
    return await ctx.in_thread(
        ctx.settings.database_url,
        lambda conn: publish_table_on(
            ctx, conn, found[0], rebuild=rebuild, sweep_only=sweep_only, lock_wait=lock_wait
        ),
    )


async def make_visible(
    ctx: Context, tables: Iterable[str], *, no_wait: bool, report: Report
) -> None:
    """After a command changed the archive (restore's move back, erase, purge,
    rehydrate): publish each table's change to its Delta table now and delete the files
    it retired, so that readers see the change when the command returns; say what had
    to stay, and what finishes it. With publishing off, only what left the archive is
    taken out of a Delta table that exists. `no_wait`: queue the publications for the
    workers instead (as before ARCHIVER_PUBLISH_WAIT).

    The command's change is committed before this runs: a publication that fails here
    (storage or the database restarting, a lock held too long) does not undo it and is
    not the command's failure. It is said, in a line that says the change stands, and
    queued for the workers, whose publication finishes it."""
    here = str(ctx.settings.storage_location())
    names = sorted(set(tables))
    if not names:
        return
    if no_wait:
        async with ctx.catalog() as conn:
            await queue_publications(conn, here, delta=ctx.settings.delta)
        report(
            f"{', '.join(names)}: left to the workers (--no-wait): Delta readers see the "
            "change after their next publication"
        )
        return
    unfinished = False
    for table in names:
        finishes = f"the workers' next publication finishes it, or `archiver publish --table {as_typed(table)}`"
        try:
            done = await publish_table(
                ctx,
                as_typed(table),
                sweep_only=not ctx.settings.delta,
                lock_wait=ctx.settings.publish_wait,
            )
            async with ctx.catalog() as conn:
                retired = await archive_files.retired_left(conn, here, table)
            left = [path for path, kept_on_purpose in retired if not kept_on_purpose]
            kept = sum(1 for _, kept_on_purpose in retired if kept_on_purpose)
        except PublisherBusy as exc:
            unfinished = True
            report(
                f"{table}: not published yet: a worker held its publisher lock for over "
                f"{exc.seconds:g} s (ARCHIVER_PUBLISH_WAIT); {finishes}"
            )
            continue
        except Exception as exc:  # the change stands: say which side of its commit this is
            unfinished = True
            report(
                f"{table}: the change is committed, not published yet: publishing it "
                f"failed ({error_line(exc)}); {finishes}"
            )
            continue
        version = "" if done.version is None else f", Delta version {done.version}"
        if left:
            report(
                f"{table}: published{version}; {len(left)} retired files are still in "
                f"storage, which refused to delete them ({', '.join(left[:3])}"
                f"{', …' if len(left) > 3 else ''}; a hold or policy set outside archiver?): "
                "every worker's sweep tries again"
            )
        elif kept:  # deleted once the readers' retention is over (ledger_retire)
            report(
                f"{table}: readers see it now{version}; the {counted(kept, 'file')} it took "
                f"out stay {period(ctx.settings.reader_retention)} for readers "
                "that opened the table before"
            )
        else:
            report(f"{table}: readers see it now{version}, the retired files deleted")
    if unfinished:
        try:
            async with ctx.catalog() as conn:
                await queue_publications(conn, here, delta=ctx.settings.delta)
        except Exception as exc:  # the workers' periodic publication still finds it
            report(f"the publications could not be queued ({error_line(exc)})")
