"""The command line: parsing arguments and printing results; what a command does lives
in operations (and the modules it calls). Every error an operator can hit is printed here
as one line (tracebacks with --verbose)."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import sys
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import asyncpg

from archiver import console, db, failpoints, jobqueue, operations
from archiver.config import CONFIG_VARIABLE, ConfigFile, Settings
from archiver.errors import ArchiverError, InputError, JobFailed, VerificationError, redact
from archiver.ident import TableName
from archiver.logs import setup_logging
from archiver.model import ArchiveRequest, Mode, Status, parse_job_id
from archiver.operations import FileSelection, parse_cutoff

log = logging.getLogger("archiver")

Command = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


async def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    applied = await db.migrate(settings.database_url)
    print(f"applied {', '.join(applied)}" if applied else "schema is up to date")
    return 0


async def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    cutoff = parse_cutoff(args.before)
    table = TableName.parse(args.table)
    request = ArchiveRequest(str(table), args.column, cutoff, Mode(args.mode), args.chunk_rows)
    if args.dry_run:
        if args.wait:
            raise InputError("--dry-run and --wait exclude each other")
        plan = await operations.plan(settings, request)
        print(console.plan_report(plan, cutoff, args.mode))
        return 0
    group, queued = await operations.enqueue_archive(
        settings,
        request,
        parallel=args.parallel,
        priority=args.priority,
        max_attempts=args.max_attempts,
    )
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
        print(f"group {group}: {len(queued)} key ranges", file=sys.stderr)
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
    else:
        print(console.job_report(job, files))
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
        table = await operations.qualified_table(settings, args.table)
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
        table = await operations.qualified_table(settings, args.table)
        async with db.connection(settings.database_url) as conn:
            resumed = await jobqueue.resume_table(conn, table)
        print(f"table {table} {'resumed' if resumed else 'was not paused'}")
        return 0
    async with db.connection(settings.database_url) as conn:
        await jobqueue.resume_job(conn, job_id)
    print(f"job {job_id} resumed")
    return 0


async def cmd_grants(args: argparse.Namespace, settings: Settings) -> int:
    print(await operations.grants(settings, args.role, args.table or [], args.config_file))
    return 0


async def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.doctor import run_checks

    checks = await run_checks(settings, args.config_file)
    for check in checks:
        print(check)
    return 0 if all(c.ok for c in checks) else 1


async def cmd_policies(args: argparse.Namespace, settings: Settings) -> int:
    checked = await operations.checked_policies(settings, args.config_file)
    now = dt.datetime.now(dt.UTC)
    for policy, table in checked:
        print(
            f"{policy.name}: {policy.mode} {table}.{policy.column} older than "
            f"{policy.older_than.days} days, schedule {policy.schedule!r} ({policy.timezone.key})"
        )
        for at in policy.next_fire_times(now, args.count):
            print(f"  next {at.isoformat()}  cutoff {policy.cutoff(at).isoformat()}")
    return 0


async def cmd_scheduler(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.scheduler import PolicyScheduler

    checked = await operations.checked_policies(settings, args.config_file)
    await PolicyScheduler(settings, checked).run()
    return 0


async def cmd_restore(args: argparse.Namespace, settings: Settings) -> int:
    if (args.job is None) == (args.table is None):
        raise InputError("restore: give either --job ID or --table T")
    if args.job and (args.cutoff_from or args.cutoff_to):
        raise InputError("restore: --from/--to go with --table, not --job")
    selection = FileSelection(
        job_id=parse_job_id(args.job) if args.job else None,
        table=args.table,
        cutoff_from=parse_cutoff(args.cutoff_from, "--from") if args.cutoff_from else None,
        cutoff_to=parse_cutoff(args.cutoff_to, "--to") if args.cutoff_to else None,
    )
    out = sys.stdout if args.dry_run else sys.stderr
    rows, files = await operations.restore(
        settings,
        selection,
        into=args.into,
        skip_conflicts=args.on_conflict == "skip",
        dry_run=args.dry_run,
        report=lambda line: print(line, file=out, flush=True),
    )
    target = args.into or files[0].source_table
    verb = "would restore" if args.dry_run else "restored"
    print(f"{verb} {rows} rows from {len(files)} files into {target}")
    return 0


async def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    if args.job and args.table:
        raise InputError("verify: give --job ID or --table T, not both")
    selection = FileSelection(job_id=parse_job_id(args.job) if args.job else None, table=args.table)
    checked, problems = await operations.verify(settings, selection)
    for line in problems:
        print(line)
    print(f"verified {checked} files: {len(problems)} problems", file=sys.stderr)
    if problems:
        raise VerificationError(f"verify found {len(problems)} problems (listed above)")
    return 0


class _Subcommands:
    """add_parser with the options every subcommand shares."""

    def __init__(self, sub: Any, common: argparse.ArgumentParser) -> None:
        self.sub, self.common = sub, common

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self.sub.add_parser(name, parents=[self.common], **kwargs)
        return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="archiver",
        description="Move old PostgreSQL rows into Parquet on Azure Blob Storage: "
        "no row lost, none archived twice.",
    )
    # -v and --config go before or after the subcommand: each subparser knows them too,
    # with SUPPRESS defaults so a value given before the subcommand is not reset.
    common = argparse.ArgumentParser(add_help=False)
    for target, default in ((parser, None), (common, argparse.SUPPRESS)):
        target.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            default=default if default is not None else False,
            help="debug logs and tracebacks",
        )
        target.add_argument(
            "--config",
            default=default,
            help="archiver.toml: [settings] and [[policy]] (default: $ARCHIVER_CONFIG)",
        )
    sub = _Subcommands(parser.add_subparsers(dest="command", required=True), common)

    p = sub.add_parser("migrate", help="create or upgrade the schema (safe to repeat)")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("enqueue", help="queue an archive job; prints its id")
    p.add_argument("--table", required=True, help="table or schema.table")
    p.add_argument("--before", required=True, help="archive rows older than this date/timestamp")
    p.add_argument(
        "--column", default="created_at", help="date/timestamp column (default created_at)"
    )
    p.add_argument("--mode", choices=[str(m) for m in Mode], default=str(Mode.MOVE))
    p.add_argument(
        "--chunk-rows", type=positive_int, help="rows per chunk (default: ~160 MB of data)"
    )
    p.add_argument("--priority", type=int, default=0, help="higher runs first (default 0)")
    p.add_argument("--max-attempts", type=positive_int, default=5)
    p.add_argument(
        "--parallel",
        type=positive_int,
        default=1,
        metavar="N",
        help="split into N key ranges that N workers take at once (one job each)",
    )
    p.add_argument(
        "--wait", action="store_true", help="show progress until the job ends; non-zero if it fails"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print rows, Parquet size, chunks and index use (EXPLAIN); queue nothing",
    )
    p.set_defaults(func=cmd_enqueue)

    p = sub.add_parser("worker", help="run jobs until SIGTERM")
    p.add_argument("--concurrency", type=positive_int, default=1, help="jobs at once")
    p.add_argument("--burst", action="store_true", help="exit when no job is left")
    p.add_argument(
        "--metrics-port", type=int, metavar="P", help="serve Prometheus metrics on port P"
    )
    p.set_defaults(func=cmd_worker)

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

    p = sub.add_parser("grants", help="print the GRANTs a least-privilege worker role needs")
    p.add_argument("--role", required=True, help="the role workers and the scheduler log in as")
    p.add_argument(
        "--table",
        action="append",
        help="a table to archive (repeat; default: the config file's policy tables)",
    )
    p.set_defaults(func=cmd_grants)

    p = sub.add_parser("doctor", help="check a deployment: database, schema, rights, storage")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("policies", help="check the config file's policies; list next fire times")
    p.add_argument("--count", type=positive_int, default=3, help="fire times to list (default 3)")
    p.set_defaults(func=cmd_policies)

    p = sub.add_parser("scheduler", help="enqueue each policy's slots until SIGTERM")
    p.set_defaults(func=cmd_scheduler)

    p = sub.add_parser("restore", help="bring archived rows back (one transaction, COPY)")
    p.add_argument("--job", help="restore the files of this job")
    p.add_argument("--table", help="restore this table's files (schema.table or table)")
    p.add_argument("--from", dest="cutoff_from", help="with --table: cutoff column >= this")
    p.add_argument("--to", dest="cutoff_to", help="with --table: cutoff column < this")
    p.add_argument("--into", help="another table (created from the archived types if missing)")
    p.add_argument(
        "--on-conflict",
        choices=("refuse", "skip"),
        default="refuse",
        help="rows whose key exists: refuse the restore (default) or skip those rows",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="say which files and rows; change nothing"
    )
    p.set_defaults(func=cmd_restore)

    p = sub.add_parser("verify", help="check archived files against the catalog")
    p.add_argument("--job", help="only this job's files")
    p.add_argument("--table", help="only this table's files")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config_path = args.config or os.environ.get(CONFIG_VARIABLE)
        args.config_file = ConfigFile.read(config_path) if config_path else None
        settings = (
            args.config_file.settings_over(os.environ) if args.config_file else Settings.from_env()
        )
        setup_logging(settings.log_format, args.verbose)
        failpoints.configure(settings.failpoints)
        command: Command = args.func
        return asyncio.run(command(args, settings))
    except ArchiverError as exc:
        return _fail(str(exc), args.verbose)
    except asyncpg.UndefinedTableError as exc:
        return _fail(f"{exc}; run `archiver migrate` first", args.verbose)
    except (asyncpg.PostgresError, *db.CONNECTION_ERRORS) as exc:
        return _fail(f"database error: {exc}", args.verbose)
    except KeyboardInterrupt:
        return 130


def _fail(message: str, verbose: bool) -> int:
    if verbose:
        logging.getLogger("archiver").exception("failed")
    print(f"archiver: error: {redact(message)}", file=sys.stderr)
    return 1
