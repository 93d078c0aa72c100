"""Errors an operator can hit. The CLI prints each as one line; tracebacks only with --verbose."""


class ArchiverError(Exception):
    """Base of every error meant for an operator rather than a developer."""


class ConfigError(ArchiverError):
    """A setting is missing or malformed; the message names it."""


class InputError(ArchiverError):
    """A command's argument does not fit the database (unknown table, bad date, ...)."""


class DatabaseUnavailable(ArchiverError):
    """PostgreSQL could not be reached."""


class StorageError(ArchiverError):
    """Blob storage could not be reached or refused an operation."""


class VerificationError(ArchiverError):
    """What was stored differs from what was sent or taken."""


class JobStateError(ArchiverError):
    """A job is unknown, or its state does not allow what was asked."""


class LeaseLost(ArchiverError):
    """This worker no longer holds the job (it was rescued, cancelled or deleted)."""


class JobFailed(ArchiverError):
    """A job waited on (`enqueue --wait`) ended failed or cancelled."""


class RestoreFailed(ArchiverError):
    """A restore was rolled back (a cast, a constraint, the connection); nothing changed."""
