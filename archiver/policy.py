"""Policies: what to archive and when, as a config file's `[[policy]]` tables say it.

Pure data and time arithmetic: parsing, fire times, cutoffs. Whether a policy's table and
column exist is checked against the database by the CLI, like `archiver enqueue` does.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

from archiver.config import WRITTEN_TIERS
from archiver.errors import ConfigError, InputError
from archiver.ident import TableName, parse_column
from archiver.lifecycle.retention import Age
from archiver.limits import WINDOW, Window, replica_lag_limit, size_bytes, wal_rate_limit
from archiver.model import ArchiveRequest, Mode

Cast = Callable[[str, Any], Any]  # (key, the TOML value) -> the value, or _Bad


class _Bad(Exception):
    """A policy value's problem; parse_policy names the policy and the key."""


def _string(key: str, value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise _Bad("expected a non-empty string")
    return value


def _flag(key: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise _Bad("expected true or false")
    return value


def _whole(minimum: int | None = None) -> Cast:
    def cast(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad("expected a whole number")
        if minimum is not None and value < minimum:
            raise _Bad(f"must be at least {minimum}, got {value}")
        return value

    return cast


def _one_of(*named: str, unsaid: str = "") -> Cast:
    """One of `named` (or `unsaid`, the default, accepted but not offered)."""

    def cast(key: str, value: Any) -> Any:
        if value not in (*named, *([unsaid] if unsaid else [])):
            *first, last = named
            raise _Bad(f"expected {', '.join(first)} or {last}, got {value!r}")
        return value

    return cast


def _read(parse: Callable[[str, str], Any], expected: str = "", labelled: bool = True) -> Cast:
    """A string read by `parse` (text, key) as the CLI reads the same value; its error
    without the label `parse` puts first, if `labelled`."""

    def cast(key: str, value: Any) -> Any:
        if expected and not isinstance(value, str):
            raise _Bad(f"expected {expected}")
        try:
            return parse(_string(key, value), key)
        except InputError as exc:
            raise _Bad(str(exc).split(": ", 1)[-1] if labelled else str(exc)) from None

    return cast


def _zone(key: str, value: Any) -> ZoneInfo:
    try:
        return ZoneInfo(_string(key, value))
    except (ZoneInfoNotFoundError, ValueError):
        raise _Bad(f"unknown time zone {value!r}") from None


REQUIRED_KEYS = ("name", "table", "older_than", "schedule")
CASTS: dict[str, Cast] = {  # every key a policy may have, in the order they are read
    "name": _string,
    "table": _read(lambda text, key: TableName.parse(text), labelled=False),
    "older_than": _read(Age.parse),
    "schedule": _string,
    "column": _read(lambda text, key: parse_column(text), labelled=False),
    "timezone": _zone,
    "mode": _one_of(*Mode),
    "chunk_rows": _whole(1),
    "priority": _whole(),
    "max_attempts": _whole(1),
    "cdc_marker": _flag,
    "max_rows_per_second": _whole(1),
    "max_replica_lag": _read(
        lambda text, key: replica_lag_limit(text), "a size or duration such as '64MB' or '30s'"
    ),
    "max_wal_per_second": _read(lambda text, key: wal_rate_limit(text), "a size such as '16MB'"),
    WINDOW: _string,  # read against the policy's time zone
    "with_children": _flag,
    "partitions": _one_of("drop", "detach", "rows", unsaid="auto"),
    "delta": _flag,
    "retain": _read(Age.parse),
    "tier": _one_of(*WRITTEN_TIERS),
    "compact": _flag,
    "compact_target": _read(size_bytes),
    "compact_period": _one_of("month", "year", "none"),
}
_CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")


@dataclass(frozen=True)
class Policy:
    """One `[[policy]]`: archive `table` rows older than `older_than` at every `schedule` slot."""

    name: str
    table: TableName
    column: str
    older_than: Age
    schedule: str
    timezone: ZoneInfo
    trigger: CronTrigger
    mode: Mode
    chunk_rows: int | None
    priority: int
    max_attempts: int
    cdc_marker: bool = True
    with_children: bool = False
    delta: bool = True  # the files join the table's Delta table (false: plain Parquet)
    partitions: str = (
        "auto"  # as enqueue --partitions: drop, detach, rows; auto: drop if it applies
    )
    limits: dict[str, Any] = field(default_factory=dict)  # the job row's, see archiver throttle
    retain: Age | None = None  # each slot also queues a purge of files older than this
    tier: str = ""  # the access tier its files are written in ("": ARCHIVER_ACCESS_TIER)
    compact: bool = True  # the workers compact its table's small files
    compact_target: int | None = None  # bytes; None: ARCHIVER_COMPACT_TARGET
    compact_period: str | None = None  # month, year, none; None: ARCHIVER_COMPACT_PERIOD

    def cutoff(self, slot: dt.datetime) -> dt.datetime:
        """Slot time minus older_than, truncated to the day, in the policy's time zone."""
        local = self.older_than.before(slot.astimezone(self.timezone))
        return local.replace(hour=0, minute=0, second=0, microsecond=0)

    def request(self, slot: dt.datetime, qualified_table: str) -> ArchiveRequest:
        cutoff = self.cutoff(slot).isoformat()
        return ArchiveRequest(
            qualified_table,
            self.column,
            cutoff,
            self.mode,
            self.chunk_rows,
            cdc_marker=self.cdc_marker,
            with_children=self.with_children,
            partitions=self.partitions,
            delta=self.delta,
            tier=self.tier,
        )

    def fire_times(self, after: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
        """Every slot in (after, until], oldest first."""
        slots = []
        at = self.trigger.get_next_fire_time(None, after + dt.timedelta(microseconds=1))
        while at is not None and at <= until:
            slots.append(at)
            at = self.trigger.get_next_fire_time(None, at + dt.timedelta(microseconds=1))
        return slots

    def next_fire_times(self, now: dt.datetime, count: int) -> list[dt.datetime]:
        times: list[dt.datetime] = []
        at = self.trigger.get_next_fire_time(None, now)
        while at is not None and len(times) < count:
            times.append(at)
            at = self.trigger.get_next_fire_time(None, at + dt.timedelta(microseconds=1))
        return times


def parse_policies(tables: Sequence[dict[str, Any]]) -> list[Policy]:
    """Every policy of a config file, validated; an error names the policy and the key."""
    policies: list[Policy] = []
    for number, raw in enumerate(tables, 1):
        policy = parse_policy(raw, number)
        if any(p.name == policy.name for p in policies):
            raise ConfigError(f"policy {policy.name!r}: name: duplicate policy name")
        policies.append(policy)
    return policies


def parse_policy(raw: dict[str, Any], number: int) -> Policy:
    name = raw.get("name")
    label = f"policy {name!r}" if isinstance(name, str) and name.strip() else f"policy #{number}"

    def fail(key: str, problem: str) -> ConfigError:
        return ConfigError(f"{label}: {key}: {problem}")

    for key in raw:
        if key not in CASTS:
            raise fail(key, f"unknown key (known: {', '.join(CASTS)})")
    for key in REQUIRED_KEYS:
        if key not in raw:
            raise fail(key, "missing")
    value: dict[str, Any] = {}
    for key, cast in CASTS.items():
        try:
            if key in raw:
                value[key] = cast(key, raw[key])
        except _Bad as exc:
            raise fail(key, str(exc)) from None
    timezone = value.get("timezone", ZoneInfo("UTC"))
    limits: dict[str, Any] = {
        **value.get("max_replica_lag", {}),
        **value.get("max_wal_per_second", {}),
    }
    if "max_rows_per_second" in value:
        limits["max_rows_per_second"] = value["max_rows_per_second"]
    if WINDOW in value:  # in the policy's time zone unless it names one
        try:
            limits[WINDOW] = str(Window.parse(value[WINDOW], timezone.key))
        except InputError as exc:
            raise fail(WINDOW, str(exc).split(": ", 1)[-1]) from None
    older_than, retain = value["older_than"], value.get("retain")
    now = dt.datetime.now(dt.UTC)
    if retain is not None and retain.before(now) >= older_than.before(now):
        raise fail(
            "retain",
            f"{retain} is not longer than older_than ({older_than}): each slot "
            "would purge what it just archived",
        )
    return Policy(
        name=value["name"].strip(),
        table=value["table"],
        column=value.get("column", "created_at"),
        older_than=older_than,
        schedule=value["schedule"],
        timezone=timezone,
        trigger=cron_trigger(value["schedule"], timezone, label),
        mode=Mode(value.get("mode", Mode.MOVE)),
        chunk_rows=value.get("chunk_rows"),
        cdc_marker=value.get("cdc_marker", True),
        with_children=value.get("with_children", False),
        delta=value.get("delta", True),
        partitions=value.get("partitions", "auto"),
        limits=limits,
        priority=value.get("priority", 0),
        max_attempts=value.get("max_attempts", 5),
        retain=retain,
        tier=value.get("tier", ""),
        compact=value.get("compact", True),
        compact_target=value.get("compact_target"),
        compact_period=value.get("compact_period"),
    )


def cron_trigger(expr: str, timezone: ZoneInfo, label: str = "schedule") -> CronTrigger:
    """A crontab expression (5 fields; 6 with seconds first) as a CronTrigger.

    APScheduler 3.x numbers weekdays from Monday = 0, crontab from Sunday = 0; rather than
    silently shifting every weekday, numbered weekdays are refused: write mon..sun.
    """
    values = expr.split()
    if len(values) not in (5, 6):
        raise ConfigError(
            f"{label}: schedule: expected 5 cron fields (6 with seconds first), got {expr!r}"
        )
    names = ("second", *_CRON_FIELDS) if len(values) == 6 else _CRON_FIELDS
    fields = dict(zip(names, values, strict=True))
    if re.search(r"(^|[,\-])\d", fields["day_of_week"]):
        raise ConfigError(
            f"{label}: schedule: weekday numbers are ambiguous in {expr!r} "
            "(APScheduler counts from Monday, cron from Sunday); use names: mon-fri, sun"
        )
    try:
        return CronTrigger(timezone=timezone, **fields)
    except ValueError as exc:
        raise ConfigError(f"{label}: schedule: {expr!r}: {exc}") from None
