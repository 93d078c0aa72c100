"""What an operator does to a job or a table -- cancel, retry, pause, resume, throttle --
the same from the CLI and from the console: the queue's change and its archiver_audit row,
in the caller's transaction, and what happened in words."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from archiver.errors import InputError, JobStateError
from archiver.model import Status
from archiver.store import audit, jobs

JOB_ACTIONS = ("cancel", "retry", "pause", "resume", "throttle")
TABLE_ACTIONS = ("pause", "resume")
BULK_ACTIONS = ("retry", "cancel", "pause", "resume")  # a throttle's limits are per job


@dataclass(frozen=True)
class Actor:
    """Who acts: the console's person and client address; the CLI's user@host when
    `who` is None (store.audit)."""

    who: str | None = None
    address: str | None = None


CLI = Actor()


async def on_job(
    conn: asyncpg.Connection,
    job_id: uuid.UUID,
    action: str,
    actor: Actor,
    limits: dict[str, Any] | None = None,
) -> str:
    """One of JOB_ACTIONS on a job, audited; what happened. `limits`: a throttle's
    changes (limits.limit_changes; a None value removes one)."""
    said = await _change(conn, job_id, action, limits)
    await _audit(conn, actor, action, f"job {job_id}", said)
    return said


async def on_jobs(
    conn: asyncpg.Connection, ids: list[uuid.UUID], action: str, actor: Actor, described: str
) -> str:
    """One action on many jobs (those a filter `described` matched), audited as one; a
    job in a state the action does not apply to is skipped. Each job's change commits on
    its own (`conn` outside a transaction), then the one audit row. What happened."""
    if action not in BULK_ACTIONS:
        raise InputError(f"action: {action[:40]!r}, expected one of {', '.join(BULK_ACTIONS)}")
    changed = 0
    for job_id in ids:  # a transaction each: a bulk action holds no job's row for long
        try:
            async with conn.transaction():
                await _change(conn, job_id, action, None)
            changed += 1
        except (InputError, JobStateError):
            continue
    said = f"{changed} of {len(ids)} jobs"
    await _audit(conn, actor, f"bulk {action}", described, said)
    return said


async def _change(
    conn: asyncpg.Connection, job_id: uuid.UUID, action: str, limits: dict[str, Any] | None
) -> str:
    if action not in JOB_ACTIONS:
        raise InputError(f"action: {action[:40]!r}, expected one of {', '.join(JOB_ACTIONS)}")
    if action == "cancel":
        status = await jobs.cancel(conn, job_id)
        return "cancelled" if status == Status.CANCELLED else "will stop at its next chunk boundary"
    if action == "retry":
        await jobs.retry(conn, job_id)
        return "queued again"
    if action == "pause":
        status = await jobs.pause_job(conn, job_id)
        return "paused" + (
            ": it stops at its next chunk boundary" if status == Status.RUNNING else ""
        )
    if action == "resume":
        await jobs.resume_job(conn, job_id)
        return "resumed"
    if not limits:
        raise InputError(
            "throttle: give --max-rows-per-second N, --max-wal-per-second SIZE, "
            "--max-replica-lag LIMIT or --window HH:MM-HH:MM (0 or none removes one)"
        )
    now = await jobs.set_limits(conn, job_id, limits)
    return f"limits: {json.dumps(now, sort_keys=True) if now else 'none'}"


async def on_table(conn: asyncpg.Connection, table: str, action: str, actor: Actor) -> str:
    """Pause or resume every job of `table` (schema.table, resolved by the caller),
    audited; what happened."""
    if action not in TABLE_ACTIONS:
        raise InputError(f"action: {action[:40]!r}, expected pause or resume")
    if action == "pause":
        said = "paused" if await jobs.pause_table(conn, table) else "was already paused"
    else:
        said = "resumed" if await jobs.resume_table(conn, table) else "was not paused"
    await _audit(conn, actor, action, f"table {table}", said)
    return said


async def _audit(
    conn: asyncpg.Connection, actor: Actor, action: str, target: str, said: str
) -> None:
    await audit.record(conn, action, target, said, who=actor.who, address=actor.address)
