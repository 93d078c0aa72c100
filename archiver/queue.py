"""The job queue: the only code that reads or writes background_jobs and archive_files.

Async operations use asyncpg. `JobLedger` is the synchronous side the archive pipeline
calls from its worker thread, on ADBC connections, so a chunk's catalog row and progress
can commit in the very transaction that deletes the chunk's rows.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import uuid
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import asyncpg

from archiver.errors import InputError, JobStateError, LeaseLost
from archiver.pipeline import ArchivedFile, ArchiveRequest, Progress

ARCHIVE_TASK = "archive"
# Does nothing: for benchmarks and health checks of the queue itself. Workers finish
# claimed no-op jobs in the claiming loop, in batches, without a thread.
NOOP_TASK = "noop"


@cache
def _queries() -> dict[str, str]:
    text = resources.files("archiver").joinpath("queries.sql").read_text()
    parts = re.split(r"^-- name: (\w+)\s*$", text, flags=re.M)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def query(name: str) -> str:
    """A named query from queries.sql."""
    return _queries()[name]


@dataclass(frozen=True)
class Job:
    """A row of background_jobs: pure data."""

    id: uuid.UUID
    task_name: str
    payload: dict[str, Any]
    status: str
    priority: int
    attempts: int
    max_attempts: int
    locked_by: str | None
    progress: dict[str, Any]
    last_error: str | None
    errors: list[dict[str, Any]]
    run_at: dt.datetime
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    heartbeat_at: dt.datetime | None
    cancel_requested_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Job:
        return cls(
            id=row["id"],
            task_name=row["task_name"],
            payload=json.loads(row["payload"]),
            status=row["status"],
            priority=row["priority"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            locked_by=row["locked_by"],
            progress=json.loads(row["progress"]),
            last_error=row["last_error"],
            errors=json.loads(row["errors"]),
            run_at=row["run_at"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            heartbeat_at=row["heartbeat_at"],
            cancel_requested_at=row["cancel_requested_at"],
        )


def parse_job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InputError(f"{text!r} is not a job id (a UUID)") from None


async def enqueue(
    conn: asyncpg.Connection | asyncpg.Pool,
    payload: dict[str, Any],
    *,
    dedup_key: str,
    lock_key: str | None,
    priority: int = 0,
    max_attempts: int = 5,
    run_at: dt.datetime | None = None,
    task_name: str = ARCHIVE_TASK,
) -> tuple[uuid.UUID, bool]:
    """Queue a job; (id, True) if new, or (id of the queued/running twin, False)."""
    while True:
        job_id = await conn.fetchval(
            query("enqueue"),
            task_name,
            json.dumps(payload),
            priority,
            max_attempts,
            dedup_key,
            lock_key,
            run_at,
        )
        if job_id is not None:
            return job_id, True
        twin = await conn.fetchrow(query("find_duplicate"), dedup_key)
        if twin is not None:  # else it finished in between: try again
            return twin["id"], False


def archive_keys(request: ArchiveRequest) -> tuple[str, str]:
    """(dedup_key, lock_key) of an archive: the same archive is never queued or running
    twice, and two archives of one table never run at once."""
    return (
        f"archive:{request.table}:{request.column}:{request.cutoff}:{request.mode}",
        f"table:{request.table}",
    )


def range_keys(request: ArchiveRequest, index: int, parts: int) -> tuple[str, str]:
    """(dedup_key, lock_key) of part `index` of a split archive: the parts of one table
    run in parallel, each part never twice at once."""
    dedup_key, lock_key = archive_keys(request)
    return f"{dedup_key}:range:{index}/{parts}", f"{lock_key}:range:{index}"


async def enqueue_slot(
    conn: asyncpg.Connection | asyncpg.Pool,
    request: ArchiveRequest,
    *,
    policy: str,
    slot: dt.datetime,
    priority: int = 0,
    max_attempts: int = 5,
) -> tuple[uuid.UUID, bool]:
    """Queue a policy's slot unless the database has it: (id, True) if new, else the id of
    the job any scheduler enqueued for this slot before, and False.

    The (policy, slot) key is the slot's dedup key, kept for as long as the job row lives,
    whatever its status; two slots' jobs on one table still never run at once (lock_key).
    """
    _, lock_key = archive_keys(request)
    while True:
        job_id = await conn.fetchval(
            query("enqueue_policy_slot"),
            ARCHIVE_TASK,
            json.dumps(request.payload()),
            priority,
            max_attempts,
            lock_key,
            policy,
            slot,
        )
        if job_id is not None:
            return job_id, True
        twin = await conn.fetchval(query("policy_slot_job"), policy, slot)
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


async def heartbeat(pool: asyncpg.Pool, job_id: uuid.UUID, worker: str) -> bool | None:
    """Renew the lease. None: the job is no longer ours; else whether a cancel was asked."""
    row = await pool.fetchrow(query("heartbeat"), job_id, worker)
    return None if row is None else bool(row["cancel_requested"])


async def complete(
    pool: asyncpg.Pool, job_id: uuid.UUID, worker: str, progress: dict[str, Any]
) -> bool:
    return await pool.fetchval(query("complete"), job_id, worker, json.dumps(progress)) is not None


def backoff_seconds(attempt: int, base: float = 5.0, cap: float = 600.0) -> float:
    """Exponential backoff with full jitter, capped."""
    return random.uniform(0, min(cap, base * 2 ** max(attempt - 1, 0)))


async def fail_attempt(
    pool: asyncpg.Pool, job: Job, worker: str, error: str, base: float = 5.0, cap: float = 600.0
) -> str | None:
    """Record a failed attempt: requeued after a backoff (base x 2^(attempt-1) seconds,
    full jitter, capped), or failed for good after max_attempts."""
    row = await pool.fetchrow(
        query("fail_attempt"),
        job.id,
        worker,
        error[:4000],
        backoff_seconds(job.attempts, base, cap),
    )
    return None if row is None else str(row["status"])


async def release(pool: asyncpg.Pool, job_id: uuid.UUID, worker: str) -> bool:
    return await pool.fetchval(query("release"), job_id, worker) is not None


async def finish_cancelled(pool: asyncpg.Pool, job_id: uuid.UUID, worker: str) -> bool:
    return await pool.fetchval(query("finish_cancelled"), job_id, worker) is not None


async def rescue_expired(pool: asyncpg.Pool, lease_seconds: float) -> list[tuple[uuid.UUID, str]]:
    rows = await pool.fetch(query("rescue_expired"), lease_seconds)
    return [(r["id"], r["status"]) for r in rows]


async def prune_finished(pool: asyncpg.Pool, retention_days: float, batch: int = 1000) -> int:
    status = await pool.execute(query("prune_finished"), retention_days * 86400, batch)
    return int(status.split()[-1])


async def get_job(conn: asyncpg.Connection | asyncpg.Pool, job_id: uuid.UUID) -> Job:
    row = await conn.fetchrow(query("job_by_id"), job_id)
    if row is None:
        raise JobStateError(f"no job {job_id}")
    return Job.from_row(row)


async def cancel(conn: asyncpg.Connection, job_id: uuid.UUID) -> str:
    """Cancel a queued job now, or ask a running one to stop at its next chunk boundary."""
    status = await conn.fetchval(query("cancel"), job_id)
    if status is None:
        job = await get_job(conn, job_id)
        raise JobStateError(
            f"job {job_id} is {job.status}; only queued or running jobs can be cancelled"
        )
    return str(status)


async def retry(conn: asyncpg.Connection, job_id: uuid.UUID) -> None:
    if await conn.fetchval(query("retry"), job_id) is None:
        job = await get_job(conn, job_id)
        raise JobStateError(
            f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
        )


OPS_VIEWS = ("status_summary", "running_jobs", "failed_jobs", "archive_summary")


async def ops_report(conn: asyncpg.Connection) -> dict[str, list[dict[str, Any]]]:
    """Every operator view (sql/003_ops_views.sql), read in one snapshot."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return {name: [dict(r) for r in await conn.fetch(query(name))] for name in OPS_VIEWS}


async def list_jobs(
    conn: asyncpg.Connection, status: str | None, table: str | None, limit: int
) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(query("list_jobs"), status, table, limit)]


def count_jobs_by_status(conn: Any) -> dict[str, int]:
    """Jobs per status, on a synchronous ADBC connection (the metrics collector's thread)."""
    try:
        with conn.cursor() as cur:
            cur.execute(query("jobs_by_status"))
            rows = cur.fetchall()
    finally:
        conn.rollback()
    return {str(status): int(count) for status, count in rows}


async def job_files(conn: asyncpg.Connection, job_id: uuid.UUID) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(query("job_files"), job_id)]


async def archived_files(
    conn: asyncpg.Connection,
    *,
    job_id: uuid.UUID | None = None,
    table: str | None = None,
    cutoff_from: dt.datetime | None = None,
    cutoff_to: dt.datetime | None = None,
    state: str | None = None,
) -> list[dict[str, Any]]:
    """Catalogued files for restore and verify, in archive order."""
    rows = await conn.fetch(query("archived_files"), job_id, table, cutoff_from, cutoff_to, state)
    return [dict(r) for r in rows]


def _one(cur: Any, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
    cur.execute(sql, params)
    rows = cur.fetchall()
    return rows[0] if rows else None


class JobLedger:
    """The pipeline's Ledger for one job, on a synchronous ADBC connection to the queue
    database. Every write checks the job is still this worker's."""

    def __init__(self, conn: Any, job_id: uuid.UUID, worker: str) -> None:
        self.conn, self.job_id, self.worker = conn, str(job_id), worker

    def _file_params(self, f: ArchivedFile, state: str, xid: str | None) -> tuple[Any, ...]:
        return (
            f.job_id,
            f.part,
            f.source_table,
            f.storage_url,
            f.path,
            f.row_count,
            f.byte_size,
            f.md5,
            json.dumps(f.key_columns),
            json.dumps(f.min_key),
            json.dumps(f.max_key),
            f.cutoff_column,
            f.min_cutoff_value or "-infinity",
            f.max_cutoff_value or "infinity",
            state,
            xid or "",
        )

    def _checkpoint(self, cur: Any, progress: Progress) -> None:
        if (
            _one(
                cur, query("checkpoint"), (self.job_id, self.worker, json.dumps(progress.to_json()))
            )
            is None
        ):
            raise LeaseLost(f"job {self.job_id} is no longer held by {self.worker}")

    def next_part(self) -> int:
        with self.conn.cursor() as cur:
            row = _one(cur, query("next_part"), (self.job_id,))
        self.conn.rollback()
        assert row is not None
        return int(row[0])

    def catalogued_paths(self) -> set[str]:
        with self.conn.cursor() as cur:
            cur.execute(query("job_paths"), (self.job_id,))
            paths = {str(row[0]) for row in cur.fetchall()}
        self.conn.rollback()
        return paths

    def in_transaction(self, cur: Any, f: ArchivedFile, progress: Progress) -> None:
        self._checkpoint(cur, progress)  # first: a job that is no longer ours is LeaseLost
        cur.execute(query("insert_file"), self._file_params(f, "committed", None))

    def record(self, f: ArchivedFile, progress: Progress) -> None:
        try:
            with self.conn.cursor() as cur:
                self.in_transaction(cur, f, progress)
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    def record_pending(self, f: ArchivedFile, source_xid: str) -> None:
        try:
            with self.conn.cursor() as cur:
                if _one(cur, query("still_held"), (self.job_id, self.worker)) is None:
                    raise LeaseLost(f"job {self.job_id} is no longer held by {self.worker}")
                cur.execute(query("insert_file"), self._file_params(f, "pending", source_xid))
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    def confirm(self, f: ArchivedFile, progress: Progress) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.execute(query("confirm_file"), (f.job_id, f.part))
                self.conn.commit()  # the source committed: the file is real, whoever holds the job
                self._checkpoint(cur, progress)
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    def committed_progress(self, saved: dict[str, Any]) -> Progress:
        """The progress a (re)started job resumes from: what its committed files say."""
        with self.conn.cursor() as cur:
            row = _one(cur, query("committed_progress"), (self.job_id,))
        self.conn.rollback()
        assert row is not None
        progress = Progress.from_json(saved)
        progress.files, progress.rows, progress.bytes = int(row[0]), int(row[1]), int(row[2])
        progress.last_key = json.loads(row[3]) if row[3] else None
        return progress

    def reconcile_pending(self, source_conn: Any) -> list[tuple[int, str, str]]:
        """Settle files recorded before a source COMMIT whose outcome this job never
        confirmed (a crash in between): committed -> confirmed; aborted -> forgotten.
        Returns (part, path, outcome) for each; raises while a source transaction is
        still in progress (its old worker is alive and finishing)."""
        with self.conn.cursor() as cur:
            cur.execute(query("pending_files"), (self.job_id,))
            pending = cur.fetchall()
        self.conn.rollback()
        settled = []
        for part, path, xid in pending:
            with source_conn.cursor() as cur:
                row = _one(cur, "SELECT pg_xact_status($1::text::xid8)", (xid,))
            source_conn.rollback()
            outcome = row[0] if row else None
            if outcome not in ("committed", "aborted"):  # in progress, or too old to tell
                raise JobStateError(
                    f"part {part} of job {self.job_id}: source transaction {xid} is "
                    f"{outcome or 'unknown'}; its file cannot be confirmed or dropped yet"
                )
            with self.conn.cursor() as cur:
                cur.execute(
                    query("confirm_file" if outcome == "committed" else "forget_file"),
                    (self.job_id, part),
                )
            self.conn.commit()
            settled.append((int(part), str(path), str(outcome)))
        return settled
