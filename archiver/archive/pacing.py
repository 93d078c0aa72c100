"""How a job waits: out of its maintenance window, under its rate limits, while its
replicas lag, and after a lock timeout, each wait ended early by a stop, a cancel or a
lost lease (the `interrupt`)."""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from archiver.archive.context import JobContext
from archiver.errors import LockBusy, OutsideWindow
from archiver.limits import WINDOW, window_opens
from archiver.model import Mode
from archiver.source.guardrails import replica_lag

log = logging.getLogger(__name__)

Interrupt = Callable[[], BaseException | None]
Waited = Callable[[str, float], None]


def back_off(job: JobContext, busy: int, what: str, interrupt: Interrupt) -> None:
    """After the `busy`-th lock timeout in a row: wait, exponentially longer each time
    (the attempt is not spent), or raise once ARCHIVER_LOCK_RETRIES are used up."""
    if busy > job.limits.lock_retries:
        raise LockBusy(what)
    delay = min(30.0, 2.0 ** (busy - 1)) * random.uniform(0.5, 1.0)
    log.warning(
        "job %s: %s; retrying in %.1fs (%d of %d, the attempt is not spent)",
        job.job_id,
        what,
        delay,
        busy,
        job.limits.lock_retries,
    )
    sleep(delay, interrupt)


def sleep(seconds: float, interrupt: Interrupt) -> None:
    """Wait, but let a stop, a cancel or a lost lease end the wait early."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        reason = interrupt()
        if reason is not None:
            raise reason
        time.sleep(min(0.2, left))


CHUNK_BUDGET_SECONDS = 5.0  # under a rate limit, a chunk is at most this much of it
RATE_LIMIT = "max_rows_per_second"
WAL_LIMIT = "max_wal_per_second"
LAG_LIMIT = "max_replica_lag"  # the reason; the limits are in bytes or seconds:
LAG_BYTES, LAG_SECONDS = "max_replica_lag_bytes", "max_replica_lag_seconds"


def rate_limited(limits: dict[str, Any] | None) -> bool:
    """Whether `limits` pace a job by rows or WAL per second (it keeps the key plan)."""
    return bool(limits and (limits.get(RATE_LIMIT) or limits.get(WAL_LIMIT)))


Last = tuple[float, int, int]  # the previous chunk: (started, rows, WAL bytes)


def check_window(job: JobContext, limits: dict[str, Any]) -> None:
    """Raise OutsideWindow if the job's maintenance window is closed."""
    opens = window_opens(limits, job.clock())
    if opens is not None:
        raise OutsideWindow(f"its window {limits[WINDOW]} is closed", opens)


def over_limit(
    job: JobContext, limits: dict[str, Any], last: Last | None
) -> tuple[str, float] | None:
    """The limit the next chunk would break now, and how long to wait before asking again."""
    for reason, amount in ((RATE_LIMIT, 1), (WAL_LIMIT, 2)):
        rate = limits.get(reason)
        if rate and last is not None:
            due = last[0] + last[amount] / rate - time.monotonic()
            if due > 0:
                return reason, min(due, 1.0)
    lag_bytes, lag_seconds = limits.get(LAG_BYTES), limits.get(LAG_SECONDS)
    if (lag_bytes or lag_seconds) and job.request.mode == Mode.MOVE:  # copy writes no WAL
        behind, seconds = replica_lag(job.source)
        if (lag_bytes and behind > lag_bytes) or (lag_seconds and seconds > lag_seconds):
            return LAG_LIMIT, 1.0
    return None


def pace(
    job: JobContext,
    last: Last | None,
    interrupt: Interrupt,
    on_wait: Waited | None,
) -> tuple[int | None, dict[str, Any]]:
    """Wait while the next chunk would break one of the job's limits: its rate of rows or
    of WAL (the previous chunk, `last`, may not have come faster) or its replicas' lag;
    raise OutsideWindow once its maintenance window has closed. Limits are read from the
    job row again each second, so an operator's change takes effect at once. Returns the chunk size the rate allows (None: no rate limit) and the
    limits as last read."""
    waiting: tuple[str, float] | None = None  # (reason, since)
    said = False
    try:
        while True:
            limits = job.catalog.limits()
            check_window(job, limits)
            over = over_limit(job, limits, last)
            if waiting is not None and (over is None or over[0] != waiting[0]):
                if on_wait is not None:
                    on_wait(waiting[0], time.monotonic() - waiting[1])
                waiting = None
            if over is None:
                break
            if waiting is None:
                job.catalog.set_throttled(over[0])
                waiting, said = (over[0], time.monotonic()), True
            sleep(over[1], interrupt)
    finally:
        if said:  # also when a stop, a cancel or a lost lease ends the wait
            with contextlib.suppress(Exception):
                job.catalog.set_throttled(None)
    rate = limits.get(RATE_LIMIT)
    return (max(1, int(rate * CHUNK_BUDGET_SECONDS)) if rate else None), limits
