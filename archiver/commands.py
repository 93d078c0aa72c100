"""What each command prints: the `archiver` subcommands, from parsed arguments to output.
The work itself is in operations (and the modules it calls); argument parsing is in cli."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import sys
import uuid
from typing import Any

from archiver import console, db, jobqueue, text
from archiver.config import Settings
from archiver.errors import InputError, JobFailed, VerificationError
from archiver.ident import TableName
from archiver.limits import limit_changes
from archiver.model import ArchiveRequest, Mode, Status, parse_job_id
from archiver.operations import enqueue, grants, inspect
from archiver.operations import files as file_ops


async def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    applied = await db.migrate(settings.database_url)
    print(f"applied {', '.join(applied)}" if applied else "schema is up to date")
    return 0


async def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    cutoff = enqueue.parse_cutoff(args.before)
    table = TableName.parse(args.table)
    request = ArchiveRequest(
        str(table),
        args.column,
        cutoff,
        Mode(args.mode),
        args.chunk_rows,
        cdc_marker=not args.no_cdc_marker,
        vacuum=args.vacuum,
        with_children=args.with_children,
        partitions=args.partitions,
        delta=settings.delta and not args.no_delta,
        tier=args.tier or "",
    )
    if args.tier and settings.storage_location().scheme != "az":
        raise InputError("--tier: access tiers need Azure storage (az://)")
    if args.dry_run:
        if args.wait:
            raise InputError("--dry-run and --wait exclude each other")
        plan = await enqueue.plan(settings, request)
        print(console.plan_report(plan, cutoff, args.mode))
        return 0
    group, queued, warning = await enqueue.enqueue_archive(
        settings,
        request,
        parallel=args.parallel,
        priority=args.priority,
        max_attempts=args.max_attempts,
        limits=_limits(args) or None,
    )
    if warning:
        print(f"archiver: warning: {warning}", file=sys.stderr)
    for i, job in enumerate(queued):
        if not job.created:
            print(
                f"part {i} is already queued or running: job {job.job_id}"
                if group
                else f"an identical archive is already queued or running: job {job.job_id}",
                file=sys.stderr,
            )
    for job in queued:
        print(job.job_id)
    if group:
        print(f"group {group}: {text.counted(len(queued), 'job')}", file=sys.stderr)
    if args.wait:
        sys.stdout.flush()
        for job in queued:
            await _wait(settings, job.job_id)
    return 0


async def _wait(settings: Settings, job_id: uuid.UUID) -> None:
    """Draw the job's progress on stderr until it ends; a failed or cancelled job is an error."""
    async with db.connection(settings.database_url) as conn:
        job = await console.wait_for_job(conn, job_id, sys.stderr)
    if job.status != Status.COMPLETED:
        raise JobFailed(f"job {job_id} {job.status}: {job.last_error or 'no error recorded'}")
    print(f"job {job_id} completed: {console.progress_text(job.progress)}", file=sys.stderr)


async def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.storage import open_storage
    from archiver.worker import Worker

    storage = open_storage(settings)
    await asyncio.to_thread(storage.check)
    if args.metrics_port is not None:
        from archiver import metrics

        metrics.serve(args.metrics_port, settings.database_url)
    worker = Worker(settings, storage, concurrency=args.concurrency, burst=args.burst)
    await worker.run()
    if worker.abandoned:  # a job thread is stuck in I/O; its job was handed back
        logging.shutdown()
        os._exit(0)
    return 0


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    async with db.connection(settings.database_url) as conn:
        report = await jobqueue.ops_report(conn)
    print(console.dumps(report) if args.json else console.status_report(report))
    return 0


async def cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    async with db.connection(settings.database_url) as conn:
        rows = await jobqueue.list_jobs(conn, args.status, args.table, args.limit)
    if args.json:
        print(console.dumps(rows))
    else:
        print(console.table(rows, console.JOB_COLUMNS) if rows else "no jobs")
    return 0


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    job_id = parse_job_id(args.job_id)
    async with db.connection(settings.database_url) as conn:
        job = await jobqueue.get_job(conn, job_id)
        files = await jobqueue.job_files(conn, job_id)
    if args.json:
        print(console.dumps({"job": job, "files": files}))
        return 0
    print(console.job_report(job, files))
    if "dead_tuples" in job.progress and job.finished_at is not None:
        # since the job's last delete: before its own VACUUM, if it ran one
        last_delete = job.finished_at - dt.timedelta(
            seconds=job.progress.get("vacuum_seconds", 0) + 1
        )
        since = await inspect.vacuumed_since(settings, job.payload["table"], last_delete)
        print(f"{'vacuum since':<13}{since}")
    return 0


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    job_id = parse_job_id(args.job_id)
    async with db.connection(settings.database_url) as conn:
        status = await jobqueue.cancel(conn, job_id)
    print(
        f"job {job_id} cancelled"
        if status == Status.CANCELLED
        else f"job {job_id} will stop at its next chunk boundary"
    )
    return 0


async def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    job_id = parse_job_id(args.job_id)
    async with db.connection(settings.database_url) as conn:
        await jobqueue.retry(conn, job_id)
    print(f"job {job_id} queued again")
    return 0


def _pause_target(args: argparse.Namespace) -> uuid.UUID | None:
    if (args.job_id is None) == (args.table is None):
        raise InputError(f"{args.command}: give either a job id or --table T")
    return parse_job_id(args.job_id) if args.job_id else None


async def cmd_pause(args: argparse.Namespace, settings: Settings) -> int:
    job_id = _pause_target(args)
    if job_id is None:
        table = await inspect.qualified_table(settings, args.table)
        async with db.connection(settings.database_url) as conn:
            new = await jobqueue.pause_table(conn, table)
        print(f"table {table} {'paused' if new else 'was already paused'}")
        return 0
    async with db.connection(settings.database_url) as conn:
        status = await jobqueue.pause_job(conn, job_id)
    print(
        f"job {job_id} paused"
        + (": it stops at its next chunk boundary" if status == Status.RUNNING else "")
    )
    return 0


async def cmd_resume(args: argparse.Namespace, settings: Settings) -> int:
    job_id = _pause_target(args)
    if job_id is None:
        table = await inspect.qualified_table(settings, args.table)
        async with db.connection(settings.database_url) as conn:
            resumed = await jobqueue.resume_table(conn, table)
        print(f"table {table} {'resumed' if resumed else 'was not paused'}")
        return 0
    async with db.connection(settings.database_url) as conn:
        await jobqueue.resume_job(conn, job_id)
    print(f"job {job_id} resumed")
    return 0


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    """The limits an enqueue or throttle command gives; a None value removes one."""
    limits = limit_changes(
        args.max_rows_per_second, args.max_wal_per_second, args.max_replica_lag, args.window
    )
    return (
        {k: v for k, v in limits.items() if v is not None} if args.command == "enqueue" else limits
    )


async def cmd_throttle(args: argparse.Namespace, settings: Settings) -> int:
    job_id = parse_job_id(args.job_id)
    changes = _limits(args)
    if not changes:
        raise InputError(
            "throttle: give --max-rows-per-second N, --max-wal-per-second SIZE, "
            "--max-replica-lag LIMIT or --window HH:MM-HH:MM (0 or none removes one)"
        )
    async with db.connection(settings.database_url) as conn:
        limits = await jobqueue.set_limits(conn, job_id, changes)
    print(f"job {job_id} limits: {console.dumps(limits) if limits else 'none'}")
    return 0


async def cmd_grants(args: argparse.Namespace, settings: Settings) -> int:
    print(await grants.grants(settings, args.role, args.table or [], args.config_file))
    return 0


async def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.doctor import run_checks

    checks = await run_checks(settings, args.config_file)
    for check in checks:
        print(check)
    return 0 if all(c.ok for c in checks) else 1


async def cmd_policies(args: argparse.Namespace, settings: Settings) -> int:
    checked = await enqueue.checked_policies(settings, args.config_file)
    now = dt.datetime.now(dt.UTC)
    for policy, table in checked:
        print(
            f"{policy.name}: {policy.mode} {table}.{policy.column} older than "
            f"{policy.older_than.days} days, schedule {policy.schedule!r} ({policy.timezone.key})"
        )
        for at in policy.next_fire_times(now, args.count):
            print(f"  next {at.isoformat()}  cutoff {policy.cutoff(at).isoformat()}")
    return 0


async def cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.web.server import serve

    await serve(settings, args.config_file, args.bind or settings.console_bind)
    return 0


async def cmd_scheduler(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.scheduler import PolicyScheduler

    checked = await enqueue.checked_policies(settings, args.config_file)
    await PolicyScheduler(settings, checked).run()
    return 0


async def cmd_restore(args: argparse.Namespace, settings: Settings) -> int:
    if (args.job is None) == (args.table is None):
        raise InputError("restore: give either --job ID or --table T")
    if args.job and (args.cutoff_from or args.cutoff_to):
        raise InputError("restore: --from/--to go with --table, not --job")
    selection = file_ops.FileSelection(
        job_id=parse_job_id(args.job) if args.job else None,
        table=args.table,
        cutoff_from=enqueue.parse_cutoff(args.cutoff_from, "--from") if args.cutoff_from else None,
        cutoff_to=enqueue.parse_cutoff(args.cutoff_to, "--to") if args.cutoff_to else None,
    )
    out = sys.stdout if args.dry_run else sys.stderr
    done, files = await file_ops.restore(
        settings,
        selection,
        into=args.into,
        keep_archive=args.keep_archive,
        skip_conflicts=args.on_conflict == "skip",
        dry_run=args.dry_run,
        ignore_dropped_columns=args.ignore_dropped_columns,
        no_wait=args.no_wait,
        report=lambda line: print(line, file=out, flush=True),
    )
    target = args.into or ", ".join(sorted({f.source_table for f in files}))
    verb = "would restore" if args.dry_run else "restored"
    moved = ""
    if done.retired and not args.into and not args.keep_archive:
        rewritten = sum(t["rewritten"] for t in done.per_table.values())
        emptied = len(done.retired) - rewritten
        parts = [f"{text.counted(emptied, 'file')} emptied"] if emptied else []
        if rewritten:
            parts.append(f"{text.counted(rewritten, 'file')} rewritten without them")
        verb_ = "they would leave" if args.dry_run else "they left"
        moved = f"; {verb_} the archive: {', '.join(parts)}"
    print(
        f"{verb} {text.counted(done.rows, 'row')} from {text.counted(len(files), 'file')} "
        f"into {target}{moved}"
    )
    return 0


async def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    if args.job and args.table:
        raise InputError("verify: give --job ID or --table T, not both")
    selection = file_ops.FileSelection(
        job_id=parse_job_id(args.job) if args.job else None, table=args.table
    )
    checked, problems = await file_ops.verify(settings, selection, skip_offline=args.skip_offline)
    for line in problems:
        print(line)
    found = text.counted(len(problems), "problem")
    print(f"verified {text.counted(checked, 'file')}: {found}", file=sys.stderr)
    if problems:
        raise VerificationError(f"verify found {found} (listed above)")
    return 0


async def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.operations.publish import publish_table

    done = await publish_table(settings, args.table, rebuild=args.rebuild)
    for why in done.refused:
        print(f"left out: {why}")
    version = "none yet" if done.version is None else str(done.version)
    print(
        f"{done.table}: {text.counted(done.files, 'file')} "
        f"({text.counted(done.rows, 'row')}) added; Delta table version {version}"
    )
    if done.refused:
        raise InputError(
            f"publish: {text.counted(len(done.refused), 'file')} left out (listed above)"
        )
    return 0


async def cmd_query(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.operations.query import query

    out = await query(
        settings,
        args.sql,
        args.format,
        args.output,
        explain=args.explain,
        with_live=args.with_live,
    )
    if out is not None:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    return 0
