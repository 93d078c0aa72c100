"""The command line: parsing arguments, then the command (commands.py prints, operations
does the work). Every error an operator can hit is printed here as one line (tracebacks
with --verbose)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

import adbc_driver_manager
import asyncpg

from archiver import bulk, db, failpoints
from archiver.commands import (
    cmd_cancel,
    cmd_console,
    cmd_doctor,
    cmd_enqueue,
    cmd_grants,
    cmd_jobs,
    cmd_migrate,
    cmd_pause,
    cmd_policies,
    cmd_publish,
    cmd_query,
    cmd_restore,
    cmd_resume,
    cmd_retry,
    cmd_scheduler,
    cmd_show,
    cmd_status,
    cmd_throttle,
    cmd_verify,
    cmd_worker,
)
from archiver.commands_lifecycle import add_lifecycle_parsers, add_no_wait
from archiver.config import CONFIG_VARIABLE, ConfigFile, Settings
from archiver.errors import ArchiverError, first_line, redact
from archiver.interrupt import stops_on_signal
from archiver.logs import setup_logging
from archiver.model import Mode, Status

log = logging.getLogger("archiver")

Command = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


def non_negative_int(text: str) -> int:
    return positive_int(text) if text.strip() != "0" else 0


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """A malformed command line is one line on stderr, as every other bad input is (not
    argparse's usage block, which `--help` prints); exit code 2, argparse's own."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


class _Subcommands:
    """add_parser with the options every subcommand shares."""

    def __init__(self, sub: Any, common: argparse.ArgumentParser) -> None:
        self.sub, self.common = sub, common

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self.sub.add_parser(name, parents=[self.common], **kwargs)
        return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
        "--tier",
        choices=("Hot", "Cool", "Cold"),
        help="the access tier its files are written in (default ARCHIVER_ACCESS_TIER)",
    )
    p.add_argument(
        "--chunk-rows", type=positive_int, help="rows per chunk (default: ~160 MB of data)"
    )
    p.add_argument(
        "--max-rows-per-second",
        type=positive_int,
        metavar="N",
        help="pace the job to N rows a second (change it later with archiver throttle)",
    )
    p.add_argument(
        "--max-replica-lag",
        metavar="LIMIT",
        help="move mode: wait while a replica or slot is behind by more (30s or 64MB)",
    )
    p.add_argument(
        "--max-wal-per-second",
        metavar="SIZE",
        help="move mode: pace chunks to this much WAL a second (16MB)",
    )
    p.add_argument(
        "--window",
        metavar="HH:MM-HH:MM[ ZONE]",
        help="run only inside this daily window (default zone UTC); a running job stops "
        "at a chunk boundary when it closes and goes on in the next",
    )
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

    p = sub.add_parser("throttle", help="change a queued or running job's limits")
    p.add_argument("job_id")
    p.add_argument(
        "--max-rows-per-second",
        type=non_negative_int,
        metavar="N",
        help="rows a second; 0 removes the limit (a running job obeys at once)",
    )
    p.add_argument("--max-replica-lag", metavar="LIMIT", help="30s or 64MB; 0 removes the limit")
    p.add_argument("--max-wal-per-second", metavar="SIZE", help="16MB; 0 removes the limit")
    p.add_argument(
        "--window",
        metavar="HH:MM-HH:MM[ ZONE]",
        help="a daily maintenance window; none removes it",
    )
    p.set_defaults(func=cmd_throttle)

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

    p = sub.add_parser("console", help="serve the web console for operators until SIGTERM")
    p.add_argument("--bind", help="HOST:PORT (default ARCHIVER_CONSOLE_BIND, 127.0.0.1:8080)")
    p.set_defaults(func=cmd_console)

    p = sub.add_parser(
        "restore", help="move archived rows back (one transaction, COPY); or copy them"
    )
    p.add_argument("--job", help="restore the files of this job")
    p.add_argument("--table", help="restore this table's files (schema.table or table)")
    p.add_argument("--from", dest="cutoff_from", help="with --table: cutoff column >= this")
    p.add_argument("--to", dest="cutoff_to", help="with --table: cutoff column < this")
    p.add_argument(
        "--into",
        help="copy into another table (created from the archived types if missing); the "
        "rows stay archived",
    )
    p.add_argument(
        "--keep-archive",
        action="store_true",
        help="copy the rows back: they stay archived (default: they leave the archive)",
    )
    p.add_argument(
        "--on-conflict",
        choices=("refuse", "skip"),
        default="refuse",
        help="rows whose key exists: refuse the restore (default) or skip those rows",
    )
    p.add_argument(
        "--ignore-dropped-columns",
        action="store_true",
        help="restore rows whose archived columns no longer all exist, without those columns",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="say which files, rows and column differences; change nothing",
    )
    add_no_wait(p)
    p.set_defaults(func=cmd_restore)

    p = sub.add_parser(
        "publish", help="add a table's archived files to its Delta table now (workers do it)"
    )
    p.add_argument("--table", required=True, help="schema.table or table")
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="drop the table's Delta log and publish every file again (the log is derived)",
    )
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("query", help="SQL over the archived tables in place (DuckDB on Delta)")
    p.add_argument(
        "sql", help="e.g. \"SELECT count(*) FROM orders WHERE created_at < '2020-01-01'\""
    )
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table")
    p.add_argument("--output", metavar="FILE", help="write the result here instead of stdout")
    for flag, said in (
        ("--explain", "print DuckDB's EXPLAIN ANALYZE (files read of each table's files) instead"),
        ("--with-live", "each archived table is its live rows and its archived rows, at one "
         "snapshot (_archiver_source says which)"),
    ):  # fmt: skip
        p.add_argument(flag, action="store_true", help=said)
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("verify", help="check archived files against the catalog")
    p.add_argument("--job", help="only this job's files")
    p.add_argument("--table", help="only this table's files")
    p.add_argument("--skip-offline", action="store_true", help="Archive-tier files: size, MD5")
    p.set_defaults(func=cmd_verify)
    add_lifecycle_parsers(sub)
    return parser


# Arrow's buffers from the C library's allocator unless the operator chose a pool: with
# pyarrow's default (mimalloc) a copy job's worker peaked at 222-232 MB on 1M reference rows
# and 245-252 MB on 3M; with malloc at 202-203 and 205-206 MB, at the same CPU (8 MB driver
# batches; docs/performance.md, "Memory"). pyarrow reads it once, as it loads (not yet,
# here: pa.set_memory_pool() later would leave the Parquet writer's buffers behind). Empty
# counts as unset (Arrow would take its default).
ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def main(argv: Sequence[str] | None = None) -> int:
    if not os.environ.get(ARROW_POOL_VARIABLE):
        os.environ[ARROW_POOL_VARIABLE] = "system"
    args = build_parser().parse_args(argv)
    try:
        config_path = args.config or os.environ.get(CONFIG_VARIABLE)
        args.config_file = ConfigFile.read(config_path) if config_path else None
        settings = (
            args.config_file.settings_over(os.environ) if args.config_file else Settings.from_env()
        )
        setup_logging(settings.log_format, args.verbose)
        failpoints.configure(settings.failpoints)
        bulk.use_driver(settings.adbc_driver)
        command: Command = args.func
        with stops_on_signal(args.command, settings):
            return asyncio.run(command(args, settings))
    except BrokenPipeError:
        # stdout's reader went away (`archiver jobs | head -1`): stop quietly, as Unix tools do,
        # status 128 + SIGPIPE (asyncpg and Azure raise their own for a broken socket)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # for the exit flush
        return 141
    except ArchiverError as exc:
        return _fail(str(exc), args.verbose)
    except asyncpg.UndefinedTableError as exc:
        return _fail(
            f"{exc}; run `archiver migrate` first (if it ran, its schema is not on this "
            "role's search_path: `archiver doctor` names it)",
            args.verbose,
        )
    except (asyncpg.PostgresError, adbc_driver_manager.Error, *db.CONNECTION_ERRORS) as exc:
        return _fail(f"database error: {first_line(exc)}", args.verbose)
    except KeyboardInterrupt:
        return 130


def _fail(message: str, verbose: bool) -> int:
    if verbose:
        logging.getLogger("archiver").exception("failed")
    print(f"archiver: error: {redact(message)}", file=sys.stderr)
    return 1
