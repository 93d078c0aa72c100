"""What the commands do, apart from parsing arguments and printing: check an archive
against the source database, queue it (split, if asked), check policies, select the files
to restore or verify. Each returns data; the CLI prints it. Nothing here imports pyarrow
until a command needs rows (restore, verify)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archiver import db, jobqueue, partitions, source
from archiver.aggregates import children_of, describe_aggregate
from archiver.config import ConfigFile, Settings
from archiver.errors import ConfigError, InputError, JobStateError
from archiver.ident import TableName
from archiver.model import ArchiveRequest, CatalogFile, Mode, window_opens
from archiver.references import check_unreferenced

if TYPE_CHECKING:
    from archiver.policy import Policy
    from archiver.storage import Storage


@dataclass(frozen=True)
class Enqueued:
    job_id: uuid.UUID
    created: bool  # False: an identical job was already queued or running


def parse_cutoff(text: str, option: str = "--before") -> str:
    """A date or ISO timestamp; naive ones are UTC. Returned as ISO 8601 with offset."""
    try:
        value = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(
            f"{option}: {text!r} is not a date (YYYY-MM-DD) or ISO timestamp"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.isoformat()


def _on_source(settings: Settings, read: Callable[[db.BulkConnection], Any]) -> Any:
    with db.connect_bulk(settings.effective_source_url) as conn:
        return read(conn)


async def on_source(settings: Settings, read: Callable[[db.BulkConnection], Any]) -> Any:
    """`read(conn)` on a bulk connection to the source database, in a thread."""
    return await asyncio.to_thread(_on_source, settings, read)


async def qualified_table(settings: Settings, name: str) -> str:
    """`schema.table` of a table of the source database, found as enqueue finds it."""
    table = TableName.parse(name)
    qualified: str = await on_source(
        settings, lambda conn: ".".join(source.find_table(conn, table)[:2])
    )
    return qualified


async def plan(settings: Settings, request: ArchiveRequest) -> dict[str, Any]:
    """What `enqueue --dry-run` reports: EXPLAIN of the archive, nothing written."""
    from archiver.archive.plan import plan_archive

    result: dict[str, Any] = await on_source(
        settings, lambda conn: plan_archive(conn, request, list_triggers=True).to_json()
    )
    return result


async def enqueue_archive(
    settings: Settings,
    request: ArchiveRequest,
    *,
    parallel: int,
    priority: int,
    max_attempts: int,
    limits: dict[str, Any] | None = None,
) -> tuple[str | None, list[Enqueued]]:
    """Check the archive on the source and the storage, then queue its jobs (see
    archive_parts), all or none: (the group id or None, the jobs)."""
    from archiver.storage import open_storage

    storage = open_storage(settings)

    group, parts = await on_source(settings, lambda conn: archive_parts(conn, request, parallel))
    await asyncio.to_thread(storage.check)
    run_at = window_opens(limits or {}, dt.datetime.now(dt.UTC))  # None: run now
    async with db.connection(settings.database_url) as conn, conn.transaction():
        queued = await jobqueue.enqueue_parts(
            conn,
            parts,
            priority=priority,
            max_attempts=max_attempts,
            limits=limits,
            run_at=run_at,
        )
    return group, [Enqueued(job_id, created) for job_id, created in queued]


def archive_parts(
    conn: db.BulkConnection, request: ArchiveRequest, parallel: int = 1
) -> tuple[str | None, list[jobqueue.Part]]:
    """Check an archive on the source and split it into the jobs that do it: one, or one
    per key range (`parallel` > 1), or one per old partition (whole, or its older rows).
    Several share a group id: (the group id or None, the jobs)."""
    queries = source.describe_archive(
        conn, request.table, request.column, request.mode, request.with_children
    )
    if request.with_children:
        describe_aggregate(conn, queries)  # refuses cycles and keyless children
    action, whole, by_rows = partitions.whole_partitions(conn, request, queries)
    if whole and parallel > 1:
        raise InputError(
            f"--parallel splits a row-by-row archive; {queries.table.qualified} has "
            f"{len(whole)} partitions to take whole, each by a job of its own already "
            "(--partitions rows to split it by rows instead)"
        )
    ranges = queries.split(conn, request.cutoff, parallel) if parallel > 1 else []
    request = dataclasses.replace(request, table=queries.table.qualified, partitions=action)
    group = str(uuid.uuid4()) if ranges or whole else None
    if whole:  # a job per old partition: whole, or its older rows (no lock on the others)
        parts = []
        for name in whole + by_rows:
            how = action if name in whole else partitions.PartitionAction.ROWS
            part = dataclasses.replace(request, partition=name, partitions=how, group=group)
            parts.append((part, part.partition_keys()))
        return group, parts
    if ranges:
        parts = []
        for i, key_range in enumerate(ranges):
            part = dataclasses.replace(request, key_range=key_range, group=group)
            parts.append((part, part.range_keys(i, len(ranges))))
        return group, parts
    return None, [(request, request.keys())]


async def checked_policies(
    settings: Settings, config: ConfigFile | None
) -> list[tuple[Policy, str]]:
    """The config file's policies, each with its table checked on the source database."""
    from archiver.policy import parse_policies

    if config is None:
        raise ConfigError("no config file: pass --config FILE or set ARCHIVER_CONFIG")
    policies = parse_policies(config.policies)
    if not policies:
        raise ConfigError(f"config file {config.path}: no [[policy]] defined")

    def check(conn: db.BulkConnection) -> list[tuple[Policy, str]]:
        checked = []
        for policy in policies:
            try:
                info = source.describe_table(conn, policy.table)
            except InputError as exc:
                raise InputError(f"policy {policy.name!r}: table: {exc}") from None
            try:
                source.check_cutoff_column(info, policy.column)
            except InputError as exc:
                raise InputError(f"policy {policy.name!r}: column: {exc}") from None
            try:
                if policy.with_children:
                    queries = source.ChunkQueries(info, info.column(policy.column))
                    describe_aggregate(conn, queries)
                elif policy.mode == Mode.MOVE:
                    check_unreferenced(conn, info.qualified, info.oid)
            except InputError as exc:
                raise InputError(f"policy {policy.name!r}: table: {exc}") from None
            checked.append((policy, info.qualified))
        return checked

    result: list[tuple[Policy, str]] = await on_source(settings, check)
    return result


async def aggregate_children(settings: Settings, tables: list[str]) -> dict[str, list[str]]:
    """Each table's children: the tables `--with-children` moves with it."""

    def read(conn: db.BulkConnection) -> dict[str, list[str]]:
        found = {}
        for table in tables:
            info = source.describe_table(conn, TableName.parse(table))
            found[table] = [child.qualified for child in children_of(conn, info)[0]]
        return found

    children: dict[str, list[str]] = await on_source(settings, read) if tables else {}
    return children


@dataclass(frozen=True)
class FileSelection:
    job_id: uuid.UUID | None = None
    table: str | None = None
    cutoff_from: str | None = None  # ISO 8601, inclusive
    cutoff_to: str | None = None  # ISO 8601, exclusive

    async def files(self, settings: Settings, state: str | None = None) -> list[CatalogFile]:
        async with db.connection(settings.database_url) as conn:
            return await jobqueue.archived_files(
                conn,
                job_id=self.job_id,
                table=self.table,
                cutoff_from=dt.datetime.fromisoformat(self.cutoff_from)
                if self.cutoff_from
                else None,
                cutoff_to=dt.datetime.fromisoformat(self.cutoff_to) if self.cutoff_to else None,
                state=state,
            )


async def restore(
    settings: Settings,
    selection: FileSelection,
    *,
    into: str | None,
    skip_conflicts: bool,
    dry_run: bool,
    ignore_dropped_columns: bool,
    report: Callable[[str], None],
) -> tuple[int, list[CatalogFile]]:
    """Restore the selected committed files in one transaction: (rows, files)."""
    from archiver.restore import RestorePlan, restore
    from archiver.storage import open_storage

    if into is not None:
        TableName.parse(into)
    files = await selection.files(settings, state="committed")
    if not files:
        raise InputError("no archived files match")
    if selection.job_id is None:
        files += await chunk_children(settings, files)
    storage = open_storage(settings)
    plan = RestorePlan(
        files,
        into,
        skip_conflicts,
        selection.cutoff_from,
        selection.cutoff_to,
        dry_run,
        ignore_dropped_columns,
    )

    def run(conn: db.BulkConnection) -> int:
        return restore(conn, storage, plan, Path(tempfile.gettempdir()), report)

    rows: int = await on_source(settings, run)
    return rows, files


async def chunk_children(settings: Settings, files: list[CatalogFile]) -> list[CatalogFile]:
    """The files of referencing tables archived in the same chunks as `files`
    (`--with-children`): a chunk's files are consecutive parts, the root's last, and only
    the root's has a cutoff column."""
    chosen = {f.path for f in files}
    children: list[CatalogFile] = []
    for job_id in dict.fromkeys(f.job_id for f in files):
        pending: list[CatalogFile] = []
        job_files = await FileSelection(job_id=uuid.UUID(job_id)).files(settings, "committed")
        for f in sorted(job_files, key=lambda f: f.part):
            if f.cutoff_column:  # a chunk's root file closes it
                if f.path in chosen:
                    children += [c for c in pending if c.path not in chosen]
                pending = []
            else:
                pending.append(f)
    return children


async def verify(settings: Settings, selection: FileSelection) -> tuple[int, list[str]]:
    """Check the selected files against the catalog, and look for objects the catalog
    does not know where those files live: (files checked, problems)."""
    from archiver.archive import names
    from archiver.storage import open_storage

    files = await selection.files(settings)
    known = await FileSelection().files(settings)
    storage = open_storage(settings)
    table = selection.table
    if table and not files and "." not in table:
        raise InputError(f"no archived files of table {table!r}; give schema.table")
    if selection.job_id:
        job = str(selection.job_id)
        tables = await job_tables(settings, selection.job_id, files)
        prefixes = [names.job_prefix(t, job) for t in tables]
    elif table:
        prefixes = [names.job_prefix(files[0].source_table if files else table)]
    else:
        prefixes = [""]
    prefixes = [storage.object_name(p) for p in prefixes]
    return len(files), await asyncio.to_thread(_verify, storage, files, known, prefixes)


async def job_tables(settings: Settings, job_id: uuid.UUID, files: list[CatalogFile]) -> list[str]:
    """Every table a job may have uploaded files of: those of its catalogued files, its
    table (or partition) and, with --with-children, its children as the source has them
    now. A failed job may have catalogued nothing, and an attempt's uploads of a child
    come before its root's."""
    tables = {f.source_table: None for f in files}
    try:
        async with db.connection(settings.database_url) as conn:
            job = await jobqueue.get_job(conn, job_id)
    except JobStateError:  # pruned (retention): its files are what is left
        if not files:
            raise InputError(f"no job {job_id} and no archived files of it") from None
        return list(tables)
    if "table" not in job.payload:  # not an archive job
        return list(tables)
    request = ArchiveRequest.from_payload(job.payload)
    tables[request.partition or request.table] = None
    if request.with_children:
        try:
            children = await aggregate_children(settings, [request.table])
        except InputError:  # the table is gone or changed: its catalogued files still count
            children = {}
        tables.update(dict.fromkeys(children.get(request.table, [])))
    return list(tables)


def _verify(
    storage: Storage, files: list[CatalogFile], known: list[CatalogFile], prefixes: list[str]
) -> list[str]:
    from archiver.restore import verify_file

    here = str(storage.location)
    problems: list[str] = []
    workdir = Path(tempfile.gettempdir())
    for f in files:
        if f.storage_url == here:
            problems += verify_file(storage, f, workdir)
    paths = {f.path for f in known if f.storage_url == here}
    problems += [
        f"{o.name}: not in the catalog"
        for prefix in prefixes
        for o in storage.list(prefix)
        if o.name not in paths
    ]
    return problems


async def grants(
    settings: Settings, role: str, tables: list[str], config: ConfigFile | None
) -> str:
    """The GRANT script for `role`: the queue, and each of `tables` (default: the config
    file's policy tables) with the tables it is moved with."""
    from archiver.grants import TableAccess, grant_script

    if not role.strip():
        raise InputError("--role: give the role workers and the scheduler log in as")
    # (table, with its children, moved): a named table's mode is not known, so it gets
    # what a move needs, and a table referenced by foreign keys only moves with them
    wanted = [(TableName.parse(t), True, True) for t in tables]
    if not wanted and config is not None:
        wanted = [
            (p.table, p.with_children, p.mode == Mode.MOVE)
            for p, _ in await checked_policies(settings, config)
        ]

    def describe(
        conn: db.BulkConnection,
    ) -> tuple[list[TableAccess], set[str], list[source.DeleteTrigger], list[str]]:
        """Each table to grant on (children marked), the schemas of the types and operators
        archiver names by schema, the DELETE triggers that will run as the role, and why
        an aggregate could not be read."""
        access: dict[str, TableAccess] = {}
        moved: dict[str, source.TableInfo] = {}
        refused: list[str] = []
        schemas: set[str] = set()
        for name, with_children, move in wanted:
            info = source.describe_table(conn, name)
            members = [info]
            if with_children:
                try:
                    children, graph = children_of(conn, info)
                except InputError as exc:
                    refused.append(f"{info.qualified}: --with-children is refused: {exc}")
                else:
                    members += children
                    schemas |= {s for k in graph.keys for s, _ in k.operators} - {"pg_catalog"}
            for m in members:
                schemas |= {c.base_schema for c in m.key if c.base_schema is not None}
                child_of = "" if m is info else info.qualified
                key = tuple(c.name for c in m.key)
                access.setdefault(m.qualified, TableAccess(m.schema, m.name, key, child_of))
                if move:
                    moved.setdefault(m.qualified, m)
        triggers = source.delete_triggers(conn, moved.values()) if moved else []
        return list(access.values()), schemas, triggers, refused

    described = await on_source(settings, describe) if wanted else ([], set(), [], [])
    access, schemas, triggers, refused = described
    async with db.connection(settings.database_url) as conn:
        schema = await conn.fetchval(db.query("queue_schema"))
    if schema is None:
        raise InputError("no archiver schema in the queue database; run `archiver migrate` first")
    return grant_script(
        str(schema),
        role,
        access,
        settings.same_database,
        type_schemas=sorted(schemas),
        triggers=triggers,
        refused=refused,
    )


async def vacuumed_since(settings: Settings, table: str, since: dt.datetime) -> str:
    """Whether (auto)vacuum has run on `table` since `since`, as its statistics say."""
    async with db.connection(settings.effective_source_url) as conn:
        row = await conn.fetchrow(
            "SELECT last_autovacuum, last_vacuum FROM pg_stat_user_tables "
            "WHERE relid = to_regclass($1)",
            table,
        )
    runs = [t for t in (row or {}).values() if t is not None and t >= since]
    return f"yes, at {max(runs).isoformat()}" if runs else "not yet"
