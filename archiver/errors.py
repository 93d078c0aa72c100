"""Errors an operator can hit, and how any error becomes one redacted line. The CLI prints
each as one line; tracebacks only with --verbose."""

import re
from datetime import datetime


class ArchiverError(Exception):
    """Base of every error meant for an operator rather than a developer."""


class ConfigError(ArchiverError):
    """A setting is missing or malformed; the message names it."""


class InputError(ArchiverError):
    """A command's argument does not fit the database (unknown table, bad date, ...)."""


class PublisherBusy(Exception):
    """A table's publisher lock was not obtained within the wait given (a worker is
    publishing it): the publication is left to the workers."""

    def __init__(self, table: str, seconds: float) -> None:
        super().__init__(f"{table}: publisher lock held for over {seconds:g} s")
        self.table, self.seconds = table, seconds


class DatabaseUnavailable(ArchiverError):
    """PostgreSQL could not be reached."""


class StorageError(ArchiverError):
    """Blob storage could not be reached or refused an operation."""


class OfflineError(StorageError):
    """A file in the Archive access tier: its bytes cannot be read until rehydrated."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"{name} is in the Archive tier and cannot be read until it is rehydrated "
            "(`archiver rehydrate`, up to 15 hours)"
        )
        self.name = name


class VerificationError(ArchiverError):
    """What was stored differs from what was sent or taken."""


class JobStateError(ArchiverError):
    """A job is unknown, or its state does not allow what was asked."""


class LeaseLost(ArchiverError):
    """This worker no longer holds the job (it was rescued, cancelled or deleted)."""


class LockBusy(ArchiverError):
    """A chunk gave up waiting for a lock an application holds; it was rolled back."""


class OutsideWindow(ArchiverError):
    """The job's maintenance window is closed: it goes back to the queue until `opens`."""

    def __init__(self, message: str, opens: datetime) -> None:
        super().__init__(message)
        self.opens = opens


class JobFailed(ArchiverError):
    """A job waited on (`enqueue --wait`) ended failed or cancelled."""


class RestoreFailed(ArchiverError):
    """A restore was rolled back (a cast, a constraint, the connection); nothing changed."""


_SECRET_PATTERNS = (
    (re.compile(r"(://[^:/@\s]+:)[^@\s]+@"), r"\1***@"),  # user:password@ in URLs
    (re.compile(r"((?:AccountKey|SharedAccessSignature|password)=)[^;\s&]+", re.I), r"\1***"),
    (re.compile(r"([?&](?:sig|password)=)[^&\s]+", re.I), r"\1***"),
)


def redact(text: str) -> str:
    """Hide passwords, account keys and SAS signatures in anything headed for a log or error."""
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (its type's name if it has none), redacted."""
    text = str(exc).strip()
    return redact(text.splitlines()[0] if text else type(exc).__name__)


def error_line(exc: BaseException) -> str:
    """`Type: first line`, redacted: how a job's error is logged and recorded, with the
    server function it was raised in, if any (see raised_in)."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    where = raised_in(exc)
    return redact(
        f"{type(exc).__name__}: {text.splitlines()[0]}" + (f" ({where})" if where else "")
    )


_FUNCTION = re.compile(r"^\s*(?:CONTEXT:\s*)?(\S+ function .*\S)\s*$")


def raised_in(exc: BaseException) -> str:
    """`raised in <function>` for a PostgreSQL error raised inside a server function: the
    outermost function its CONTEXT names, which for a move's DELETE is a trigger's (a
    trigger's own permission error otherwise reads as archiver's). From the message
    (ADBC puts CONTEXT there), its details (PG_DIAG_CONTEXT) or asyncpg's `context`."""
    context = str(exc).partition("CONTEXT:")[2] or str(getattr(exc, "context", None) or "")
    details = getattr(exc, "details", None)  # ADBC's (key, value) pairs; others differ
    if not context and isinstance(details, list | tuple):
        pairs = [d for d in details if isinstance(d, tuple) and len(d) == 2]
        values = [v for k, v in pairs if k == b"PG_DIAG_CONTEXT" and isinstance(v, bytes)]
        context = values[0].decode(errors="replace") if values else ""
    functions = [m[1] for m in map(_FUNCTION.match, context.splitlines()) if m]
    return f"raised in {functions[-1]}" if functions else ""
