"""The command line: the parser built from the command families (archiver.commands, where
every command declares its arguments beside what it prints), the settings read once, and
the command run. Every error an operator can hit is printed here as one line (tracebacks
with --verbose)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from contextlib import nullcontext
from typing import Any, NoReturn

import adbc_driver_manager
import asyncpg

from archiver import bulk, commands, db, failpoints, memory, outcome, scratch
from archiver.commands.args import Subcommands
from archiver.config import CONFIG_VARIABLE, ConfigFile, Settings
from archiver.context import Context
from archiver.errors import ArchiverError, first_line, redact
from archiver.interrupt import stops_on_signal
from archiver.logs import setup_logging

log = logging.getLogger("archiver")

Command = Callable[[argparse.Namespace, Context], Coroutine[Any, Any, int]]
# The commands that run until stopped, with pools of their own on their context; every
# other command's steps share one session of each driver per database (archiver.context).
SERVICES = frozenset(("worker", "scheduler", "console", "serve"))
# The commands that change the archive or the queue: a failure says which side of its
# commit it came from (archiver.outcome).
COMMITTING = frozenset(
    ("restore", "erase", "purge", "tier", "rehydrate", "protect", "publish", "compact", "enqueue")
)


class _Parser(argparse.ArgumentParser):
    """A malformed command line is one line on stderr, as every other bad input is (not
    argparse's usage block, which `--help` prints); exit code 2, argparse's own."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


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
    commands.add_parsers(Subcommands(parser.add_subparsers(dest="command", required=True), common))
    return parser


async def _run(command: Command, args: argparse.Namespace, ctx: Context) -> int:
    """The command run with the process's context, every session it holds closed after
    (a service opens its pools on it: archiver.context)."""
    try:
        return await command(args, ctx)
    finally:
        await ctx.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    memory.settle()
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
        sides = outcome.sides(args.command) if args.command in COMMITTING else nullcontext()
        with (
            scratch.directory(args.command) as workdir,
            stops_on_signal(args.command, settings),
            sides as side,
        ):
            ctx = Context(
                settings,
                name=args.command,
                workdir=workdir,
                side=side,
                shared_sessions=args.command not in SERVICES,
            )
            return asyncio.run(_run(command, args, ctx))
    except BrokenPipeError:
        # stdout's reader went away (`archiver jobs | head -1`): stop quietly, as Unix tools do,
        # status 128 + SIGPIPE (asyncpg and Azure raise their own for a broken socket)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # for the exit flush
        return 141
    except outcome.Said as exc:
        if exc.exit_code == 0:  # what was asked is done; a later step is left to the workers
            print(f"archiver: warning: {redact(str(exc))}", file=sys.stderr)
            return 0
        return _fail(str(exc), args.verbose)
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
