"""Logging: readable text or one JSON object per line; secrets redacted in every record."""

from __future__ import annotations

import json
import logging
import sys

from archiver.errors import first_line, redact


class RedactingFormatter(logging.Formatter):
    def __init__(self, as_json: bool) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        if not self.as_json:
            return redact(super().format(record))
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, default=str))


class OneLine(logging.Filter):
    """A library's warning about a connection it retries (asyncpg's pool refilling
    itself while PostgreSQL restarts: "Failed to restore the pool connection floor") as
    one line with its error's first line, not a traceback: operators grep logs for
    tracebacks, and every process logged one on every restart. --verbose keeps them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {first_line(error)})"
            record.args = None
            record.exc_info = record.exc_text = None
        return True


def setup_logging(log_format: str, verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter(log_format == "json"))
    pool = logging.getLogger("asyncpg.pool")
    for old in [f for f in pool.filters if isinstance(f, OneLine)]:
        pool.removeFilter(old)
    if not verbose:
        pool.addFilter(OneLine())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("azure", "asyncio", "apscheduler.executors", "urllib3", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
