"""`archiver tier`, `archiver rehydrate` and `archiver protect`: access tiers and
write-once protection of a table's archived files, the catalog kept in step.

A file going to the Archive tier is offline: unreadable until rehydrated (hours). It
stays catalogued and archived, but leaves its Delta table first, so readers (Fabric,
Spark, DuckDB, `archiver query`) keep working on what is online: the catalog marks it
offline, a publication removes it from the Delta log, and only then does the blob move.
`rehydrate` starts the way back; once the service says a file is online again, it
rejoins the Delta table at the next publication."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from archiver import failpoints
from archiver.config import ARCHIVE_TIER
from archiver.context import Context
from archiver.errors import InputError
from archiver.ident import as_typed
from archiver.lifecycle.retention import Age, expired
from archiver.model import CatalogFile
from archiver.operations.publish import make_visible, publish_table
from archiver.operations.selection import (
    chunk_children,
    hold_tables,
    stored_table_files,
    table_files,
)
from archiver.outcome import Report
from archiver.store import archive_files, publisher_lock
from archiver.text import counted


async def _selected(
    ctx: Context, table: str, age: Age | None, verb: str
) -> tuple[str, list[CatalogFile]]:
    """The table's committed files, or those wholly older than `age` with the files
    archived in their chunks."""
    name, files = await stored_table_files(ctx, table, verb)
    if age is None:
        return name, files
    rooted = [f for f in files if f.cutoff_column]
    going = expired(rooted, age.before(dt.datetime.now(dt.UTC))).going
    return name, going + await chunk_children(ctx, going)


@dataclass(frozen=True)
class Tiered:
    moved: int
    already: int
    offline: int  # out of the Delta table, in the Archive tier or waiting to move there
    waiting: int = 0  # of those, not moved yet: the readers' retention is not over


async def set_tier(
    ctx: Context, table: str, age: Age | None, tier: str, *, dry_run: bool, report: Report
) -> Tiered:
    """Move the selected files to `tier`. To Archive only files `archiver verify` found
    sound (they cannot be read there), after they left the Delta table. The table is
    held against compaction meanwhile, as by rehydrate and protect."""
    async with _held(ctx, table, "tier") as name:
        name, files = await _selected(ctx, name, age, "tier")
        offline = [f for f in files if f.offline]
        if offline and tier != ARCHIVE_TIER:
            raise InputError(
                f"tier: {len(offline)} of these files are in the Archive tier: "
                f"`archiver rehydrate --table {as_typed(name)} --tier {tier}` brings them back"
            )
        # to Archive: also those a killed run marked offline but did not move
        todo = [f for f in files if f.tier != tier and (tier == ARCHIVE_TIER or not f.offline)]
        async with ctx.catalog() as conn:
            if tier == ARCHIVE_TIER and todo:
                unverified = await archive_files.unverified(conn, [f.id for f in todo])
                if unverified:
                    raise InputError(
                        f"tier: {len(unverified)} of {len(todo)} files were not verified since "
                        f"they were written; run `archiver verify --table {as_typed(name)}` first (an "
                        "Archive-tier file cannot be read to be verified); nothing moved"
                    )
            if dry_run:
                report(f"{len(todo)} files of {name} would move to {tier}")
                return Tiered(0, len(files) - len(todo), len(offline))
            if tier == ARCHIVE_TIER:
                offline_after = len({f.id for f in offline} | {f.id for f in todo})
                done = Tiered(0, len(files) - len(todo), offline_after)
                return await _to_archive(ctx, conn, name, todo, done, report)
        again = f"`archiver tier --table {as_typed(name)} --tier {tier}` again moves the rest"
        moved = await asyncio.to_thread(_move, ctx, todo, tier, report, again)
        async with ctx.catalog() as conn:
            await archive_files.set_tier(conn, [f.id for f in todo], tier)
        return Tiered(moved, len(files) - len(todo), len(offline))


@contextlib.asynccontextmanager
async def _held(ctx: Context, table: str, verb: str) -> AsyncIterator[str]:
    """The table's name as the catalog has it, held (selection.hold_tables)."""
    name, _ = await table_files(ctx, table, verb)
    async with hold_tables(ctx, [name]):
        yield name


async def _to_archive(
    ctx: Context,
    conn: asyncpg.Connection,
    name: str,
    todo: list[CatalogFile],
    done: Tiered,
    report: Report,
) -> Tiered:
    """Out of the Delta table before the bytes go: marked offline, published; the
    publisher moves each blob once its removal is in both logs and the readers'
    retention is over (ledger.move_offline: at once where it is 0), the workers'
    publications the rest then."""
    if not todo:
        return done
    await archive_files.going_offline(conn, [f.id for f in todo], ctx.settings.reader_retention)
    ctx.committed(
        f"{counted(len(todo), 'file')} of {name} marked offline (their rows out of "
        "reach until they are rehydrated), none moved yet",
        f"the workers' publications move them, `archiver rehydrate --table {as_typed(name)}` "
        "brings them back",
        partial=True,
    )
    await _publish_now(ctx, {f.source_table for f in todo}, report)
    waiting = await archive_files.waiting_for_archive(conn, [f.id for f in todo])
    if waiting:
        report(
            f"{counted(len(waiting), 'file')} of {name} left the Delta table and stay where "
            "they are, readable, for readers that opened it before (ARCHIVER_READER_RETENTION: "
            f"until {max(waiting):%Y-%m-%d %H:%M} UTC); the workers' publications then move "
            f"them to {ARCHIVE_TIER}"
        )
    return dataclasses.replace(
        done, moved=len(todo) - len(waiting), offline=done.offline, waiting=len(waiting)
    )


def _move(ctx: Context, files: list[CatalogFile], tier: str, report: Report, again: str) -> int:
    storage = ctx.storage()
    for i, f in enumerate(files, 1):
        storage.set_tier(f.path, tier)
        ctx.committed(f"{i} of {counted(len(files), 'file')} moved to {tier}", again,
                          partial=True)  # fmt: skip
        failpoints.reach("tier_moved")
        if i % 100 == 0 or i == len(files):
            report(f"{i}/{len(files)} files moved to {tier}")
    return len(files)


async def _publish_now(ctx: Context, tables: set[str], report: Report) -> None:
    """Publish each table now, so its offline files are out of its Delta log (with
    publishing off too: a Delta table that exists must not list an unreadable file)."""

    for table in sorted(tables):
        done = await publish_table(ctx, as_typed(table), sweep_only=not ctx.settings.delta)
        if done.version is not None:
            report(f"{table}: Delta version {done.version}, the files going offline removed")


@dataclass(frozen=True)
class Rehydrated:
    started: int  # rehydration asked for now
    pending: int  # still rehydrating (asked before)
    online: int  # back online: they rejoin the Delta table


async def rehydrate(
    ctx: Context, table: str, tier: str, priority: str, report: Report, no_wait: bool = False
) -> Rehydrated:
    """Start rehydrating the table's Archive-tier files to `tier`; those the service
    says are online again are marked so in the catalog (run it again to follow)."""
    async with _held(ctx, table, "rehydrate") as name:
        name, files = await stored_table_files(ctx, name, "rehydrate")
        storage = ctx.storage()
        # the catalog's offline files, and any a lifecycle rule moved without telling it
        candidates = [f for f in files if f.offline or f.tier == ARCHIVE_TIER] or files
        states = await asyncio.to_thread(_rehydrate, ctx, candidates, tier, priority, name)
        online = [f for f, state in zip(candidates, states, strict=True) if state == "online"]
        offline = [f for f, state in zip(candidates, states, strict=True) if state != "online"]
        async with ctx.catalog() as conn:
            if offline:  # found offline: out of the Delta table until they are back
                await archive_files.going_offline(conn, [f.id for f in offline], None)
                await archive_files.set_tier(conn, [f.id for f in offline], ARCHIVE_TIER)
            back = [f for f in online if f.offline]
            here = str(storage.location)
            for t in sorted({f.source_table for f in back}):
                ids = [f.id for f in back if f.source_table == t]
                async with conn.transaction():
                    await publisher_lock.atake(conn, here, t)
                    archived = [
                        f.id for f in back if f.source_table == t and f.tier == ARCHIVE_TIER
                    ]
                    await archive_files.back_online(conn, ids, tier, archived)
                    await publisher_lock.arelease(conn, here, t)
        if back:  # they rejoin their Delta tables
            await make_visible(ctx, {f.source_table for f in back}, no_wait=no_wait, report=report)
        result = Rehydrated(states.count("started"), states.count("pending"), len(back))
        report(
            f"{name}: {result.started} files rehydrating now, {result.pending} still "
            f"rehydrating, {result.online} back online (they rejoin the Delta table)"
        )
        return result


def _rehydrate(
    ctx: Context, files: list[CatalogFile], tier: str, priority: str, name: str
) -> list[str]:
    """Each file's state: online, pending (rehydrating) or started (asked now; Azurite
    answers at once, Azure in up to 15 hours, 1 at High priority)."""
    storage = ctx.storage()
    states: list[str] = []
    for f in files:
        stored = storage.stat(f.path)
        if stored is None:
            raise InputError(f"rehydrate: {f.path} is missing from {storage.location}")
        if not stored.offline:
            states.append("online")
        elif stored.rehydrating:
            states.append("pending")
        else:
            storage.set_tier(f.path, tier, priority)
            ctx.committed(
                f"rehydration asked for {states.count('started') + 1} of "
                f"{counted(len(files), 'file')}",
                f"`archiver rehydrate --table {as_typed(name)}` again goes on",
                partial=True,
            )
            failpoints.reach("rehydrate_asked")
            again = storage.stat(f.path)
            states.append("online" if again and not again.offline else "started")
    return states


async def protect(
    ctx: Context,
    table: str,
    age: Age | None,
    until: dt.datetime | None,
    legal_hold: bool | None,
    report: Report,
) -> int:
    """Set a per-blob immutability policy and/or a legal hold on the selected files,
    then record it (purge and erase refuse them). The container needs version-level
    write-once storage (`archiver doctor` says)."""
    async with _held(ctx, table, "protect") as name:
        name, files = await _selected(ctx, name, age, "protect")
        storage = ctx.storage()
        done: list[int] = []
        try:
            for f in files:
                await asyncio.to_thread(storage.protect, f.path, until, legal_hold)
                done.append(f.id)
        finally:
            async with ctx.catalog() as conn:
                await archive_files.protected(conn, done, until, legal_hold)
        report(f"{name}: {len(done)} files protected")
        return len(done)
