"""background_jobs, the queue (and what gates it: archiver_paused_tables, the per-table
job counts, archiver_maintenance): the only code that writes them. Every statement is
named in store/jobs.sql. The event loop's side (enqueue, claim, heartbeat, finish, the
operator's views) uses asyncpg; a job's thread checkpoints its progress on its
synchronous ADBC connection, in the transaction of the chunk it commits."""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from archiver.bulk import BulkConnection, fetch_and_rollback, run_in_transaction
from archiver.db import query
from archiver.errors import JobStateError
from archiver.limits import WINDOW, window_opens
from archiver.model import ArchiveRequest, Job, Queued, Queueing, Status


async def enqueue(
    conn: asyncpg.Connection | asyncpg.Pool, task_name: str, payload: dict[str, Any], how: Queueing
) -> tuple[uuid.UUID, bool]:
    """Queue a job; (id, True) if new, or (id of the queued/running twin, False)."""
    while True:
        job_id = await conn.fetchval(
            query("enqueue"),
            task_name,
            json.dumps(payload),
            how.priority,
            how.max_attempts,
            how.dedup_key,
            how.lock_key,
            how.run_at,
            json.dumps(how.limits) if how.limits else None,
        )
        if job_id is not None:
            return job_id, True
        twin = await conn.fetchrow(query("find_duplicate"), how.dedup_key)
        if twin is not None:  # else it finished in between: try again
            return twin["id"], False


async def enqueue_request(
    conn: asyncpg.Connection | asyncpg.Pool, request: Queued[Any]
) -> tuple[uuid.UUID, bool]:
    """Queue `request` as a job of its kind, as it says it is queued."""
    return await enqueue(conn, request.KIND, request.payload(), request.queueing())


Part = tuple[ArchiveRequest, tuple[str, str]]  # a job to queue, with its dedup and lock keys


async def enqueue_parts(
    conn: asyncpg.Connection,
    parts: list[Part],
    *,
    priority: int,
    max_attempts: int,
    limits: dict[str, Any] | None,
    run_at: dt.datetime | None,
) -> list[tuple[uuid.UUID, bool]]:
    """Queue archive jobs with the same settings, in the caller's transaction: (id, True)
    for each new one, (id of its queued or running twin, False) otherwise."""
    return [
        await enqueue(
            conn,
            ArchiveRequest.KIND,
            part.payload(),
            Queueing(dedup_key, lock_key, priority, max_attempts, run_at, limits),
        )
        for part, (dedup_key, lock_key) in parts
    ]


async def enqueue_slot(
    pool: asyncpg.Pool,
    parts: list[Part],
    *,
    policy: str,
    slot: dt.datetime,
    priority: int = 0,
    max_attempts: int = 5,
    limits: dict[str, Any] | None = None,
    run_at: dt.datetime | None = None,
) -> tuple[uuid.UUID, bool]:
    """Queue a policy's slot -- its jobs, all or none (several: one per old partition)
    -- unless the database has it: (id of the first job, True) if new, else the id of the
    job any scheduler enqueued for this slot before, and False.

    The first job carries the (policy, slot) key, kept for as long as its row lives,
    whatever its status; two slots' jobs on one table still never run at once (lock_key).
    """
    while True:
        async with pool.acquire() as conn, conn.transaction():
            first, (_, lock_key) = parts[0]
            job_id = await conn.fetchval(
                query("enqueue_policy_slot"),
                ArchiveRequest.KIND,
                json.dumps(first.payload()),
                priority,
                max_attempts,
                lock_key,
                policy,
                slot,
                json.dumps(limits or {}),
                run_at,
            )
            if job_id is not None:
                await enqueue_parts(
                    conn,
                    parts[1:],
                    priority=priority,
                    max_attempts=max_attempts,
                    limits=limits,
                    run_at=run_at,
                )
                return job_id, True
        twin = await pool.fetchval(query("policy_slot_job"), policy, slot)
        if twin is not None:  # else pruned in between: try again
            return twin, False


async def last_policy_slot(
    conn: asyncpg.Connection | asyncpg.Pool, policy: str
) -> dt.datetime | None:
    """The newest slot of `policy` still on record (finished jobs are pruned eventually)."""
    value: dt.datetime | None = await conn.fetchval(query("last_policy_slot"), policy)
    return value


async def claim_jobs(pool: asyncpg.Pool, worker: str, limit: int) -> list[Job]:
    """Take up to `limit` runnable jobs for `worker` in one round trip (at most one per
    lock_key), most urgent first."""
    for _ in range(3):
        try:
            rows = await pool.fetch(query("claim_jobs"), worker, limit)
        except asyncpg.UniqueViolationError:
            continue  # another worker took a job on the same table first
        jobs = [Job.from_row(r) for r in rows]
        return sorted(jobs, key=lambda j: (-j.priority, j.run_at, j.created_at))
    return []


async def complete_many(pool: asyncpg.Pool, job_ids: list[uuid.UUID], worker: str) -> int:
    """Complete several of `worker`'s running jobs at once; how many were still its own."""
    return len(await pool.fetch(query("complete_many"), job_ids, worker))


async def seconds_to_next_run(pool: asyncpg.Pool) -> float | None:
    """Seconds until the earliest queued job may run; None when nothing is queued."""
    value = await pool.fetchval(query("seconds_to_next_run"))
    return None if value is None else float(value)


@dataclass(frozen=True)
class Lease:
    """What renewing a lease learns: whether an operator asked the job to stop."""

    cancel_requested: bool
    paused: bool


async def heartbeat(pool: asyncpg.Pool, job_id: uuid.UUID, worker: str) -> Lease | None:
    """Renew the lease; None when the job is no longer this worker's."""
    row = await pool.fetchrow(query("heartbeat"), job_id, worker)
    return None if row is None else Lease(row["cancel_requested"], row["paused"])


async def complete(
    pool: asyncpg.Pool, job_id: uuid.UUID, worker: str, progress: dict[str, Any]
) -> bool:
    return await pool.fetchval(query("complete"), job_id, worker, json.dumps(progress)) is not None


def backoff_seconds(attempt: int, base: float = 5.0, cap: float = 600.0) -> float:
    """Exponential backoff with full jitter, capped."""
    return random.uniform(0, min(cap, base * 2 ** max(attempt - 1, 0)))


async def fail_attempt(
    pool: asyncpg.Pool, job: Job, worker: str, error: str, base: float = 5.0, cap: float = 600.0
) -> Status | None:
    """Record a failed attempt: requeued after a backoff (base x 2^(attempt-1) seconds,
    full jitter, capped), or failed for good after max_attempts."""
    row = await pool.fetchrow(
        query("fail_attempt"),
        job.id,
        worker,
        error[:4000],
        backoff_seconds(job.attempts, base, cap),
    )
    return None if row is None else Status(row["status"])


async def release(
    pool: asyncpg.Pool, job_id: uuid.UUID, worker: str, until: dt.datetime | None = None
) -> bool:
    """Hand a job back to the queue, to run again at once or at `until`; the attempt does
    not count."""
    return await pool.fetchval(query("release"), job_id, worker, until) is not None


async def finish_cancelled(pool: asyncpg.Pool, job_id: uuid.UUID, worker: str) -> bool:
    return await pool.fetchval(query("finish_cancelled"), job_id, worker) is not None


async def rescue_expired(
    pool: asyncpg.Pool, lease_seconds: float
) -> list[tuple[uuid.UUID, Status]]:
    rows = await pool.fetch(query("rescue_expired"), lease_seconds)
    return [(r["id"], Status(r["status"])) for r in rows]


async def prune_finished(pool: asyncpg.Pool, retention_days: float, batch: int = 1000) -> int:
    status = await pool.execute(query("prune_finished"), retention_days * 86400, batch)
    return int(status.split()[-1])


async def compact_counts(pool: asyncpg.Pool) -> None:
    """Fold the finished jobs' count deltas (per table and status, which the operator
    views read: sql/014_status_counts.sql) into a row each; the pruner calls it after
    each sweep."""
    await pool.execute(query("compact_job_counts"))


async def get_job(conn: asyncpg.Connection | asyncpg.Pool, job_id: uuid.UUID) -> Job:
    row = await conn.fetchrow(query("job_by_id"), job_id)
    if row is None:
        raise JobStateError(f"no job {job_id}")
    return Job.from_row(row)


async def cancel(conn: asyncpg.Connection, job_id: uuid.UUID) -> Status:
    """Cancel a queued job now, or ask a running one to stop at its next chunk boundary."""
    status = await conn.fetchval(query("cancel"), job_id)
    if status is None:
        job = await get_job(conn, job_id)
        raise JobStateError(
            f"job {job_id} is {job.status}; only queued or running jobs can be cancelled"
        )
    return Status(status)


async def retry(conn: asyncpg.Connection, job_id: uuid.UUID) -> None:
    try:
        retried = await conn.fetchval(query("retry"), job_id)
    except asyncpg.UniqueViolationError:  # background_jobs_dedup
        raise JobStateError(
            f"job {job_id}: the same work is queued or running as another job already"
        ) from None
    if retried is None:
        job = await get_job(conn, job_id)
        raise JobStateError(
            f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
        )


async def set_limits(
    conn: asyncpg.Connection, job_id: uuid.UUID, changes: dict[str, Any]
) -> dict[str, Any]:
    """Change a queued or running job's limits (a None value removes one): the new limits.
    A changed maintenance window reschedules a queued job to its next opening."""
    run_at = None
    if WINDOW in changes:
        now = dt.datetime.now(dt.UTC)
        run_at = window_opens(changes, now) or now
    row = await conn.fetchrow(query("set_limits"), job_id, json.dumps(changes), run_at)
    if row is None:
        job = await get_job(conn, job_id)
        raise JobStateError(
            f"job {job_id} is {job.status}; only queued or running jobs change limits"
        )
    limits: dict[str, Any] = json.loads(row["limits"])
    return limits


async def pause_table(conn: asyncpg.Connection, table: str) -> bool:
    """Pause `table` (schema-qualified); False if it already was."""
    return await conn.fetchval(query("pause_table"), table) is not None


async def resume_table(conn: asyncpg.Connection, table: str) -> bool:
    """Resume `table` and wake the workers; False if it was not paused."""
    return bool(await conn.fetch(query("resume_table"), table))


async def pause_job(conn: asyncpg.Connection, job_id: uuid.UUID) -> Status:
    status = await conn.fetchval(query("pause_job"), job_id)
    if status is None:
        job = await get_job(conn, job_id)
        raise JobStateError(f"job {job_id} is {job.status}; only queued or running jobs pause")
    return Status(status)


async def resume_job(conn: asyncpg.Connection, job_id: uuid.UUID) -> None:
    if await conn.fetchval(query("resume_job"), job_id) is None:
        job = await get_job(conn, job_id)
        raise JobStateError(f"job {job_id} is not paused (it is {job.status})")


async def running_archive(conn: asyncpg.Connection, table: str) -> uuid.UUID | None:
    """An archive job of `table` running now, if any (an erasure waits for it: rows it
    moves after the erasure read the archive would escape it)."""
    found: uuid.UUID | None = await conn.fetchval(query("running_archive_of"), table)
    return found


async def tables_to_publish(
    conn: asyncpg.Connection | asyncpg.Pool, storage_url: str, *, delta: bool
) -> list[str]:
    """Tables whose committed files on `storage_url` are not all in their Delta tables
    yet (`delta`: publishing is on), or whose last publication a crash interrupted, or
    with retired files to take out and delete (archiver.ledger)."""
    return [
        r["source_table"]
        for r in await conn.fetch(query("delta_pending_tables"), storage_url, delta)
    ]


async def maintenance_due(
    conn: asyncpg.Connection, kind: str, storage_url: str, period: float
) -> bool:
    """Whether `kind`'s periodic job of `storage_url` is due: none was queued in the last
    `period` seconds by any worker (the first a period after the storage is first seen);
    when it is, the period starts again. In the caller's transaction, with the queueing."""
    await conn.execute(query("maintenance_seen"), kind, storage_url)
    return await conn.fetchval(query("maintenance_due"), kind, storage_url, period) is not None


async def tables_to_compact(conn: asyncpg.Connection, storage_url: str, small: int) -> list[str]:
    """Tables with two committed files under `small` bytes or more on `storage_url`."""
    return [
        r["source_table"] for r in await conn.fetch(query("compact_tables"), storage_url, small)
    ]


# -- a job's thread (ADBC), in the transaction of the chunk it commits ------------------


def checkpoint(conn: BulkConnection, job_id: str, worker: str, progress: dict[str, Any]) -> bool:
    """Save the job's progress (and renew its lease); False when it is no longer
    `worker`'s."""
    return bool(
        run_in_transaction(conn, query("checkpoint"), (job_id, worker, json.dumps(progress)))
    )


def still_held(conn: BulkConnection, job_id: str, worker: str) -> bool:
    """Whether `worker` holds the job, its row locked until the transaction ends (a
    rescue cannot slip in before a pending file is recorded)."""
    return bool(run_in_transaction(conn, query("still_held"), (job_id, worker)))


def limits_now(conn: BulkConnection, job_id: str) -> dict[str, Any]:
    """The job's limits as they are now (operators change them while it runs)."""
    rows = fetch_and_rollback(conn, query("job_limits"), (job_id,))
    found: dict[str, Any] = json.loads(rows[0][0]) if rows else {}
    return found


def set_throttled(conn: BulkConnection, job_id: str, worker: str, reason: str | None) -> None:
    """Say why the job waits (None: it no longer does), in its own transaction."""
    run_in_transaction(conn, query("set_throttled"), (job_id, worker, reason or ""))
    conn.commit()


async def writers_at_work(
    conn: asyncpg.Connection, job_ids: list[str], operations: list[int]
) -> set[str]:
    """Of these jobs and ledger operations, those still at work (a job queued or running,
    an operation running), named as files.names.writer_of names them (archiver.lifecycle
    .orphans asks the same on its synchronous connection)."""
    args = json.dumps(job_ids), json.dumps(operations)
    return {str(r[0]) for r in await conn.fetch(query("orphans_writers_at_work"), *args)}
