"""The command line: parsing and wiring only; every error an operator can hit is printed
here as one line (tracebacks with --verbose)."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import sys
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import asyncpg

from archiver import console, db, failpoints, queue
from archiver.config import ConfigFile, Settings, redact
from archiver.errors import ArchiverError, ConfigError, InputError, JobFailed, VerificationError
from archiver.ident import TableName
from archiver.logs import setup_logging
from archiver.pipeline import ArchiveRequest

if TYPE_CHECKING:
    from archiver.policy import Policy

log = logging.getLogger("archiver")

Command = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


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


def _validate_archive(settings: Settings, table: TableName, column: str) -> str:
    """Check the table, its key and the cutoff column on the source database."""
    from archiver import source

    with db.connect_bulk(settings.effective_source_url) as conn:
        info = source.describe_table(conn, table)
        source.check_cutoff_column(info, column)
    return info.qualified


def _plan_archive(settings: Settings, request: ArchiveRequest) -> dict[str, Any]:
    from archiver.pipeline import plan_archive

    with db.connect_bulk(settings.effective_source_url) as conn:
        return plan_archive(conn, request).to_json()


async def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.storage import open_storage

    cutoff = parse_cutoff(args.before)
    table = TableName.parse(args.table)
    if args.dry_run:
        if args.wait:
            raise InputError("--dry-run and --wait exclude each other")
        request = ArchiveRequest(str(table), args.column, cutoff, args.mode, args.chunk_rows)
        plan = await asyncio.to_thread(_plan_archive, settings, request)
        print(console.plan_report(plan, cutoff, args.mode))
        return 0
    storage = open_storage(settings)
    qualified = await asyncio.to_thread(_validate_archive, settings, table, args.column)
    await asyncio.to_thread(storage.check)
    request = ArchiveRequest(qualified, args.column, cutoff, args.mode, args.chunk_rows)
    if args.parallel > 1:
        return await _enqueue_split(args, settings, request)
    async with db.connection(settings.database_url) as conn:
        job_id, created = await _queue(conn, args, request, queue.archive_keys(request))
    print(job_id)
    if not created:
        print(f"an identical archive is already queued or running: job {job_id}", file=sys.stderr)
    if args.wait:
        sys.stdout.flush()
        await _wait(settings, job_id)
    return 0


async def _queue(
    conn: asyncpg.Connection,
    args: argparse.Namespace,
    request: ArchiveRequest,
    keys: tuple[str, str],
) -> tuple[uuid.UUID, bool]:
    """Queue one archive job with the command's priority and attempts."""
    dedup_key, lock_key = keys
    return await queue.enqueue(
        conn,
        request.payload(),
        dedup_key=dedup_key,
        lock_key=lock_key,
        priority=args.priority,
        max_attempts=args.max_attempts,
    )


def _split_archive(settings: Settings, request: ArchiveRequest, parts: int) -> list[Any]:
    from archiver import source

    with db.connect_bulk(settings.effective_source_url) as conn:
        info = source.describe_table(conn, TableName.parse(request.table))
        queries = source.ChunkQueries(info, source.check_cutoff_column(info, request.column))
        return queries.split(conn, request.cutoff, parts)


async def _enqueue_split(
    args: argparse.Namespace, settings: Settings, request: ArchiveRequest
) -> int:
    """enqueue --parallel N: one job per key range, sharing a group id; prints each id."""
    import dataclasses

    ranges = await asyncio.to_thread(_split_archive, settings, request, args.parallel)
    group = str(uuid.uuid4())
    ids = []
    async with db.connection(settings.database_url) as conn, conn.transaction():
        for i, key_range in enumerate(ranges):  # all parts queued, or none
            part = dataclasses.replace(request, key_range=key_range, group=group)
            job_id, created = await _queue(conn, args, part, queue.range_keys(part, i, len(ranges)))
            if not created:
                print(f"part {i} is already queued or running: job {job_id}", file=sys.stderr)
            ids.append(job_id)
    for job_id in ids:
        print(job_id)
    print(f"group {group}: {len(ids)} key ranges", file=sys.stderr)
    if args.wait:
        sys.stdout.flush()
        for job_id in ids:
            await _wait(settings, job_id)
    return 0


async def _wait(settings: Settings, job_id: uuid.UUID) -> None:
    """Draw the job's progress on stderr until it ends; a failed or cancelled job is an error."""
    async with db.connection(settings.database_url) as conn:
        job = await console.wait_for_job(conn, job_id, sys.stderr)
    if job.status != "completed":
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
        report = await queue.ops_report(conn)
    print(console.dumps(report) if args.json else console.status_report(report))
    return 0


async def cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    async with db.connection(settings.database_url) as conn:
        rows = await queue.list_jobs(conn, args.status, args.table, args.limit)
    if args.json:
        print(console.dumps(rows))
    else:
        print(console.table(rows, console.JOB_COLUMNS) if rows else "no jobs")
    return 0


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    job_id = queue.parse_job_id(args.job_id)
    async with db.connection(settings.database_url) as conn:
        job = await queue.get_job(conn, job_id)
        files = await queue.job_files(conn, job_id)
    if args.json:
        print(console.dumps({"job": job, "files": files}))
    else:
        print(console.job_report(job, files))
    return 0


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    job_id = queue.parse_job_id(args.job_id)
    async with db.connection(settings.database_url) as conn:
        status = await queue.cancel(conn, job_id)
    print(
        f"job {job_id} cancelled"
        if status == "cancelled"
        else f"job {job_id} will stop at its next chunk boundary"
    )
    return 0


async def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    job_id = queue.parse_job_id(args.job_id)
    async with db.connection(settings.database_url) as conn:
        await queue.retry(conn, job_id)
    print(f"job {job_id} queued again")
    return 0


def _checked_policies(args: argparse.Namespace, settings: Settings) -> list[tuple[Policy, str]]:
    """The config file's policies, each with its table checked on the source database."""
    from archiver import source
    from archiver.policy import parse_policies

    config: ConfigFile | None = args.config_file
    if config is None:
        raise ConfigError("no config file: pass --config FILE or set ARCHIVER_CONFIG")
    policies = parse_policies(config.policies)
    if not policies:
        raise ConfigError(f"config file {config.path}: no [[policy]] defined")
    checked = []
    with db.connect_bulk(settings.effective_source_url) as conn:
        for policy in policies:
            try:
                info = source.describe_table(conn, policy.table)
            except InputError as exc:
                raise InputError(f"policy {policy.name!r}: table: {exc}") from None
            try:
                source.check_cutoff_column(info, policy.column)
            except InputError as exc:
                raise InputError(f"policy {policy.name!r}: column: {exc}") from None
            checked.append((policy, info.qualified))
    return checked


async def cmd_policies(args: argparse.Namespace, settings: Settings) -> int:
    checked = await asyncio.to_thread(_checked_policies, args, settings)
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

    checked = await asyncio.to_thread(_checked_policies, args, settings)
    await PolicyScheduler(settings, checked).run()
    return 0


def _restore_in_thread(settings: Settings, storage: Any, plan: Any, report: Any) -> int:
    import tempfile
    from pathlib import Path

    from archiver.restore import restore

    with db.connect_bulk(settings.effective_source_url) as conn:
        return restore(conn, storage, plan, Path(tempfile.gettempdir()), report)


async def cmd_restore(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.restore import RestorePlan
    from archiver.storage import open_storage

    if (args.job is None) == (args.table is None):
        raise InputError("restore: give either --job ID or --table T")
    if args.job and (args.cutoff_from or args.cutoff_to):
        raise InputError("restore: --from/--to go with --table, not --job")
    job_id = queue.parse_job_id(args.job) if args.job else None
    lo = parse_cutoff(args.cutoff_from, "--from") if args.cutoff_from else None
    hi = parse_cutoff(args.cutoff_to, "--to") if args.cutoff_to else None
    if args.into is not None:
        TableName.parse(args.into)
    async with db.connection(settings.database_url) as conn:
        files = await queue.archived_files(
            conn,
            job_id=job_id,
            table=args.table,
            cutoff_from=dt.datetime.fromisoformat(lo) if lo else None,
            cutoff_to=dt.datetime.fromisoformat(hi) if hi else None,
            state="committed",
        )
    if not files:
        raise InputError("no archived files match")
    storage = open_storage(settings)
    plan = RestorePlan(files, args.into, args.on_conflict == "skip", lo, hi, args.dry_run)
    out = sys.stdout if args.dry_run else sys.stderr
    rows = await asyncio.to_thread(
        _restore_in_thread, settings, storage, plan, lambda line: print(line, file=out, flush=True)
    )
    target = args.into or files[0]["source_table"]
    verb = "would restore" if args.dry_run else "restored"
    print(f"{verb} {rows} rows from {len(files)} files into {target}")
    return 0


def _verify_in_thread(storage: Any, files: list[dict[str, Any]]) -> list[str]:
    import tempfile
    from pathlib import Path

    from archiver.restore import verify_file

    here = [f for f in files if f["storage_url"] == str(storage.location)]
    problems: list[str] = []
    for f in here:
        problems += verify_file(storage, f, Path(tempfile.gettempdir()))
    return problems


async def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.storage import open_storage

    if args.job and args.table:
        raise InputError("verify: give --job ID or --table T, not both")
    job_id = queue.parse_job_id(args.job) if args.job else None
    async with db.connection(settings.database_url) as conn:
        files = await queue.archived_files(conn, job_id=job_id, table=args.table)
        known = await queue.archived_files(conn)
    storage = open_storage(settings)
    if args.table and not files and "." not in args.table:
        raise InputError(f"no archived files of table {args.table!r}; give schema.table")
    # Unknown objects are looked for where the selected files live.
    prefix = storage.object_name("")
    if args.table or args.job:
        table = files[0]["source_table"] if files else args.table
        prefix = storage.object_name(f"{table}/" + (f"job-{job_id}-" if job_id else ""))
    problems = await asyncio.to_thread(_verify_in_thread, storage, files)
    paths = {f["path"] for f in known if f["storage_url"] == str(storage.location)}
    listed = await asyncio.to_thread(lambda: [o.name for o in storage.list(prefix)])
    problems += [f"{name}: not in the catalog" for name in listed if name not in paths]
    for line in problems:
        print(line)
    print(f"verified {len(files)} files: {len(problems)} problems", file=sys.stderr)
    if problems:
        raise VerificationError(f"verify found {len(problems)} problems (listed above)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="archiver",
        description="Move old PostgreSQL rows into Parquet on Azure Blob Storage: "
        "no row lost, none archived twice.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs and tracebacks")
    parser.add_argument(
        "--config", help="archiver.toml: [settings] and [[policy]] (default: $ARCHIVER_CONFIG)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("migrate", help="create or upgrade the schema (safe to repeat)")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("enqueue", help="queue an archive job; prints its id")
    p.add_argument("--table", required=True, help="table or schema.table")
    p.add_argument("--before", required=True, help="archive rows older than this date/timestamp")
    p.add_argument(
        "--column", default="created_at", help="date/timestamp column (default created_at)"
    )
    p.add_argument("--mode", choices=("move", "copy"), default="move")
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
    p.add_argument("--status", choices=("queued", "running", "completed", "failed", "cancelled"))
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
        config_path = args.config or os.environ.get("ARCHIVER_CONFIG")
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
