"""Queue an archive: check it against the source database and the storage, split it into
its jobs, and the policies of a config file checked the same way."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from archiver.bulk import BulkConnection
from archiver.config import ConfigFile
from archiver.context import Context
from archiver.errors import ConfigError, InputError
from archiver.limits import window_opens
from archiver.model import ArchiveRequest, KeyRange, Mode, PageSpan
from archiver.source import partitions
from archiver.source.aggregates import describe_aggregate
from archiver.source.binding import session_lock_timeout
from archiver.source.chunks import ChunkQueries, describe_archive
from archiver.source.ctid import table_pages
from archiver.source.explain import explain_archive, newer_rows
from archiver.source.guardrails import LOCK_NOT_AVAILABLE, lock_holders
from archiver.source.references import check_unreferenced
from archiver.source.tables import (
    check_cutoff_column,
    cutoff_indexed,
    describe_table,
    estimate_rows,
)
from archiver.store import jobs

if TYPE_CHECKING:
    from archiver.archive.plan import BacklogRule
    from archiver.policy import Policy


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


def refuse_future(cutoff: str, option: str = "--before") -> None:
    """One line when `cutoff` is later than now: every row written until then is older
    than it, today's too, so a mistyped year (2052 for 2025) would archive the table."""
    ahead = dt.datetime.fromisoformat(cutoff) - dt.datetime.now(dt.UTC)
    if ahead > dt.timedelta(0):
        raise InputError(
            f"{option} {cutoff} is {_ahead(ahead)} in the future: every row older than it, "
            "today's too, would be archived; pass --allow-future if that is meant"
        )


def _ahead(delta: dt.timedelta) -> str:
    days = delta.days
    if days >= 730:
        return f"{days // 365} years"
    if days >= 2:
        return f"{days} days"
    return f"{max(1, round(delta.total_seconds() / 3600))} hours"


async def plan(
    ctx: Context, request: ArchiveRequest, limits: dict[str, Any] | None = None, parallel: int = 1
) -> dict[str, Any]:
    """What `enqueue --dry-run` reports: EXPLAIN of the archive (of its first part, split
    `parallel` ways), nothing written."""
    from archiver.archive.plan import plan_archive

    rule, throttled = _backlog_rule(ctx, limits)

    def explain(conn: BulkConnection) -> dict[str, Any]:
        _, parts = archive_parts(conn, request, parallel, rule, throttled)
        first = parts[0][0] if parallel > 1 else request
        found = plan_archive(conn, first, list_triggers=True, backlog=rule, throttled=throttled)
        said = warnings(conn, request, ctx.settings.lock_timeout)
        return {**found.to_json(), "warnings": said}

    result: dict[str, Any] = await ctx.in_thread(ctx.settings.effective_source_url, explain)
    return result


async def enqueue_archive(
    ctx: Context,
    request: ArchiveRequest,
    *,
    parallel: int,
    priority: int,
    max_attempts: int,
    limits: dict[str, Any] | None = None,
) -> tuple[str | None, list[Enqueued], list[str]]:
    """Check the archive on the source and the storage, then queue its jobs (see
    archive_parts), all or none: (the group id or None, the jobs, the warnings for the
    operator)."""
    storage = ctx.storage()

    rule, throttled = _backlog_rule(ctx, limits)

    def check(conn: BulkConnection) -> tuple[str | None, list[jobs.Part], list[str]]:
        group, parts = archive_parts(conn, request, parallel, rule, throttled)
        return group, parts, warnings(conn, request, ctx.settings.lock_timeout)

    group, parts, said = await ctx.in_thread(ctx.settings.effective_source_url, check)
    await asyncio.to_thread(storage.check)
    run_at = window_opens(limits or {}, dt.datetime.now(dt.UTC))  # None: run now
    async with ctx.catalog() as conn, conn.transaction():
        queued = await jobs.enqueue_parts(
            conn,
            parts,
            priority=priority,
            max_attempts=max_attempts,
            limits=limits,
            run_at=run_at,
        )
    return group, [Enqueued(job_id, created) for job_id, created in queued], said


def warnings(conn: BulkConnection, request: ArchiveRequest, lock_timeout: float) -> list[str]:
    """What enqueue and its dry run warn an operator of: no index leading with the cutoff
    column (each job then reads the whole table to find its old rows, however few they
    are), and a cutoff that takes all or most of the table (a mistyped date). A table
    lock held longer than `lock_timeout` (a migration's) leaves the share unsaid."""
    from archiver.archive.chunk import rollback_quietly
    from archiver.archive.plan import share_warning, unindexed_warning

    queries = describe_archive(conn, request.table, request.column, Mode.COPY)
    table, column = queries.table, queries.cutoff_column
    found = []
    indexed = cutoff_indexed(conn, table, column)
    if not indexed:
        found.append(unindexed_warning(table.qualified, column.name))
    try:
        with session_lock_timeout(conn, lock_timeout):
            older = explain_archive(conn, queries, request.cutoff, 1, False, lock_timeout)
            total, _ = estimate_rows(conn, table)
            newer = newer_rows(conn, queries, request.cutoff, lock_timeout) if indexed else None
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        rollback_quietly(conn)
        return [
            *found,
            f"how much of {table.sql} the cutoff takes is not known: a lock on it "
            f"was held longer than {lock_timeout:g}s ({lock_holders(conn, table) or 'gone'})",
        ]
    share = share_warning(table.sql, request.cutoff, older.rows_older, total, newer)
    return [*found, share] if share else found


def _backlog_rule(ctx: Context, limits: dict[str, Any] | None) -> tuple[BacklogRule, bool]:
    from archiver.archive.pacing import rate_limited
    from archiver.archive.plan import BacklogRule

    return BacklogRule.of(ctx.settings), rate_limited(limits)


def archive_parts(
    conn: BulkConnection,
    request: ArchiveRequest,
    parallel: int = 1,
    backlog: BacklogRule | None = None,
    throttled: bool = False,
) -> tuple[str | None, list[jobs.Part]]:
    """Check an archive on the source and split it into the jobs that do it: one, or one
    per old partition (whole, or its older rows), or (`parallel` > 1) one per key range
    -- or, a move the backlog plan would take (most of the table, `backlog` its rule),
    one per span of the table's pages, each read by pages in parallel (archive.backlog),
    each claimed by whichever worker is free. Several share a group id: (the group id
    or None, the jobs)."""
    queries = describe_archive(
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
    ranges: list[KeyRange] = []
    spans: list[PageSpan] = []
    if parallel > 1:
        older = explain_archive(conn, queries, request.cutoff, 1, move=False).rows_older
        if backlog is not None and _by_pages(conn, request, queries, older, backlog, throttled):
            spans = PageSpan.split(table_pages(conn, queries), parallel)
        else:
            ranges = queries.split(conn, request.cutoff, parallel, older=older)
    request = dataclasses.replace(request, table=queries.table.qualified, partitions=action)
    group = str(uuid.uuid4()) if ranges or spans or whole else None
    if whole:  # a job per old partition: whole, or its older rows (no lock on the others)
        parts = []
        for name in whole + by_rows:
            how = action if name in whole else partitions.PartitionAction.ROWS
            part = dataclasses.replace(request, partition=name, partitions=how, group=group)
            parts.append((part, part.partition_keys()))
        return group, parts
    split = [dataclasses.replace(request, key_range=r, group=group) for r in ranges] + [
        dataclasses.replace(request, pages=span, group=group) for span in spans
    ]
    if split:
        return group, [(part, part.range_keys(i, len(split))) for i, part in enumerate(split)]
    return None, [(request, request.keys())]


def _by_pages(
    conn: BulkConnection,
    request: ArchiveRequest,
    queries: ChunkQueries,
    older: int,
    backlog: BacklogRule,
    throttled: bool,
) -> bool:
    """A split archive goes by pages where its job would take the backlog plan, and is a
    move: a copy's shares would each read at a snapshot of their own, and a row an
    update moved from one share's pages to another's between two of them would be
    copied twice, or not at all (a move's DELETE takes each row once, wherever it is)."""
    from archiver.archive.plan import BACKLOG, choose_plan

    if request.mode != Mode.MOVE:
        return False
    total, _ = estimate_rows(conn, queries.table)
    chosen, _ = choose_plan(backlog, request, queries.table, older, total, throttled=throttled)
    return chosen == BACKLOG


async def checked_policies(ctx: Context, config: ConfigFile | None) -> list[tuple[Policy, str]]:
    """The config file's policies, each with its table checked on the source database."""
    from archiver.policy import parse_policies

    if config is None:
        raise ConfigError("no config file: pass --config FILE or set ARCHIVER_CONFIG")
    policies = parse_policies(config.policies)
    if not policies:
        raise ConfigError(f"config file {config.path}: no [[policy]] defined")

    def check(conn: BulkConnection) -> list[tuple[Policy, str]]:
        checked = []
        for policy in policies:
            try:
                info = describe_table(conn, policy.table)
            except InputError as exc:
                raise InputError(f"policy {policy.name!r}: table: {exc}") from None
            try:
                check_cutoff_column(info, policy.column)
            except InputError as exc:
                raise InputError(f"policy {policy.name!r}: column: {exc}") from None
            try:
                if policy.with_children:
                    queries = ChunkQueries(info, info.column(policy.column))
                    describe_aggregate(conn, queries)
                elif policy.mode == Mode.MOVE:
                    check_unreferenced(conn, info.qualified, info.oid)
            except InputError as exc:
                raise InputError(f"policy {policy.name!r}: table: {exc}") from None
            checked.append((policy, info.qualified))
        return checked

    result: list[tuple[Policy, str]] = await ctx.in_thread(ctx.settings.effective_source_url, check)
    return result
