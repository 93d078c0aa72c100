"""The limits a job's row carries, as operators write them: a rate of WAL, a replica's lag,
a maintenance window. Parsed here once (CLI, policies), stored as plain values in the
job row's `limits` so SQL can read and change them, and read back by the worker."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from archiver.errors import InputError

_LAG = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|h|B|kB|MB|GB|TB)\s*")
_LAG_UNITS: dict[str, tuple[str, float]] = {
    "ms": ("max_replica_lag_seconds", 0.001),
    "s": ("max_replica_lag_seconds", 1),
    "min": ("max_replica_lag_seconds", 60),
    "h": ("max_replica_lag_seconds", 3600),
    "B": ("max_replica_lag_bytes", 1),
    "kB": ("max_replica_lag_bytes", 1024),
    "MB": ("max_replica_lag_bytes", 1024**2),
    "GB": ("max_replica_lag_bytes", 1024**3),
    "TB": ("max_replica_lag_bytes", 1024**4),
}


def size_bytes(text: str, what: str) -> int:
    """A size as PostgreSQL writes one (`128MB`, `512kB`, `1GB`), in bytes."""
    match = _LAG.fullmatch(text)
    key, unit = _LAG_UNITS[match.group(2)] if match else ("", 0.0)
    if match is None or key != "max_replica_lag_bytes" or float(match.group(1)) * unit < 1:
        raise InputError(f"{what}: {text!r} is not a size (128MB, 1GB, 512kB)")
    return int(float(match.group(1)) * unit)


def wal_rate_limit(text: str) -> dict[str, float]:
    """`16MB` (of WAL a second) as the job row's limit."""
    match = _LAG.fullmatch(text)
    key, unit = _LAG_UNITS[match.group(2)] if match else ("", 0.0)
    if match is None or key != "max_replica_lag_bytes":
        raise InputError(f"max WAL per second: {text!r} is not a size (16MB, 512kB)")
    return {"max_wal_per_second": float(match.group(1)) * unit}


def replica_lag_limit(text: str) -> dict[str, float]:
    """`30s`, `5min` (replay lag) or `64MB`, `1GB` (WAL not yet replayed, or retained by a
    slot), PostgreSQL's own units, as the job row's limit."""
    match = _LAG.fullmatch(text)
    if not match:
        raise InputError(
            f"max replica lag: {text!r} is neither a duration (30s, 5min) nor a size (64MB, 1GB)"
        )
    key, unit = _LAG_UNITS[match.group(2)]
    return {key: float(match.group(1)) * unit}


def _time_of_day(text: str) -> dt.time:
    hour, rest = text.split(":", 1)
    return dt.time.fromisoformat(f"{int(hour):02d}:{rest}")


_WINDOW = re.compile(r"\s*(\d{1,2}:\d{2}(?::\d{2})?)\s*-\s*(\d{1,2}:\d{2}(?::\d{2})?)\s*(\S+)?\s*")


@dataclass(frozen=True)
class Window:
    """A maintenance window, `01:00-05:00` local time in a zone, every day; one that
    closes before it opens spans midnight (`22:00-04:00`). Kept in the job row's limits as
    its text, so plain SQL can read and change it."""

    opens: dt.time
    closes: dt.time
    zone: ZoneInfo

    @classmethod
    def parse(cls, text: str, zone: str = "UTC") -> Window:
        """`HH:MM-HH:MM` (seconds allowed), optionally followed by a time zone that
        overrides `zone`."""
        match = _WINDOW.fullmatch(text)
        if match is None:
            raise InputError(f"window: expected 'HH:MM-HH:MM [time zone]', got {text!r}")
        try:
            opens, closes = (_time_of_day(match.group(i)) for i in (1, 2))
        except ValueError:
            raise InputError(f"window: {text!r} is not a time of day range") from None
        if opens == closes:
            raise InputError(f"window: {text!r} opens and closes at the same time")
        name = match.group(3) or zone
        try:
            return cls(opens, closes, ZoneInfo(name))
        except (ZoneInfoNotFoundError, ValueError):
            raise InputError(f"window: unknown time zone {name!r}") from None

    def __str__(self) -> str:
        def hhmm(t: dt.time) -> str:
            return t.isoformat("seconds" if t.second else "minutes")

        return f"{hhmm(self.opens)}-{hhmm(self.closes)} {self.zone.key}"

    def is_open(self, now: dt.datetime) -> bool:
        at = now.astimezone(self.zone).time()
        if self.opens < self.closes:
            return self.opens <= at < self.closes
        return at >= self.opens or at < self.closes

    def next_open(self, now: dt.datetime) -> dt.datetime:
        """`now` if the window is open, else when it opens next (in UTC)."""
        if self.is_open(now):
            return now
        local = now.astimezone(self.zone)
        day = local.date()
        for _ in range(3):  # today's opening, or tomorrow's (a DST gap may skip one)
            opening = dt.datetime.combine(day, self.opens, self.zone)
            opening = opening.astimezone(dt.UTC)  # a time in a DST gap moves on here
            if opening > now and self.is_open(opening):
                return opening
            day += dt.timedelta(days=1)
        raise AssertionError(f"window {self} never opens after {now}")  # pragma: no cover


WINDOW = "window"  # the job row's limits key


def window_opens(limits: Mapping[str, Any], now: dt.datetime) -> dt.datetime | None:
    """None if the limits have no window or it is open at `now`; else when it opens."""
    text = limits.get(WINDOW)
    if not text:
        return None
    window = Window.parse(text)
    return None if window.is_open(now) else window.next_open(now)


def limit_changes(
    rows_per_second: int | None, wal: str | None, lag: str | None, window: str | None
) -> dict[str, Any]:
    """The limits an operator gives (archiver throttle, enqueue, the console); a None
    value removes one (0 or `none` given), an argument that is None leaves it as it is."""
    limits: dict[str, Any] = {}
    if rows_per_second is not None:
        limits["max_rows_per_second"] = rows_per_second or None
    if wal is not None:
        wal = wal.strip()
        limits.update({"max_wal_per_second": None} if wal == "0" else wal_rate_limit(wal))
    if lag is not None:
        lag = lag.strip()
        limits.update(
            {"max_replica_lag_bytes": None, "max_replica_lag_seconds": None}
            if lag in ("0", "none")
            else replica_lag_limit(lag)
        )
    if window is not None:
        text = window.strip()
        limits[WINDOW] = None if text in ("0", "none") else str(Window.parse(text))
    return limits
