"""What the command families share when they declare their arguments: the subcommand
adder (every subcommand knows -v and --config), argument types, and the options several
commands take with one meaning."""

from __future__ import annotations

import argparse
from typing import Any


class Subcommands:
    """add_parser with the options every subcommand shares."""

    def __init__(self, sub: Any, common: argparse.ArgumentParser) -> None:
        self.sub, self.common = sub, common

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self.sub.add_parser(name, parents=[self.common], **kwargs)
        return parser


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    return positive_int(text) if text.strip() != "0" else 0


def add_no_wait(p: argparse.ArgumentParser) -> None:
    """--no-wait, of every command that changes the archive (docs/delta.md)."""
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the change is committed and leave its Delta publication and the "
        "deletion of what it retired to the workers (default: readers see it on return)",
    )


def add_limits(p: argparse.ArgumentParser, *, removable: bool) -> None:
    """A job's limits, given to enqueue (set) and throttle (changed; 0 or none removes one)."""
    p.add_argument(
        "--max-rows-per-second",
        type=non_negative_int if removable else positive_int,
        metavar="N",
        help="rows a second; 0 removes the limit (a running job obeys at once)"
        if removable
        else "pace the job to N rows a second (change it later with archiver throttle)",
    )
    p.add_argument(
        "--max-replica-lag",
        metavar="LIMIT",
        help="30s or 64MB; 0 removes the limit"
        if removable
        else "move mode: wait while a replica or slot is behind by more (30s or 64MB)",
    )
    p.add_argument(
        "--max-wal-per-second",
        metavar="SIZE",
        help="16MB; 0 removes the limit"
        if removable
        else "move mode: pace chunks to this much WAL a second (16MB)",
    )
    p.add_argument(
        "--window",
        metavar="HH:MM-HH:MM[ ZONE]",
        help="a daily maintenance window; none removes it"
        if removable
        else "run only inside this daily window (default zone UTC); a running job stops "
        "at a chunk boundary when it closes and goes on in the next",
    )
