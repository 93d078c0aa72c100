"""How long archived rows are kept: an age (`7 years`, `18 months`, `90d`), the limit it
sets today, and which files it lets go. Pure: no database, no storage."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from archiver.errors import InputError
from archiver.model import CatalogFile

_AGE = re.compile(r"\s*(\d+)\s*(y|years?|mo|months?|w|weeks?|d|days?)\s*", re.IGNORECASE)
_UNITS = {"y": "years", "m": "months", "w": "weeks", "d": "days"}  # by first letter


@dataclass(frozen=True)
class Age:
    """A retention period in calendar units: 7 years from 2024-02-29 is 2017-02-28."""

    count: int
    unit: str  # years, months, weeks, days

    @classmethod
    def parse(cls, text: str, what: str = "--older-than") -> Age:
        match = _AGE.fullmatch(text)
        if not match or int(match.group(1)) < 1:
            raise InputError(
                f"{what}: expected a period such as '7 years', '18 months', '90 days' or "
                f"'7y', got {text!r}"
            )
        return cls(int(match.group(1)), _UNITS[match.group(2)[0].lower()])

    def before(self, now: dt.datetime) -> dt.datetime:
        """The limit: `now` minus this age, in calendar terms, in now's time zone."""
        if self.unit in ("days", "weeks"):
            return now - dt.timedelta(**{self.unit: self.count})
        months = self.count * (12 if self.unit == "years" else 1)
        year, month = divmod(now.year * 12 + now.month - 1 - months, 12)
        month += 1
        last_day = (dt.date(year + month // 12, month % 12 + 1, 1) - dt.timedelta(days=1)).day
        return now.replace(year=year, month=month, day=min(now.day, last_day))

    def __str__(self) -> str:
        return f"{self.count} {self.unit if self.count != 1 else self.unit[:-1]}"


@dataclass(frozen=True)
class Expired:
    """What a limit lets go of one table's files: those whose cutoff range lies wholly
    before it, and those that span it (kept until their newest row is past it)."""

    going: list[CatalogFile]
    spanning: list[CatalogFile]

    @property
    def kept_until(self) -> str | None:
        """The newest row of the spanning files: when the last of them can go (plus the
        age)."""
        ends = [f.max_cutoff_value for f in self.spanning if f.max_cutoff_value]
        return max(ends) if ends else None


def expired(files: list[CatalogFile], before: dt.datetime) -> Expired:
    """`files` (committed, one table's, with a cutoff column) split by the limit. An
    unbounded end (-infinity / infinity as archived) never lies wholly before it."""
    going, spanning = [], []
    for f in files:
        low = _when(f.min_cutoff_value)
        high = _when(f.max_cutoff_value)
        if high is not None and high < before:
            going.append(f)
        elif low is None or low < before:
            spanning.append(f)
    return Expired(going, spanning)


def _when(text: str | None) -> dt.datetime | None:
    """A catalogued cutoff bound; None for an unbounded one, and for one Python cannot
    hold (a year BC, past 9999): such a file is never wholly before a limit."""
    if text is None:
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def protected(files: list[CatalogFile], now: dt.datetime) -> str | None:
    """One line naming why some of `files` may not be deleted yet (an immutability
    policy until its latest date, a legal hold), or None."""
    held = [f for f in files if f.legal_hold]
    until = [f.immutable_until for f in files if f.immutable_until and f.immutable_until > now]
    parts = []
    if until:
        parts.append(f"{len(until)} under an immutability policy until {max(until).isoformat()}")
    if held:
        parts.append(f"{len(held)} under a legal hold")
    return " and ".join(parts) or None
