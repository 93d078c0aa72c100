"""Which side of its commit a command's failure came from.

A command that changes the archive (restore, erase, purge, tier, rehydrate, publish,
compact, `enqueue --wait`) fails either before its change committed -- then nothing
changed, and running it again is safe -- or after, when the change stands and something
is left (a publication, a sweep, the rest of a run). The operator must be told which:
"failed" after an erasure committed reads as "nothing was erased".

The command runs inside `sides(command)`, whose Side its context holds; the code that
commits calls the context's `committed(what, left)` right after its COMMIT (in whatever
thread: the Side is shared). A
failure is then said as one line: before, "<command>: nothing changed: <error>"; after,
"<command>: <what> and it stands; then <error>; <left>". A change the command completed
makes that a warning (exit 0: what was asked is done, the workers finish the rest); a run
cut short part-way (`partial`) an error."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from archiver.errors import (
    ArchiverError,
    ConfigError,
    InputError,
    JobFailed,
    RestoreFailed,
    first_line,
)

Report = Callable[[str], None]  # a command's progress, a line a call


class Said(ArchiverError):
    """A failure said with the side of its commit. `exit_code` 0: the change the command
    was asked for committed (said as a warning); 1 otherwise."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Side:
    command: str
    done: str | None = None  # what stands, once committed ("the erasure is committed (ledger 12)")
    left: str = ""  # what finishes it
    partial: bool = False  # done is only part of what was asked


# Failures that already say there was no change: refusals of bad input (before
# anything), a restore rolled back, a bad setting.
_BEFORE_ANYTHING = (InputError, RestoreFailed, ConfigError)
# and those that say what happened, whichever side: a job waited on that failed
_SAYS_ITSELF = (Said, JobFailed)


@contextlib.contextmanager
def sides(command: str) -> Iterator[Side]:
    """Around a command: a failure said as the module says (Said)."""
    side = Side(command)
    try:
        yield side
    except (*_SAYS_ITSELF, BrokenPipeError):  # the reader of stdout went: said by cli.main
        raise
    except _BEFORE_ANYTHING as exc:
        if side.done is None:
            raise
        raise _after(side, exc) from exc
    except Exception as exc:
        if side.done is None:
            raise Said(f"{command}: nothing changed: {describe(exc)}", 1) from exc
        raise _after(side, exc) from exc


def _after(side: Side, exc: BaseException) -> Said:
    left = f"; {side.left}" if side.left else ""
    return Said(
        f"{side.command}: {side.done}, and it stands; then {describe(exc)}{left}",
        1 if side.partial else 0,
    )


def describe(exc: BaseException) -> str:
    """An error in a line: archiver's own as they say it, a driver's with its kind."""
    if isinstance(exc, ArchiverError):
        return first_line(exc)
    module = type(exc).__module__.split(".")[0]
    if module in ("asyncpg", "adbc_driver_manager"):
        return f"database error: {first_line(exc)}"
    if module == "azure":
        return f"storage error: {first_line(exc)}"
    return f"{type(exc).__name__}: {first_line(exc)}"
