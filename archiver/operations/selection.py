"""The catalogued files a command acts on: a selection (a job's, a table's, a cutoff
range), a table's committed files, the files archived in the same chunks, what protects
them now, and files a read found offline."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from archiver import db
from archiver.config import ARCHIVE_TIER
from archiver.context import Context
from archiver.errors import InputError
from archiver.ident import as_typed
from archiver.kinds.publish import queue_publications
from archiver.model import CatalogFile
from archiver.store import archive_files
from archiver.text import counted

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from archiver.storage.seam import Storage


@contextlib.asynccontextmanager
async def hold_tables(ctx: Context, tables: Iterable[str]) -> AsyncIterator[None]:
    """Hold `tables` for a command that takes their files out of the archive, rewrites
    or moves them, for its duration: a compaction of one of them then yields rather than
    retire files under it (archiver.operations.compact). Files selected before this must
    be selected again inside it: a merge may have committed meanwhile."""
    here, held = str(ctx.settings.storage_location()), sorted(set(tables))
    async with ctx.session_apart(ctx.settings.database_url) as conn:
        for table in held:
            await conn.execute(db.query("table_hold"), here, table)
        yield
        for table in held:  # on a failure, the session's end or the pool's reset does
            await conn.execute(db.query("table_release"), here, table)


@dataclass(frozen=True)
class FileSelection:
    """Catalogued files: a job's, and/or a table's (`table` as a user writes it, see
    files.catalogued_tables), and/or those overlapping a cutoff range."""

    job_id: uuid.UUID | None = None
    table: str | None = None
    cutoff_from: str | None = None  # ISO 8601, inclusive
    cutoff_to: str | None = None  # ISO 8601, exclusive

    def __post_init__(self) -> None:
        if self.cutoff_from and self.cutoff_to:
            low, high = map(dt.datetime.fromisoformat, (self.cutoff_from, self.cutoff_to))
            if low >= high:
                raise InputError(
                    f"--from {self.cutoff_from} is not before --to {self.cutoff_to}: the "
                    "range holds no row (--from is inclusive, --to exclusive); nothing done"
                )

    async def files(self, ctx: Context, state: str | None = None) -> list[CatalogFile]:
        async with ctx.catalog() as conn:
            return await archive_files.archived_files(
                conn,
                job_id=self.job_id,
                table=self.table,
                cutoff_from=dt.datetime.fromisoformat(self.cutoff_from)
                if self.cutoff_from
                else None,
                cutoff_to=dt.datetime.fromisoformat(self.cutoff_to) if self.cutoff_to else None,
                state=state,
            )


async def table_files(ctx: Context, table: str, verb: str) -> tuple[str, list[CatalogFile]]:
    """`table` as the catalog names it, and its committed files; one line if none or
    if the bare name is in several schemas."""
    async with ctx.catalog() as conn:
        named = await archive_files.catalogued_tables(conn, table)
    found = {
        t: fs
        for t in named
        if (fs := await FileSelection(table=as_typed(t)).files(ctx, "committed"))
    }
    if not found:
        raise InputError(f"{verb}: no archived files of table {table!r}")
    if len(found) > 1:
        raise InputError(f"{verb}: {table!r} is ambiguous ({', '.join(found)}): name the schema")
    [(name, files)] = found.items()
    here = str(ctx.settings.storage_location())
    elsewhere = sorted({f.storage_url for f in files if f.storage_url != here})
    if elsewhere:  # written before ARCHIVER_STORAGE_URL changed: acted on where they are
        log.warning(
            "%s: %s of %s on %s, not %s: run it with ARCHIVER_STORAGE_URL set to each "
            "storage in turn",
            verb, counted(sum(f.storage_url != here for f in files), "file"), name,
            ", ".join(elsewhere), here,
        )  # fmt: skip
        files = [f for f in files if f.storage_url == here]
        if not files:
            raise InputError(f"{verb}: no archived files of table {name} on {here}")
    return name, files


async def stored_table_files(ctx: Context, table: str, verb: str) -> tuple[str, list[CatalogFile]]:
    """table_files of a table as archiver records it (schema.table, as table_files returns
    it), not as a user types it."""
    return await table_files(ctx, as_typed(table), verb)


def refuse_offline(verb: str, files: list[CatalogFile]) -> None:
    """One line when some of `files` are in the Archive tier (unreadable)."""
    offline = [f for f in files if f.offline]
    if offline:
        table = offline[0].source_table
        raise InputError(
            f"{verb}: {len(offline)} of {len(files)} files of {table} are in the Archive "
            f"tier and cannot be read until rehydrated: `archiver rehydrate --table {as_typed(table)}` "
            "(up to 15 hours; run it again to follow)"
            + ("; `verify --skip-offline` checks the others" if verb == "verify" else "")
        )


async def chunk_children(ctx: Context, files: list[CatalogFile]) -> list[CatalogFile]:
    """The files of referencing tables archived in the same chunks as `files`
    (`--with-children`)."""
    chosen = {f.path for f in files}
    groups = await chunk_groups(ctx, files)
    return [c for children in groups.values() for c in children if c.path not in chosen]


async def chunk_groups(ctx: Context, files: list[CatalogFile]) -> dict[str, list[CatalogFile]]:
    """Each root file of `files` (one with a cutoff column) with the files of
    referencing tables archived in its chunk: a chunk's files are consecutive parts,
    the root's last, and only the root's has a cutoff column."""
    chosen = {f.path for f in files}
    groups: dict[str, list[CatalogFile]] = {}
    for job_id in dict.fromkeys(f.job_id for f in files):
        pending: list[CatalogFile] = []
        job_files = await FileSelection(job_id=uuid.UUID(job_id)).files(ctx, "committed")
        for f in sorted(job_files, key=lambda f: f.part):
            if f.cutoff_column:  # a chunk's root file closes it
                if f.path in chosen:
                    groups[f.path] = pending
                pending = []
            else:
                pending.append(f)
    return groups


def as_stored(storage: Storage, files: list[CatalogFile]) -> list[CatalogFile]:
    """`files` with the protection the storage reports for each now (a policy or hold
    set outside archiver too), beside what the catalog recorded."""
    found = []
    for f in files:
        stored = storage.stat(f.path)
        if stored is not None and (stored.legal_hold or stored.immutable_until):
            until = max((d for d in (f.immutable_until, stored.immutable_until) if d), default=None)
            f = replace(f, legal_hold=f.legal_hold or stored.legal_hold, immutable_until=until)
        found.append(f)
    return found


async def mark_offline(ctx: Context, paths: list[str]) -> None:
    """Files a read found in the Archive tier (moved by a lifecycle rule, say): offline
    in the catalog, so their Delta tables leave them out until they are rehydrated."""
    here = str(ctx.settings.storage_location())
    async with ctx.catalog() as conn:
        ids = await archive_files.ids_at(conn, here, paths)
        await archive_files.going_offline(conn, ids, None)
        await archive_files.set_tier(conn, ids, ARCHIVE_TIER)
        await queue_publications(conn, here, delta=ctx.settings.delta)
