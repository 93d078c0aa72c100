"""What each console page shows, read through archiver.store and the named queries the CLI
uses (archiver/store/*.sql), and what each action does, through the CLI's own calls."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import asyncpg

from archiver.config import ConfigFile
from archiver.errors import InputError, JobStateError
from archiver.ident import TableName, as_typed
from archiver.kinds import registry
from archiver.limits import limit_changes
from archiver.model import Status
from archiver.operations import actions
from archiver.source.tables import FIND_TABLE
from archiver.store import archive_files, audit, jobs, read_audit, read_models
from archiver.store.queue import PgQueue

STATUSES = tuple(str(s) for s in Status)


def task_names() -> tuple[str, ...]:
    """Every job kind's name, as archiver.kinds.registry registers them (the filter's choices)."""
    return tuple(registry.KINDS)


PAGE = 50


def ago(value: dt.datetime | None, now: dt.datetime | None = None) -> str:
    if value is None:
        return "-"
    seconds = ((now or dt.datetime.now(dt.UTC)) - value).total_seconds()
    return seconds_text(seconds) + " ago" if seconds >= 0 else "in " + seconds_text(-seconds)


def seconds_text(seconds: float | dt.timedelta | None) -> str:
    if seconds is None:
        return "-"
    if isinstance(seconds, dt.timedelta):
        seconds = seconds.total_seconds()
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _time(name: str, raw: str) -> dt.datetime | None:
    if not raw:
        return None
    try:
        value = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise InputError(f"{name}: {raw[:40]!r} is not a date or time (ISO 8601)") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True)
class JobFilter:
    """The jobs list's filters and page: each checked, so a bad one is one 400 line."""

    status: str | None = None
    table: str | None = None
    task: str | None = None
    error: str | None = None
    created_from: dt.datetime | None = None
    created_to: dt.datetime | None = None
    after: tuple[dt.datetime, uuid.UUID] | None = None  # the previous page's last row
    limit: int = PAGE

    @classmethod
    def parse(cls, params: Mapping[str, Any], limit: int = PAGE) -> JobFilter:
        def get(name: str) -> str:
            return str(params.get(name) or "").strip()

        status, task = get("status") or None, get("task") or None
        if status is not None and status not in STATUSES:
            raise InputError(f"status: {status[:40]!r}, expected one of {', '.join(STATUSES)}")
        if task is not None and task not in (names := task_names()):
            raise InputError(f"task: {task[:40]!r}, expected one of {', '.join(names)}")
        table, error = get("table") or None, get("error") or None
        for name, value in (("table", table), ("error", error)):
            if value is not None and len(value) > 200:
                raise InputError(f"{name}: longer than 200 characters")
        after = None
        if raw := get("after"):
            at, _, job_id = raw.partition("~")
            try:
                after = (dt.datetime.fromisoformat(at), uuid.UUID(job_id))
            except ValueError:
                raise InputError(f"after: {raw[:60]!r} is not a page cursor") from None
        return cls(
            status, table, task, error, _time("from", get("from")), _time("to", get("to")),
            after, limit,
        )  # fmt: skip

    def query(self, *, after: str | None = None) -> str:
        """The filters as a query string (a page's link, a bulk action's return)."""
        pairs = {
            "status": self.status,
            "table": self.table,
            "task": self.task,
            "error": self.error,
            "from": self.created_from.isoformat() if self.created_from else None,
            "to": self.created_to.isoformat() if self.created_to else None,
            "after": after,
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    def describe(self) -> str:
        said = [f"{k}={v}" for k, v in dataclasses.asdict(self).items()
                if v and k not in ("after", "limit")]  # fmt: skip
        return ", ".join(said) or "every job"


def cursor_of(row: Mapping[str, Any]) -> str:
    return f"{row['created_at'].isoformat()}~{row['id']}"


async def job_page(conn: asyncpg.Connection, f: JobFilter) -> list[dict[str, Any]]:
    """A page of jobs, newest first, one more than the page to tell there is a next."""
    return await read_models.list_jobs(
        conn, f.status, f.table, f.limit + 1, task=f.task, error=f.error,
        created_from=f.created_from, created_to=f.created_to, after=f.after,
    )  # fmt: skip


async def overview(conn: asyncpg.Connection, config: ConfigFile | None) -> dict[str, Any]:
    read = await read_models.overview(conn)
    queued = [r for r in read["by_table"] if r["status"] == Status.QUEUED]
    ages = [r["oldest_queued_age"] for r in queued if r["oldest_queued_age"] is not None]
    return {
        "by_table": read["by_table"],
        "statuses": STATUSES,
        "queue_depth": sum(r["jobs"] for r in queued),
        "oldest_queued": max(ages) if ages else None,
        "running": read["running"],
        "failures": read["failures"],
        "paused": read["paused"],
        "policies": next_fires(config),
        "rows_chart": bars(read["rows_per_hour"], "rows"),
        "wait_chart": bars(read["waits"], "seconds"),
    }


def bars(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The last 24 hours, one bar per hour (empty hours too), heights in percent."""
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    by_hour = {r["hour"]: float(r[key] or 0) for r in rows}
    hours = [now - dt.timedelta(hours=23 - i) for i in range(24)]
    top = max(by_hour.values(), default=0.0) or 1.0
    return [
        {"hour": h, "value": by_hour.get(h, 0.0), "pct": 100.0 * by_hour.get(h, 0.0) / top}
        for h in hours
    ]


def next_fires(config: ConfigFile | None, count: int = 1) -> list[dict[str, Any]]:
    """Each policy of the config file with its next fire time and cutoff."""
    from archiver.policy import parse_policies

    if config is None:
        return []
    now = dt.datetime.now(dt.UTC)
    out = []
    for policy in parse_policies(config.policies):
        for at in policy.next_fire_times(now, count):
            out.append({"name": policy.name, "table": policy.table, "at": at,
                        "cutoff": policy.cutoff(at), "mode": policy.mode})  # fmt: skip
    return sorted(out, key=lambda p: p["at"])


async def job(conn: asyncpg.Connection, job_id: uuid.UUID) -> dict[str, Any]:
    found = await jobs.get_job(conn, job_id)
    files = await archive_files.job_files(conn, job_id)
    group = found.payload.get("group")
    members = await read_models.job_group(conn, group) if group else []
    table = found.payload.get("table", "")
    delta, archived = None, False
    if table:
        delta = await read_models.delta_table(conn, table)  # a job's table: as recorded
        archived = await read_models.table_summary(conn, table) is not None
    return {
        "job": found,
        "payload": json.dumps(found.payload, indent=2, sort_keys=True, default=str),
        "limits": json.dumps(found.limits, sort_keys=True) if found.limits else "",
        "files": files,
        "group": members,
        "delta": delta,
        "table": table,
        "archived": archived,  # the table has an archive page
        "audit": await audit.of_target(conn, f"job {job_id}"),
    }


async def archive(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    return await read_models.archive_summary(conn)


async def table(
    conn: asyncpg.Connection, name: str, config: ConfigFile | None
) -> dict[str, Any] | None:
    qualified = await resolve_table(conn, name)
    if qualified is None:
        return None
    summary = await read_models.table_summary(conn, qualified)
    if summary is None:
        return None
    return {
        "name": qualified,
        "typed": as_typed(qualified),  # as the CLI takes it
        "summary": summary,
        **await read_models.table_details(conn, qualified),
        "policies": [
            p
            for p in next_fires(config)
            if p["table"].name == TableName.stored(qualified).name  # the name first: no query
            and await resolve_table(conn, p["table"].sql) == qualified
        ],
        "audit": await audit.of_target(conn, f"table {qualified}"),
    }


async def resolve_table(conn: asyncpg.Connection, name: str) -> str | None:
    """A table the console was given (an address, a policy's table), in PostgreSQL's
    syntax, as archiver records it: schema.table when the schema is named; a bare name
    as the catalog holds it when one schema's table has it, else as the console's
    database resolves it (its search_path: the source's, where the catalog is in the
    source database, as it is by default); None when neither knows it. The CLI's
    resolution, on the catalog."""
    table = TableName.parse(name)
    if table.schema is not None:
        return str(table)
    named = await archive_files.catalogued_tables(conn, name)
    if len(named) == 1:
        return named[0]
    found = await conn.fetch(FIND_TABLE, "", table.name)  # as the CLI's find_table
    if not found and named:
        raise InputError(f"table {table.sql} is ambiguous ({', '.join(named)}): name the schema")
    return f"{found[0][0]}.{table.name}" if found else None


async def act_on_job(
    conn: asyncpg.Connection,
    job_id: uuid.UUID,
    action: str,
    form: Mapping[str, Any],
    actor: actions.Actor,
) -> str:
    """One job's action (operations.actions, as the CLI's command), a throttle's limits
    read from the form; what happened, in words."""

    def field(name: str) -> str | None:
        value = str(form.get(name) or "").strip()
        return value or None

    limits = None
    if action == "throttle":
        rows = field("max_rows_per_second")
        if rows is not None and not re.fullmatch(r"[0-9]{1,12}", rows):
            raise InputError(f"max_rows_per_second: {rows[:20]!r} is not a whole number")
        limits = limit_changes(
            int(rows) if rows is not None else None,
            field("max_wal_per_second"),
            field("max_replica_lag"),
            field("window"),
        )
    try:
        return await actions.on_job(PgQueue(conn), job_id, action, actor, limits)
    except JobStateError as exc:
        raise InputError(str(exc)) from None


async def act_on_table(
    conn: asyncpg.Connection, name: str, action: str, actor: actions.Actor
) -> tuple[str, str]:
    """(what happened, the table's qualified name)."""
    if action not in actions.TABLE_ACTIONS:
        raise InputError(f"action: {action[:40]!r}, expected pause or resume")
    table = await resolve_table(conn, name)
    if table is None:
        raise InputError(f"table {name[:80]!r} not found")
    return await actions.on_table(PgQueue(conn), table, action, actor), table


async def reads(
    conn: asyncpg.Connection, role: str | None, table: str | None
) -> list[dict[str, Any]]:
    """The reads page: the latest reads through serve, refusals first, of `role` and of
    `table` (as a user writes it) where given."""
    name = TableName.parse(table) if table else None
    named = f"{name.schema or 'public'}.{name.name}" if name is not None else None
    return await read_audit.recent(conn, role, named)
