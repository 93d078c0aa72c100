"""The job queue: `enqueue`, and what an operator does to jobs -- `status`, `jobs`,
`show`, `cancel`, `retry`, `pause`, `resume`, `throttle`."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import uuid
from typing import Any

from archiver import terminal, text
from archiver.commands.args import Subcommands, add_limits, positive_int
from archiver.config import WRITTEN_TIERS
from archiver.context import Context
from archiver.errors import InputError, JobFailed
from archiver.ident import TableName, parse_column
from archiver.limits import limit_changes
from archiver.model import ArchiveRequest, Mode, Status, parse_job_id
from archiver.operations import actions, enqueue, inspect
from archiver.store import archive_files, jobs, read_models
from archiver.store.queue import PgQueue


def add_parsers(sub: Subcommands) -> None:
    _add_enqueue(sub)

    p = sub.add_parser("status", help="jobs by table and status, running, failing, archived")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("jobs", help="list jobs, newest first")
    p.add_argument("--status", choices=[str(s) for s in Status])
    p.add_argument("--table", help="table or schema.table")
    p.add_argument("--limit", type=positive_int, default=20, help="at most N jobs (default 20)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser("show", help="one job: payload, attempts, errors, progress, files")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "cancel", help="cancel a queued job, or stop a running one at its next chunk"
    )
    p.add_argument("job_id")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("retry", help="queue a failed or cancelled job again")
    p.add_argument("job_id")
    p.set_defaults(func=cmd_retry)

    for name, verb in (("pause", "pause"), ("resume", "resume")):
        p = sub.add_parser(
            name,
            help=f"{verb} a table's jobs (and later ones) or one job"
            + ("; running ones stop at their next chunk" if name == "pause" else ""),
        )
        p.add_argument("job_id", nargs="?", help="one job")
        p.add_argument("--table", help="every job of this table, now and later")
        p.set_defaults(func=cmd_pause if name == "pause" else cmd_resume)

    p = sub.add_parser("throttle", help="change a queued or running job's limits")
    p.add_argument("job_id")
    add_limits(p, removable=True)
    p.set_defaults(func=cmd_throttle)


def _add_enqueue(sub: Subcommands) -> None:
    p = sub.add_parser("enqueue", help="queue an archive job; prints its id")
    p.add_argument("--table", required=True, help="table or schema.table")
    p.add_argument("--before", required=True, help="archive rows older than this date/timestamp")
    p.add_argument(
        "--allow-future",
        action="store_true",
        help="accept a --before later than now (refused otherwise: a mistyped year archives "
        "every row)",
    )
    p.add_argument(
        "--column", default="created_at", help="date/timestamp column (default created_at)"
    )
    p.add_argument("--mode", choices=[str(m) for m in Mode], default=str(Mode.MOVE))
    p.add_argument(
        "--tier",
        choices=WRITTEN_TIERS,
        help="the access tier its files are written in (default ARCHIVER_ACCESS_TIER)",
    )
    p.add_argument(
        "--chunk-rows", type=positive_int, help="rows per chunk (default: ~160 MB of data)"
    )
    add_limits(p, removable=False)
    p.add_argument(
        "--vacuum",
        action="store_true",
        help="move mode: VACUUM (ANALYZE) the table when the job completes",
    )
    p.add_argument(
        "--partitions",
        choices=["drop", "detach", "rows"],
        default="auto",
        help="move mode on a table range-partitioned by the cutoff column: partitions "
        "entirely older than the cutoff leave whole, archived then dropped (default) or "
        "detached; rows: delete row by row",
    )
    p.add_argument(
        "--with-children",
        action="store_true",
        help="take every row referencing a chunk's rows (foreign keys, transitively) with "
        "it, each table to its own files",
    )
    p.add_argument(
        "--no-delta",
        action="store_true",
        help="move mode: keep this job's files out of the table's Delta table (plain Parquet)",
    )
    p.add_argument(
        "--no-cdc-marker",
        action="store_true",
        help="move mode: no logical decoding message marking each chunk's deletes as archival",
    )
    p.add_argument("--priority", type=int, default=0, help="higher runs first (default 0)")
    p.add_argument("--max-attempts", type=positive_int, default=5)
    p.add_argument(
        "--parallel",
        type=positive_int,
        default=1,
        metavar="N",
        help="split into N jobs that any N free workers take at once: spans of the table's "
        "pages for a move of most of it (the backlog plan), else key ranges",
    )
    p.add_argument(
        "--wait", action="store_true", help="show progress until the job ends; non-zero if it fails"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print rows, Parquet size, chunks and index use (EXPLAIN); queue nothing",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the group, each job's id and whether it is new, the "
        "warnings (with --dry-run: the plan)",
    )
    p.set_defaults(func=cmd_enqueue)


async def cmd_enqueue(args: argparse.Namespace, ctx: Context) -> int:
    cutoff = enqueue.parse_cutoff(args.before)
    if not args.allow_future:
        enqueue.refuse_future(cutoff)
    table = TableName.parse(args.table)
    request = ArchiveRequest(
        str(table),
        parse_column(args.column),
        cutoff,
        Mode(args.mode),
        args.chunk_rows,
        cdc_marker=not args.no_cdc_marker,
        vacuum=args.vacuum,
        with_children=args.with_children,
        partitions=args.partitions,
        delta=ctx.settings.delta and not args.no_delta,
        tier=args.tier or "",
    )
    if args.tier and ctx.settings.storage_location().scheme != "az":
        raise InputError("--tier: access tiers need Azure storage (az://)")
    if args.dry_run:
        if args.wait:
            raise InputError("--dry-run and --wait exclude each other")
        plan = await enqueue.plan(ctx, request, _limits(args) or None, args.parallel)
        print(terminal.dumps(plan) if args.json else terminal.plan_report(plan, cutoff, args.mode))
        return 0
    group, queued, warnings = await enqueue.enqueue_archive(
        ctx,
        request,
        parallel=args.parallel,
        priority=args.priority,
        max_attempts=args.max_attempts,
        limits=_limits(args) or None,
    )
    if args.wait:  # queued: a failure from here on (stdout's reader gone, too) says so
        ids = " ".join(str(job.job_id) for job in queued)
        ctx.committed(
            f"{text.counted(len(queued), 'job')} queued ({ids})",
            f"the workers run {'it' if len(queued) == 1 else 'them'}; `archiver show "
            f"{queued[0].job_id}` follows {'it' if len(queued) == 1 else 'the first'}",
            partial=True,
        )
    for warning in warnings:
        print(f"archiver: warning: {warning}", file=sys.stderr)
    if args.json:
        jobs_said = [{"job_id": job.job_id, "created": job.created} for job in queued]
        print(terminal.dumps({"group": group, "jobs": jobs_said, "warnings": warnings}))
    for i, job in enumerate(queued):
        if not job.created:
            print(
                f"part {i} is already queued or running: job {job.job_id}"
                if group
                else f"an identical archive is already queued or running: job {job.job_id}",
                file=sys.stderr,
            )
    for job in [] if args.json else queued:  # one id a line: `archiver show $(...)`
        print(job.job_id)
    if group:
        print(f"group {group}: {text.counted(len(queued), 'job')}", file=sys.stderr)
    if args.wait:
        sys.stdout.flush()
        for job in queued:
            await _wait(ctx, job.job_id)
    return 0


async def _wait(ctx: Context, job_id: uuid.UUID) -> None:
    """Draw the job's progress on stderr until it ends; a failed or cancelled job is an error."""
    async with ctx.catalog() as conn:
        job = await terminal.wait_for_job(conn, job_id, sys.stderr)
    if job.status != Status.COMPLETED:
        raise JobFailed(f"job {job_id} {job.status}: {job.last_error or 'no error recorded'}")
    print(f"job {job_id} completed: {terminal.progress_text(job.progress)}", file=sys.stderr)


async def cmd_status(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.catalog() as conn:
        report = await read_models.ops_report(conn)
    print(terminal.dumps(report) if args.json else terminal.status_report(report))
    return 0


async def cmd_jobs(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.catalog() as conn:
        table = str(TableName.parse(args.table)) if args.table else None  # as recorded
        rows = await read_models.list_jobs(conn, args.status, table, args.limit)
    if args.json:
        print(terminal.dumps(rows))
    else:
        print(terminal.table(rows, terminal.JOB_COLUMNS) if rows else "no jobs")
    return 0


async def cmd_show(args: argparse.Namespace, ctx: Context) -> int:
    job_id = parse_job_id(args.job_id)
    async with ctx.catalog() as conn:
        job = await jobs.get_job(conn, job_id)
        files = await archive_files.job_files(conn, job_id)
    if args.json:
        print(terminal.dumps({"job": job, "files": files}))
        return 0
    print(terminal.job_report(job, files))
    if "dead_tuples" in job.progress and job.finished_at is not None:
        # since the job's last delete: before its own VACUUM, if it ran one
        last_delete = job.finished_at - dt.timedelta(
            seconds=job.progress.get("vacuum_seconds", 0) + 1
        )
        since = await inspect.vacuumed_since(ctx, job.payload["table"], last_delete)
        print(f"{'vacuum since':<13}{since}")
    return 0


async def cmd_cancel(args: argparse.Namespace, ctx: Context) -> int:
    return await _on_job(ctx, parse_job_id(args.job_id), "cancel")


async def cmd_retry(args: argparse.Namespace, ctx: Context) -> int:
    job_id = parse_job_id(args.job_id)
    await asyncio.to_thread(ctx.storage().check)  # queued again only where it can run
    return await _on_job(ctx, job_id, "retry")


async def _on_job(
    ctx: Context, job_id: uuid.UUID, action: str, limits: dict[str, Any] | None = None
) -> int:
    async with ctx.catalog() as conn, conn.transaction():
        said = await actions.on_job(PgQueue(conn), job_id, action, actions.CLI, limits)
    print(f"job {job_id} {said}")
    return 0


def _pause_target(args: argparse.Namespace) -> uuid.UUID | None:
    if (args.job_id is None) == (args.table is None):
        raise InputError(f"{args.command}: give either a job id or --table T")
    return parse_job_id(args.job_id) if args.job_id else None


async def cmd_pause(args: argparse.Namespace, ctx: Context) -> int:
    return await _pause_or_resume(args, ctx, "pause")


async def cmd_resume(args: argparse.Namespace, ctx: Context) -> int:
    return await _pause_or_resume(args, ctx, "resume")


async def _pause_or_resume(args: argparse.Namespace, ctx: Context, action: str) -> int:
    job_id = _pause_target(args)
    if job_id is not None:
        return await _on_job(ctx, job_id, action)
    table = await inspect.qualified_table(ctx, args.table)
    async with ctx.catalog() as conn, conn.transaction():
        said = await actions.on_table(PgQueue(conn), table, action, actions.CLI)
    print(f"table {table} {said}")
    return 0


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    """The limits an enqueue or throttle command gives; a None value removes one."""
    limits = limit_changes(
        args.max_rows_per_second, args.max_wal_per_second, args.max_replica_lag, args.window
    )
    return (
        {k: v for k, v in limits.items() if v is not None} if args.command == "enqueue" else limits
    )


async def cmd_throttle(args: argparse.Namespace, ctx: Context) -> int:
    return await _on_job(ctx, parse_job_id(args.job_id), "throttle", _limits(args))
