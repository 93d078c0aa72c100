"""The long-running processes supervisord keeps alive: `worker`, `scheduler`,
`console` (each until SIGTERM)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from archiver.commands.args import Subcommands, positive_int
from archiver.config import Settings, sub_path
from archiver.errors import ConfigError
from archiver.operations import enqueue


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


def root_path(text: str) -> str:
    try:
        return sub_path("--root-path", text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--root-path: ")) from None


async def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.storage import open_storage
    from archiver.worker import Worker

    storage = open_storage(settings)
    await asyncio.to_thread(storage.check)
    if args.metrics_port is not None:
        from archiver import metrics

        metrics.serve(args.metrics_port, settings.database_url)
    worker = Worker(
        settings, storage, concurrency=args.concurrency, burst=args.burst, config=args.config_file
    )
    await worker.run()
    if worker.abandoned:  # a job thread is stuck in I/O; its job was handed back
        logging.shutdown()
        os._exit(0)
    return 0


async def cmd_scheduler(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.scheduler import PolicyScheduler

    checked = await enqueue.checked_policies(settings, args.config_file)
    await PolicyScheduler(settings, checked).run()
    return 0


async def cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.web.server import serve

    root = args.root_path if args.root_path is not None else settings.console_root_path
    await serve(settings, args.config_file, args.bind or settings.console_bind, root)
    return 0
