"""The archive's lifecycle (docs/lifecycle.md): `purge`, `erase`, `tier`, `rehydrate`,
`protect`, `remove-orphans`."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from archiver import text
from archiver.commands.args import Subcommands, add_no_wait
from archiver.config import ARCHIVE_TIER, WRITTEN_TIERS
from archiver.context import Context
from archiver.errors import InputError
from archiver.ident import TableName, as_typed
from archiver.lifecycle.retention import Age
from archiver.limits import size_bytes
from archiver.operations import compact, erase, orphans, purge, tiers
from archiver.operations.enqueue import parse_cutoff


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser(
        "purge", help="delete archived files wholly older than a retention period (ledger)"
    )
    p.add_argument("--table", required=True, help="schema.table or table")
    p.add_argument("--older-than", required=True, help="e.g. '7 years', '18 months', '90d'")
    p.add_argument("--dry-run", action="store_true", help="list the files that would go")
    p.add_argument(
        "--skip-protected",
        action="store_true",
        help="purge the others when some files are under an immutability policy or hold",
    )
    add_no_wait(p)
    p.set_defaults(func=cmd_purge)

    p = sub.add_parser("erase", help="erase archived rows matching a predicate, for good")
    p.add_argument("--table", required=True, help="schema.table or table")
    p.add_argument(
        "--where", required=True, help='DuckDB SQL over the archived columns: "customer_id = 42"'
    )
    p.add_argument(
        "--with-children",
        action="store_true",
        help="also the rows of the tables referencing erased rows (an aggregate's children)",
    )
    p.add_argument("--reason", help="the request it answers (a ticket), for the ledger")
    p.add_argument("--dry-run", action="store_true", help="count rows and files; change nothing")
    add_no_wait(p)
    p.set_defaults(func=cmd_erase)

    _add_storage(sub)


def _add_storage(sub: Subcommands) -> None:
    p = sub.add_parser("tier", help="move a table's archived files to an access tier")
    p.add_argument("--table", required=True, help="schema.table or table")
    p.add_argument("--tier", required=True, choices=(*WRITTEN_TIERS, ARCHIVE_TIER))
    p.add_argument("--older-than", help="only files wholly older than this ('1 year')")
    p.add_argument("--dry-run", action="store_true", help="count the files; move nothing")
    p.set_defaults(func=cmd_tier)

    p = sub.add_parser("rehydrate", help="bring a table's Archive-tier files back online")
    p.add_argument("--table", required=True, help="schema.table or table")
    p.add_argument("--tier", choices=WRITTEN_TIERS, default=WRITTEN_TIERS[0])
    p.add_argument("--priority", choices=("Standard", "High"), default="Standard")
    add_no_wait(p)
    p.set_defaults(func=cmd_rehydrate)

    p = sub.add_parser("protect", help="set an immutability policy or legal hold on archived files")
    p.add_argument("--table", required=True, help="schema.table or table")
    p.add_argument("--older-than", help="only files wholly older than this")
    p.add_argument("--immutable-until", help="a date: no one may delete them before")
    hold = p.add_mutually_exclusive_group()
    hold.add_argument("--legal-hold", dest="legal_hold", action="store_true", default=None)
    hold.add_argument("--no-legal-hold", dest="legal_hold", action="store_false")
    p.set_defaults(func=cmd_protect)

    p = sub.add_parser(
        "compact", help="merge a table's small archived files into files of a target size"
    )
    p.add_argument("--table", required=True, help="schema.table or table")
    p.add_argument(
        "--target",
        help="the size to merge into: 128MB, 1GB (default: the table's policy's compact_target, "
        "else ARCHIVER_COMPACT_TARGET)",
    )
    p.add_argument(
        "--period",
        choices=("month", "year", "none"),
        help="keep each merged file's rows within one calendar month or year (default: the "
        "table's policy's compact_period, else ARCHIVER_COMPACT_PERIOD)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="which files, into how many; what is left and why"
    )
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser(
        "remove-orphans",
        help="delete archived files no catalog row names, their job or operation over",
    )
    p.add_argument("--table", help="schema.table or table (default: every table folder)")
    p.add_argument(
        "--grace",
        type=float,
        help="keep those written in the last this many seconds (default ARCHIVER_ORPHAN_GRACE)",
    )
    p.add_argument("--dry-run", action="store_true", help="list them; delete nothing")
    p.set_defaults(func=cmd_remove_orphans)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _age(args: argparse.Namespace) -> Age | None:
    return Age.parse(args.older_than) if args.older_than else None


async def cmd_purge(args: argparse.Namespace, ctx: Context) -> int:
    age = Age.parse(args.older_than)
    done = await purge.purge_table(
        ctx,
        args.table,
        age,
        dry_run=args.dry_run,
        skip_protected=args.skip_protected,
        no_wait=args.no_wait,
        report=print if args.dry_run else _say,
    )
    verb = "would purge" if args.dry_run else "purged"
    line = f"{verb} {text.counted(done.rows, 'row')} in {text.counted(done.files, 'file')}"
    if done.ledger is not None:
        line += f" (ledger {done.ledger})"
    print(line)
    if done.spanning:
        _say(
            f"kept {text.counted(done.spanning, 'file')} whose rows span the limit "
            f"({age} ago): each goes once its newest row is older than {age} "
            f"(the newest: {done.kept_until})"
        )
    if done.skipped:
        _say(f"kept, for their protection: {done.skipped}")
    return 0


async def cmd_erase(args: argparse.Namespace, ctx: Context) -> int:
    done = await erase.erase_rows(
        ctx,
        args.table,
        args.where,
        with_children=args.with_children,
        dry_run=args.dry_run,
        reason=args.reason or "",
        no_wait=args.no_wait,
        report=print if args.dry_run else _say,
    )
    if done.ledger is not None:
        total = sum(done.rows.values())
        files = sum(n for n, _ in done.files.values())
        print(
            f"erased {text.counted(total, 'row')} from {text.counted(files, 'file')} "
            f"(ledger {done.ledger})"
        )
    return 0


async def cmd_tier(args: argparse.Namespace, ctx: Context) -> int:
    done = await tiers.set_tier(
        ctx, args.table, _age(args), args.tier, dry_run=args.dry_run, report=_say
    )
    if not args.dry_run:
        waiting = f", {done.waiting} waiting to move there" if done.waiting else ""
        print(
            f"moved {text.counted(done.moved, 'file')} to {args.tier} "
            f"({done.already} already there; {done.offline} offline{waiting})"
        )
    return 0


async def cmd_rehydrate(args: argparse.Namespace, ctx: Context) -> int:
    await tiers.rehydrate(
        ctx, args.table, args.tier, args.priority, no_wait=args.no_wait, report=print
    )
    return 0


async def cmd_protect(args: argparse.Namespace, ctx: Context) -> int:
    until = None
    if args.immutable_until:
        until = dt.datetime.fromisoformat(parse_cutoff(args.immutable_until, "--immutable-until"))
        if until <= dt.datetime.now(dt.UTC):
            raise InputError(f"--immutable-until: {args.immutable_until} is not in the future")
    if until is None and args.legal_hold is None:
        raise InputError("protect: give --immutable-until DATE and/or --legal-hold/--no-legal-hold")
    count = await tiers.protect(ctx, args.table, _age(args), until, args.legal_hold, report=_say)
    print(f"protected {text.counted(count, 'file')}")
    return 0


async def cmd_remove_orphans(args: argparse.Namespace, ctx: Context) -> int:
    if args.grace is not None and args.grace < 0:
        raise InputError(f"--grace: expected seconds, 0 or more, got {args.grace:g}")
    grace = dt.timedelta(seconds=args.grace) if args.grace is not None else None

    def say(table: orphans.Orphans) -> None:
        for o in table.found:
            print(f"{o.name}: {text.size(o.size)}")
        kept = []
        if table.young:
            kept.append(f"{table.young} within the grace period")
        if table.busy:
            kept.append(f"{table.busy} of a job or operation still running")
        if table.foreign:
            kept.append(f"{len(table.foreign)} archiver did not name")
        if kept:
            _say(f"{table.table}: kept {', '.join(kept)}")

    table = str(TableName.parse(args.table)) if args.table else None  # as recorded
    done = await orphans.remove_orphans(ctx, table, grace=grace, dry_run=args.dry_run, report=say)
    found = [o for t in done for o in t.found]
    verb = "would delete" if args.dry_run else "deleted"
    print(
        f"{verb} {text.counted(len(found), 'orphan')} ({text.size(sum(o.size for o in found))}) "
        f"in {text.counted(len(done), 'table folder')}"
    )
    return 0


async def cmd_compact(args: argparse.Namespace, ctx: Context) -> int:

    target = size_bytes(args.target, "--target") if args.target else None
    name = await compact.resolve(ctx, args.table)
    options = compact.options_for(
        ctx.settings, args.config_file, name, target=target, period=args.period, asked=True
    )
    assert options is not None
    done = await compact.compact_table(
        ctx, as_typed(name), options, dry_run=args.dry_run, report=_say
    )
    layout = done.plan
    if args.dry_run:
        for i, group in enumerate(layout.groups, 1):
            first, last = group[0].root, group[-1].root
            print(
                f"group {i}: {text.counted(len(group), 'chunk')}, "
                f"{text.counted(sum(len(c.files) for c in group), 'file')}, "
                f"{sum(f.row_count for c in group for f in c.files):,} rows, "
                f"{text.size(sum(c.bytes for c in group))}, "
                f"{first.min_cutoff_value} .. {last.max_cutoff_value}"
            )
            for chunk in group:
                for f in chunk.files:
                    print(f"  {f.path}: {f.row_count:,} rows, {text.size(f.byte_size)}")
    reasons: dict[str, int] = {}
    for left in layout.left:
        reasons[left.why.split(": ", 1)[-1]] = reasons.get(left.why.split(": ", 1)[-1], 0) + 1
    for why, n in sorted(reasons.items()):
        _say(f"{name}: left {text.counted(n, 'chunk')}: {why}")
    if args.dry_run:
        print(
            f"would merge {text.counted(layout.files, 'file')} ({layout.rows:,} rows, "
            f"{text.size(layout.bytes)}) of {name} into {_outputs(layout)}; "
            f"{layout.sized} already of a good size, {len(layout.left)} left"
        )
        return 0
    print(
        f"merged {text.counted(done.files_in, 'file')} ({text.size(done.bytes_in)}) of {name} "
        f"into {done.files_out}"
        + (f" (ledger {', '.join(map(str, done.merged))})" if done.merged else "")
    )
    if done.yielded:
        _say(f"{name}: stopped early: {done.yielded}")
    return 0


def _outputs(layout: compact.Plan) -> str:
    """How many files the plan's groups merge into: one per group, and per child table."""
    n = sum(1 + len({f.source_table for c in g for f in c.children}) for g in layout.groups)
    return text.counted(n, "file")
