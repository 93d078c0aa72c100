"""What an operator does to a job or a table -- cancel, retry, pause, resume, throttle --
the same from the CLI and from the console: the queue's change and its audit row, through
the Queue (store.queue: `PgQueue` over the caller's connection, in its transaction; the
in-memory queue in the unit tests), and what happened in words."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from archiver.errors import InputError, JobStateError
from archiver.model import Status
from archiver.store.queue import Queue

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
    queue: Queue,
    job_id: uuid.UUID,
    action: str,
    actor: Actor,
    limits: dict[str, Any] | None = None,
) -> str:
    """One of JOB_ACTIONS on a job, audited; what happened. `limits`: a throttle's
    changes (limits.limit_changes; a None value removes one)."""
    said = await _change(queue, job_id, action, limits)
    await _audit(queue, actor, action, f"job {job_id}", said)
    return said


async def on_jobs(
    queue: Queue, ids: list[uuid.UUID], action: str, actor: Actor, described: str
) -> str:
    """One action on many jobs (those a filter `described` matched), audited as one; a
    job in a state the action does not apply to is skipped. Each job's change commits on
    its own (a queue outside a transaction: each change is one statement), then the one
    audit row: a bulk action holds no job's row for long. What happened."""
    if action not in BULK_ACTIONS:
        raise InputError(f"action: {action[:40]!r}, expected one of {', '.join(BULK_ACTIONS)}")
    changed = 0
    for job_id in ids:
        try:
            await _change(queue, job_id, action, None)
            changed += 1
        except (InputError, JobStateError):
            continue
    said = f"{changed} of {len(ids)} jobs"
    await _audit(queue, actor, f"bulk {action}", described, said)
    return said


async def _change(
    queue: Queue, job_id: uuid.UUID, action: str, limits: dict[str, Any] | None
) -> str:
    if action not in JOB_ACTIONS:
        raise InputError(f"action: {action[:40]!r}, expected one of {', '.join(JOB_ACTIONS)}")
    if action == "cancel":
        status = await queue.cancel(job_id)
        return "cancelled" if status == Status.CANCELLED else "will stop at its next chunk boundary"
    if action == "retry":
        await queue.retry(job_id)
        return "queued again"
    if action == "pause":
        status = await queue.pause_job(job_id)
        return "paused" + (
            ": it stops at its next chunk boundary" if status == Status.RUNNING else ""
        )
    if action == "resume":
        await queue.resume_job(job_id)
        return "resumed"
    if not limits:
        raise InputError(
            "throttle: give --max-rows-per-second N, --max-wal-per-second SIZE, "
            "--max-replica-lag LIMIT or --window HH:MM-HH:MM (0 or none removes one)"
        )
    now = await queue.set_limits(job_id, limits)
    return f"limits: {json.dumps(now, sort_keys=True) if now else 'none'}"


async def on_table(queue: Queue, table: str, action: str, actor: Actor) -> str:
    """Pause or resume every job of `table` (schema.table, resolved by the caller),
    audited; what happened."""
    if action not in TABLE_ACTIONS:
        raise InputError(f"action: {action[:40]!r}, expected pause or resume")
    if action == "pause":
        said = "paused" if await queue.pause_table(table) else "was already paused"
    else:
        said = "resumed" if await queue.resume_table(table) else "was not paused"
    await _audit(queue, actor, action, f"table {table}", said)
    return said


async def _audit(queue: Queue, actor: Actor, action: str, target: str, said: str) -> None:
    await queue.record_action(action, target, said, actor.who, actor.address)
