"""Setting a deployment up: `migrate`, `doctor`, `grants`, `access`, `policies`."""

from __future__ import annotations

import argparse
import datetime as dt

from archiver import db
from archiver.commands.args import Subcommands, positive_int
from archiver.context import Context
from archiver.doctor import run_checks
from archiver.errors import InputError
from archiver.operations import access, enqueue, grants


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser("migrate", help="create or upgrade the schema (safe to repeat)")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("doctor", help="check a deployment: database, schema, rights, storage")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("grants", help="print the GRANTs a least-privilege worker role needs")
    p.add_argument("--role", required=True, help="the role workers and the scheduler log in as")
    p.add_argument(
        "--table",
        action="append",
        help="a table to archive (repeat; default: the config file's policy tables)",
    )
    p.set_defaults(func=cmd_grants)

    p = sub.add_parser(
        "access",
        help="archive-only readers: grant, revoke or list who reads a table's archive alone",
    )
    p.add_argument("action", choices=("grant", "revoke", "list"))
    p.add_argument("--table", help="the archived table (schema.table)")
    p.add_argument("--role", help="a role of the catalog's server")
    p.add_argument(
        "--column",
        action="append",
        help="grant: a column it may read (repeat; default: every column)",
    )
    p.set_defaults(func=cmd_access)

    p = sub.add_parser("policies", help="check the config file's policies; list next fire times")
    p.add_argument("--count", type=positive_int, default=3, help="fire times to list (default 3)")
    p.set_defaults(func=cmd_policies)


async def cmd_migrate(args: argparse.Namespace, ctx: Context) -> int:
    applied = await db.migrate(ctx.settings.database_url)
    print(f"applied {', '.join(applied)}" if applied else "schema is up to date")
    return 0


async def cmd_doctor(args: argparse.Namespace, ctx: Context) -> int:

    checks = await run_checks(ctx, args.config_file)
    for check in checks:
        print(check)
    return 0 if all(c.ok for c in checks) else 1


async def cmd_grants(args: argparse.Namespace, ctx: Context) -> int:
    print(await grants.grants(ctx, args.role, args.table or [], args.config_file))
    return 0


async def cmd_access(args: argparse.Namespace, ctx: Context) -> int:
    if args.action == "list":
        for row in await access.listed(ctx):
            columns = ", ".join(row["columns"]) if row["columns"] else "every column"
            print(f"{row['table_name']}\t{row['role']}\t{columns}\t{row['granted_by']}")
        return 0
    if not args.table or not args.role:
        raise InputError(f"access {args.action}: give --table and --role")
    if args.action == "grant":
        print(await access.grant(ctx, args.table, args.role, args.column))
    else:
        if args.column:
            raise InputError(
                "access revoke: --column is for grant (revoke takes the role's access whole)"
            )
        print(await access.revoke(ctx, args.table, args.role))
    return 0


async def cmd_policies(args: argparse.Namespace, ctx: Context) -> int:
    checked = await enqueue.checked_policies(ctx, args.config_file)
    now = dt.datetime.now(dt.UTC)
    for policy, table in checked:
        print(
            f"{policy.name}: {policy.mode} {table}.{policy.column} older than "
            f"{policy.older_than}, schedule {policy.schedule!r} ({policy.timezone.key})"
        )
        for at in policy.next_fire_times(now, args.count):
            print(f"  next {at.isoformat()}  cutoff {policy.cutoff(at).isoformat()}")
    return 0
