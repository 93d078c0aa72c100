"""The read audit's writer: every read of the archive through serve and every refusal (a
statement PostgreSQL refused, a failed sign-in) becomes a row of `archive_reads` in the
queue database and one JSON line of the `archiver.reads` log. Rows are written off the
statement's path: a thread of their own COPYs what is pending every FLUSH_SECONDS. Where
the queue database cannot take them, they wait, at most BACKLOG of them; past that,
serve refuses reads (53400) until they are written: no read goes unrecorded."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from archiver.errors import first_line
from archiver.serve.watchdog import WATCHDOG
from archiver.serve.wire import SqlError
from archiver.store import read_audit

log = logging.getLogger(__name__)
reads_log = logging.getLogger("archiver.reads")

FLUSH_SECONDS = 0.5
BACKLOG = 10_000  # reads waiting to be written, at most
DOOR = "serve"
# an application_name that says on whose behalf the client reads: archiver attach's
# foreign server sets it with postgres_fdw's %u (the application database's claim)
ON_BEHALF = "archiver attach for "
ATTACH_APPLICATION = ON_BEHALF + "%u"


@dataclass
class Read:
    """One read (or refusal) as it happens; `finish` records it once."""

    role: str
    on_behalf_of: str | None
    address: str | None
    application: str | None
    statement: str | None
    parameters: list[str | None] | None = None
    tables: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: int | None = None
    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    started: float = field(default_factory=time.monotonic)
    outcome: str | None = None
    duration_ms: float | None = None
    door: str = DOOR  # serve's SQL, or its Iceberg REST catalog (archiver.serve.rest)

    def row(self) -> tuple[Any, ...]:
        return (
            self.at, self.door, self.role, self.on_behalf_of, self.address, self.application,
            self.statement, self.parameters, self.tables, self.columns, self.rows,
            self.duration_ms, self.outcome,
        )  # fmt: skip


WRITE_SECONDS = 10.0  # what a batch's write waits for the queue database at most


class ReadAudit:
    """The reads pending, and the thread that writes them to the queue database."""

    def __init__(self, url: str, parameters: bool) -> None:
        self.url = url
        self.parameters = parameters  # parameter values recorded (ARCHIVER_AUDIT_PARAMETERS)
        self._pending: deque[Read] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="serve-audit", daemon=True)
        self._conn: psycopg.Connection[Any] | None = None
        self.written = 0

    def start(self) -> None:
        self._thread.start()

    def check(self) -> None:
        """53400 while the backlog is full: a read now could not be recorded."""
        if len(self._pending) >= BACKLOG:
            raise SqlError(
                "53400",
                "serve: the read audit cannot be written to the queue database; reads "
                "are refused until it can",
            )

    def finish(self, read: Read, outcome: str) -> None:
        """`read` ended with `outcome` (ok, or a SQLSTATE): recorded, once."""
        if read.outcome is not None:
            return
        read.outcome = outcome
        read.duration_ms = round((time.monotonic() - read.started) * 1000, 3)
        with self._lock:
            self._pending.append(read)
        reads_log.info(
            "%s",
            json.dumps(
                dict(zip(read_audit.COLUMNS, read.row(), strict=True)), default=str, sort_keys=True
            ),
        )

    def close(self) -> None:
        """What is pending written (for at most a few seconds), then the thread ends."""
        self._stop.set()
        self._thread.join(5)
        if self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(FLUSH_SECONDS)
            try:
                self._flush()
            except Exception as exc:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                log.warning(
                    "serve: %d reads could not be written to archive_reads yet: %s",
                    len(self._pending),
                    first_line(exc),
                )
                if stopping:
                    return
            if stopping:
                return

    def _flush(self) -> None:
        with self._lock:
            batch = list(self._pending)
        if not batch:
            return
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url, connect_timeout=5)
        fd = self._conn.pgconn.socket
        with WATCHDOG.watch(fd, WRITE_SECONDS, "the read audit's write"), self._conn.transaction():
            read_audit.write(self._conn, [r.row() for r in batch])
        with self._lock:
            for _ in batch:
                self._pending.popleft()
        self.written += len(batch)
