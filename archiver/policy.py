"""Policies: what to archive and when, as a config file's `[[policy]]` tables say it.

Pure data and time arithmetic: parsing, fire times, cutoffs. Whether a policy's table and
column exist is checked against the database by the CLI, like `archiver enqueue` does.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
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

REQUIRED_KEYS = ("name", "table", "older_than", "schedule")
OPTIONAL_KEYS = (
    "column",
    "timezone",
    "mode",
    "chunk_rows",
    "priority",
    "max_attempts",
    "cdc_marker",
    "max_rows_per_second",
    "max_replica_lag",
    "max_wal_per_second",
    "window",
    "with_children",
    "partitions",
    "delta",
    "retain",
    "tier",
    "compact",
    "compact_target",
    "compact_period",
)
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
        if key not in REQUIRED_KEYS + OPTIONAL_KEYS:
            raise fail(key, f"unknown key (known: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})")
    for key in REQUIRED_KEYS:
        if key not in raw:
            raise fail(key, "missing")
    for key in (
        "name", "table", "older_than", "schedule", "column", "timezone", "mode", WINDOW,
        "retain", "tier", "compact_target", "compact_period",
    ):  # fmt: skip
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise fail(key, "expected a non-empty string")
    for key in ("cdc_marker", "with_children", "delta", "compact"):
        if key in raw and not isinstance(raw[key], bool):
            raise fail(key, "expected true or false")
    for key in ("chunk_rows", "priority", "max_attempts", "max_rows_per_second"):
        if key in raw and (isinstance(raw[key], bool) or not isinstance(raw[key], int)):
            raise fail(key, "expected a whole number")

    try:
        table = TableName.parse(raw["table"])
    except InputError as exc:
        raise fail("table", str(exc)) from None
    try:
        column = parse_column(raw.get("column", "created_at"))
    except InputError as exc:
        raise fail("column", str(exc)) from None
    try:
        older_than = Age.parse(raw["older_than"], "older_than")
    except InputError as exc:
        raise fail("older_than", str(exc).split(": ", 1)[1]) from None
    try:
        timezone = ZoneInfo(raw.get("timezone", "UTC"))
    except (ZoneInfoNotFoundError, ValueError):
        raise fail("timezone", f"unknown time zone {raw['timezone']!r}") from None
    if raw.get("partitions", "auto") not in ("auto", "drop", "detach", "rows"):
        raise fail("partitions", f"expected drop, detach or rows, got {raw['partitions']!r}")
    mode = raw.get("mode", Mode.MOVE)
    if mode not in tuple(Mode):
        raise fail("mode", f"expected move or copy, got {mode!r}")
    limits: dict[str, Any] = {}
    for key, parse, expected in (
        ("max_replica_lag", replica_lag_limit, "a size or duration such as '64MB' or '30s'"),
        ("max_wal_per_second", wal_rate_limit, "a size such as '16MB'"),
    ):
        if key not in raw:
            continue
        if not isinstance(raw[key], str):
            raise fail(key, f"expected {expected}")
        try:
            limits.update(parse(raw[key]))
        except InputError as exc:
            raise fail(key, str(exc).split(": ", 1)[1]) from None
    if "max_rows_per_second" in raw:
        limits["max_rows_per_second"] = raw["max_rows_per_second"]
    if WINDOW in raw:  # in the policy's time zone unless it names one
        try:
            limits[WINDOW] = str(Window.parse(raw[WINDOW], timezone.key))
        except InputError as exc:
            raise fail(WINDOW, str(exc).split(": ", 1)[1]) from None
    retain = None
    if "retain" in raw:
        try:
            retain = Age.parse(raw["retain"], "retain")
        except InputError as exc:
            raise fail("retain", str(exc).split(": ", 1)[1]) from None
        now = dt.datetime.now(dt.UTC)
        if retain.before(now) >= older_than.before(now):
            raise fail(
                "retain",
                f"{retain} is not longer than older_than ({older_than}): each slot "
                "would purge what it just archived",
            )
    compact_target = None
    if "compact_target" in raw:
        try:
            compact_target = size_bytes(raw["compact_target"], "compact_target")
        except InputError as exc:
            raise fail("compact_target", str(exc).split(": ", 1)[1]) from None
    if raw.get("compact_period", "month") not in ("month", "year", "none"):
        raise fail("compact_period", f"expected month, year or none, got {raw['compact_period']!r}")
    if raw.get("tier", WRITTEN_TIERS[0]) not in WRITTEN_TIERS:
        *first, last = WRITTEN_TIERS
        raise fail("tier", f"expected {', '.join(first)} or {last}, got {raw['tier']!r}")
    for key, minimum in (("chunk_rows", 1), ("max_attempts", 1), ("max_rows_per_second", 1)):
        if key in raw and raw[key] < minimum:
            raise fail(key, f"must be at least {minimum}, got {raw[key]}")
    return Policy(
        name=raw["name"].strip(),
        table=table,
        column=column,
        older_than=older_than,
        schedule=raw["schedule"],
        timezone=timezone,
        trigger=cron_trigger(raw["schedule"], timezone, label),
        mode=Mode(mode),
        chunk_rows=raw.get("chunk_rows"),
        cdc_marker=raw.get("cdc_marker", True),
        with_children=raw.get("with_children", False),
        delta=raw.get("delta", True),
        partitions=raw.get("partitions", "auto"),
        limits=limits,
        priority=raw.get("priority", 0),
        max_attempts=raw.get("max_attempts", 5),
        retain=retain,
        tier=raw.get("tier", ""),
        compact=raw.get("compact", True),
        compact_target=compact_target,
        compact_period=raw.get("compact_period"),
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
