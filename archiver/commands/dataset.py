"""The archive as a dataset: `query` it, `restore` rows out of it, `publish` a
table's Delta table, `verify` its files against the catalog."""

from __future__ import annotations

import argparse
import sys

from archiver import outcome, text
from archiver.commands.args import Subcommands, add_no_wait
from archiver.context import Context
from archiver.errors import InputError, VerificationError
from archiver.model import parse_job_id
from archiver.operations import enqueue
from archiver.operations import restore_files as restore_op
from archiver.operations import verify as verify_op
from archiver.operations.archive_query import query
from archiver.operations.publish import publish_table
from archiver.operations.selection import FileSelection


def add_parsers(sub: Subcommands) -> None:
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
        ("--allow-local-files", "let the statement read this machine's files too "
         "(read_csv('exports/x.csv')); without it, it reads the archive alone, as through serve"),
    ):  # fmt: skip
        p.add_argument(flag, action="store_true", help=said)
    p.set_defaults(func=cmd_query)

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

    p = sub.add_parser("verify", help="check archived files against the catalog")
    p.add_argument("--job", help="only this job's files")
    p.add_argument("--table", help="only this table's files")
    p.add_argument("--skip-offline", action="store_true", help="Archive-tier files: size, MD5")
    p.set_defaults(func=cmd_verify)


async def cmd_query(args: argparse.Namespace, ctx: Context) -> int:

    out = await query(
        ctx,
        args.sql,
        args.format,
        args.output,
        explain=args.explain,
        with_live=args.with_live,
        local_files=args.allow_local_files,
    )
    if out is not None:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    return 0


async def cmd_restore(args: argparse.Namespace, ctx: Context) -> int:
    if (args.job is None) == (args.table is None):
        raise InputError("restore: give either --job ID or --table T")
    if args.job and (args.cutoff_from or args.cutoff_to):
        raise InputError("restore: --from/--to go with --table, not --job")
    selection = FileSelection(
        job_id=parse_job_id(args.job) if args.job else None,
        table=args.table,
        cutoff_from=enqueue.parse_cutoff(args.cutoff_from, "--from") if args.cutoff_from else None,
        cutoff_to=enqueue.parse_cutoff(args.cutoff_to, "--to") if args.cutoff_to else None,
    )
    out = sys.stdout if args.dry_run else sys.stderr
    done, files = await restore_op.restore(
        ctx,
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


async def cmd_publish(args: argparse.Namespace, ctx: Context) -> int:

    done = await publish_table(ctx, args.table, rebuild=args.rebuild)
    for why in done.refused:
        print(f"left out: {why}")
    version = "none yet" if done.version is None else str(done.version)
    print(
        f"{done.table}: {text.counted(done.files, 'file')} "
        f"({text.counted(done.rows, 'row')}) added; Delta table version {version}"
    )
    if done.refused:  # published, all but these: a result, said as it is
        raise outcome.Said(
            f"publish: {text.counted(len(done.refused), 'file')} left out (listed above)", 1
        )
    return 0


async def cmd_verify(args: argparse.Namespace, ctx: Context) -> int:
    if args.job and args.table:
        raise InputError("verify: give --job ID or --table T, not both")
    selection = FileSelection(job_id=parse_job_id(args.job) if args.job else None, table=args.table)
    checked, problems = await verify_op.verify(ctx, selection, skip_offline=args.skip_offline)
    for line in problems:
        print(line)
    found = text.counted(len(problems), "problem")
    print(f"verified {text.counted(checked, 'file')}: {found}", file=sys.stderr)
    if problems:
        raise VerificationError(f"verify found {found} (listed above)")
    return 0
