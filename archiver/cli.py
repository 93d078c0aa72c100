"""The command line: parsing and wiring only; every error an operator can hit is printed
here as one line (tracebacks with --verbose)."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import asyncpg

from archiver import db, queue
from archiver.config import Settings, redact
from archiver.errors import ArchiverError, InputError, VerificationError
from archiver.ident import TableName
from archiver.logs import setup_logging
from archiver.pipeline import ArchiveRequest

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


async def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.storage import open_storage

    cutoff = parse_cutoff(args.before)
    table = TableName.parse(args.table)
    storage = open_storage(settings)
    qualified = await asyncio.to_thread(_validate_archive, settings, table, args.column)
    await asyncio.to_thread(storage.check)
    request = ArchiveRequest(qualified, args.column, cutoff, args.mode, args.chunk_rows)
    conn = await db.connect(settings.database_url)
    try:
        job_id, created = await queue.enqueue(
            conn,
            request.payload(),
            dedup_key=f"archive:{qualified}:{args.column}:{cutoff}:{args.mode}",
            lock_key=f"table:{qualified}",
            priority=args.priority,
            max_attempts=args.max_attempts,
        )
    finally:
        await conn.close()
    if not created:
        print(f"{job_id}", file=sys.stdout)
        print(f"an identical archive is already queued or running: job {job_id}", file=sys.stderr)
        return 0
    print(job_id)
    return 0


async def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.storage import open_storage
    from archiver.worker import Worker

    storage = open_storage(settings)
    await asyncio.to_thread(storage.check)
    worker = Worker(settings, storage, concurrency=args.concurrency, burst=args.burst)
    await worker.run()
    return 0


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    conn = await db.connect(settings.database_url)
    try:
        rows = await queue.status_summary(conn)
    finally:
        await conn.close()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no jobs")
        return 0
    header = ("table", "status", "jobs", "rows", "bytes")
    table = [
        tuple(str(r[k]) for k in ("source_table", "status", "jobs", "rows", "bytes")) for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(header, *table, strict=True)]
    for line in (header, *table):
        print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
    return 0


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    job_id = queue.parse_job_id(args.job_id)
    conn = await db.connect(settings.database_url)
    try:
        status = await queue.cancel(conn, job_id)
    finally:
        await conn.close()
    print(
        f"job {job_id} cancelled"
        if status == "cancelled"
        else f"job {job_id} will stop at its next chunk boundary"
    )
    return 0


async def cmd_retry(args: argparse.Namespace, settings: Settings) -> int:
    job_id = queue.parse_job_id(args.job_id)
    conn = await db.connect(settings.database_url)
    try:
        await queue.retry(conn, job_id)
    finally:
        await conn.close()
    print(f"job {job_id} queued again")
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
    conn = await db.connect(settings.database_url)
    try:
        files = await queue.archived_files(
            conn,
            job_id=job_id,
            table=args.table,
            cutoff_from=dt.datetime.fromisoformat(lo) if lo else None,
            cutoff_to=dt.datetime.fromisoformat(hi) if hi else None,
            state="committed",
        )
    finally:
        await conn.close()
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
    conn = await db.connect(settings.database_url)
    try:
        files = await queue.archived_files(conn, job_id=job_id, table=args.table)
        known = await queue.archived_files(conn)
    finally:
        await conn.close()
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
    parser = argparse.ArgumentParser(prog="archiver", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs and tracebacks")
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
    p.set_defaults(func=cmd_enqueue)

    p = sub.add_parser("worker", help="run jobs until SIGTERM")
    p.add_argument("--concurrency", type=positive_int, default=1, help="jobs at once")
    p.add_argument("--burst", action="store_true", help="exit when no job is left")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("status", help="jobs by table and status")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "cancel", help="cancel a queued job, or stop a running one at its next chunk"
    )
    p.add_argument("job_id")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("retry", help="queue a failed or cancelled job again")
    p.add_argument("job_id")
    p.set_defaults(func=cmd_retry)

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
    p.add_argument("--dry-run", action="store_true", help="say which files and rows; change nothing")
    p.set_defaults(func=cmd_restore)

    p = sub.add_parser("verify", help="check archived files against the catalog")
    p.add_argument("--job", help="only this job's files")
    p.add_argument("--table", help="only this table's files")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        setup_logging(settings.log_format, args.verbose)
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
