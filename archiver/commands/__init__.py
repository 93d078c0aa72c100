"""The `archiver` subcommands, by family. Every command is added one way:

- in its family's module (`setup`, `queue`, `services`, `dataset`, `housekeeping`), a
  parser in that module's `add_parsers(sub)`, ending `p.set_defaults(func=cmd_<name>)`;
- beside it, `async def cmd_<name>(args, ctx) -> int`: it calls what does the work
  (archiver.operations, shared with the console) and prints what that returns; bad input
  is an `InputError` (one line, exit 1, printed once by cli);
- a new family is a module here and a line in FAMILIES (the order of `archiver --help`).

cli.py builds the parser from FAMILIES, reads the settings and runs the command; it
declares no command itself (tests/unit/test_layout.py holds every command to this)."""

from __future__ import annotations

from archiver.commands import dataset, housekeeping, queue, services, setup
from archiver.commands.args import Subcommands

FAMILIES = (setup, queue, services, dataset, housekeeping)


def add_parsers(sub: Subcommands) -> None:
    for family in FAMILIES:
        family.add_parsers(sub)
