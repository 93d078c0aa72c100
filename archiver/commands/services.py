"""The long-running processes supervisord keeps alive: `worker`, `scheduler`,
`console`, `serve` (each until SIGTERM); and `attach`, which points the application's
database at `serve`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from archiver.commands.args import Subcommands, positive_int
from archiver.config import sub_path
from archiver.context import Context
from archiver.errors import ConfigError
from archiver.operations import access, enqueue
from archiver.web.middleware import is_loopback
from archiver.web.server import parse_bind, serve


def add_parsers(sub: Subcommands) -> None:
    p = sub.add_parser("worker", help="run jobs until SIGTERM")
    p.add_argument("--concurrency", type=positive_int, default=1, help="jobs at once")
    p.add_argument("--burst", action="store_true", help="exit when no job is left")
    p.add_argument(
        "--metrics-port", type=int, metavar="P", help="serve Prometheus metrics on port P"
    )
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("scheduler", help="enqueue each policy's slots until SIGTERM")
    p.set_defaults(func=cmd_scheduler)

    p = sub.add_parser("console", help="serve the web console for operators until SIGTERM")
    p.add_argument("--bind", help="HOST:PORT (default ARCHIVER_CONSOLE_BIND, 127.0.0.1:8080)")
    p.add_argument(
        "--root-path",
        type=root_path,
        metavar="PATH",
        help="the sub-path a reverse proxy serves it under, e.g. /archiver (default ARCHIVER_CONSOLE_ROOT_PATH)",
    )
    p.set_defaults(func=cmd_console)

    p = sub.add_parser(
        "serve", help="answer SQL over the archive as a read-only PostgreSQL server until SIGTERM"
    )
    p.add_argument("--bind", help="HOST:PORT (default ARCHIVER_SERVE_BIND, 127.0.0.1:6432)")
    p.add_argument(
        "--iceberg-rest",
        metavar="HOST:PORT",
        help="also answer the Iceberg REST catalog there (default ARCHIVER_SERVE_ICEBERG_REST; "
        "docs/iceberg-rest.md)",
    )
    p.add_argument(
        "--auth-sql",
        action="store_true",
        help="print the SQL an administrator runs in the queue database so that people sign "
        "in as their own roles (docs/access.md), and exit",
    )
    p.set_defaults(func=cmd_serve)

    _add_attach(sub)


def _add_attach(sub: Subcommands) -> None:
    p = sub.add_parser(
        "attach",
        help="in the application's database: a foreign table of a table's archive and a view "
        "of all its rows, live or archived (postgres_fdw to archiver serve)",
    )
    p.add_argument("--table", required=True, help="the archived table (schema.table)")
    p.add_argument(
        "--host",
        help="where serve listens, as the database server reaches it (default: "
        "ARCHIVER_SERVE_BIND's host; 127.0.0.1 where that is 0.0.0.0 or ::)",
    )
    p.add_argument(
        "--port", type=positive_int, help="serve's port (default: ARCHIVER_SERVE_BIND's, 6432)"
    )
    p.add_argument(
        "--schema",
        default="archive",
        help="where the foreign tables and the view go (default archive)",
    )
    p.add_argument(
        "--server",
        default="archiver_archive",
        help="the foreign server's name (default archiver_archive)",
    )
    p.add_argument(
        "--sslmode",
        choices=("disable", "prefer", "require", "verify-ca", "verify-full"),
        help="libpq's sslmode for the connection to serve (default require; prefer where "
        "--host is loopback, where serve may listen without TLS)",
    )
    p.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="ROLE",
        help="a role that may read the table's archive whatever the live table grants it "
        "(repeat; as `archiver access grant`)",
    )
    p.add_argument(
        "--drop", action="store_true", help="drop the table's view and foreign tables instead"
    )
    p.set_defaults(func=cmd_attach)


def root_path(text: str) -> str:
    try:
        return sub_path("--root-path", text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--root-path: ")) from None


async def cmd_worker(args: argparse.Namespace, ctx: Context) -> int:
    from archiver.worker import Worker

    await asyncio.to_thread(ctx.storage().check)
    if args.metrics_port is not None:
        from archiver import metrics

        metrics.serve(args.metrics_port, ctx)
    worker = Worker(ctx, concurrency=args.concurrency, burst=args.burst, config=args.config_file)
    await worker.run()
    if worker.abandoned:  # a job thread is stuck in I/O; its job was handed back
        logging.shutdown()
        os._exit(0)
    return 0


async def cmd_scheduler(args: argparse.Namespace, ctx: Context) -> int:
    from archiver.scheduler import PolicyScheduler

    checked = await enqueue.checked_policies(ctx, args.config_file)
    await PolicyScheduler(ctx, checked).run()
    return 0


async def cmd_console(args: argparse.Namespace, ctx: Context) -> int:

    root = args.root_path if args.root_path is not None else ctx.settings.console_root_path
    await serve(ctx, args.config_file, args.bind or ctx.settings.console_bind, root)
    return 0


async def cmd_serve(args: argparse.Namespace, ctx: Context) -> int:
    from archiver.serve.server import serve

    if args.auth_sql:
        from archiver.serve.signin import auth_sql

        async with ctx.catalog() as conn:
            print(auth_sql(await conn.fetchval("SELECT current_user")), end="")
        return 0
    await serve(ctx, args.bind or ctx.settings.serve_bind,
                args.iceberg_rest or ctx.settings.serve_iceberg_rest)  # fmt: skip
    return 0


async def cmd_attach(args: argparse.Namespace, ctx: Context) -> int:
    from archiver.serve import attach

    bound_host, bound_port = parse_bind(ctx.settings.serve_bind)
    host = args.host or (bound_host if bound_host not in ("0.0.0.0", "::") else "127.0.0.1")
    port = args.port or bound_port
    # serve listens without TLS on loopback only (its default address): there, prefer
    sslmode = args.sslmode or ("prefer" if is_loopback(host) else "require")

    async with ctx.source() as conn:
        if args.drop:
            table = await attach.detach(conn, args.table, schema=args.schema)
            print(f"dropped the view and foreign tables of {table} in schema {args.schema}")
            return 0
        done = await attach.attach(
            conn,
            ctx.settings,
            args.table,
            host=host,
            port=port,
            schema=args.schema,
            server=args.server,
            sslmode=sslmode,
        )
    for role in args.grant:
        print(await access.grant(ctx, done.table, role, None))
    changed = await asyncio.to_thread(attach.mirror_grants, ctx.settings)
    names = f"{done.schema}.{done.table.split('.', 1)[1]}"
    print(
        f"{names}: the archived rows of {done.table} ({done.columns} columns), through {done.server}"
    )
    if done.view:
        print(f"{names}_all: every row of {done.table}, live or archived, each once")
    else:
        print(
            f"no {names}_all view: the catalog is not in this database (ARCHIVER_SOURCE_URL), "
            "so no snapshot here sees which files hold the archived rows"
        )
    print(
        f"the live table's grants mirrored onto them ({changed} changes); serve keeps them in step"
    )
    return 0
