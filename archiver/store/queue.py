"""The queue as a worker sees it: a seam with one typed method per step of a job's life
(as River's driver has one per query), so the worker's claim loop, its job runs and its
rescuer and pruner are the same code over PostgreSQL (`PgQueue`, over store.jobs) and
over the in-memory queue of archiver.testing.queue, which the contract suite
(tests/integration/test_queue_contract.py) holds to the same behaviour.

What a worker does goes through here, and what an operator does to a job or a table
(cancel, retry, pause, resume, throttle, and the audit row of each: archiver.operations.
actions, from the CLI and the console alike) -- on the caller's connection, in its
transaction, where `PgQueue` is made over one. Commands that enqueue with an audit row or
take a policy's slot call store.jobs with their connection."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import asyncpg

from archiver.model import Job, Queueing, Status
from archiver.store import audit, jobs
from archiver.store.jobs import Lease


class Queue(Protocol):
    async def enqueue(
        self, task_name: str, payload: dict[str, Any], how: Queueing
    ) -> tuple[uuid.UUID, bool]:
        """Queue a job: (id, True), or (the id of its queued or running twin, False)."""

    async def claim(self, worker: str, limit: int) -> list[Job]:
        """Up to `limit` runnable jobs for `worker`, most urgent first, at most one per
        lock_key and none whose lock_key a running job holds; paused ones stay."""

    async def seconds_to_next_run(self) -> float | None:
        """Until the earliest queued, unpaused job may run; None when none is queued."""

    async def heartbeat(self, job_id: uuid.UUID, worker: str) -> Lease | None:
        """Renew the lease: whether to stop; None when the job is no longer `worker`'s."""

    async def complete(self, job_id: uuid.UUID, worker: str, progress: dict[str, Any]) -> bool:
        """False when the job was no longer `worker`'s (nothing changed)."""

    async def complete_many(self, job_ids: list[uuid.UUID], worker: str) -> int:
        """How many of `job_ids` were `worker`'s and are completed now."""

    async def fail_attempt(
        self, job: Job, worker: str, error: str, base: float = 5.0, cap: float = 600.0
    ) -> Status | None:
        """Queued again after a backoff, or failed with its last attempt; the newest 10
        errors kept. None when the job was no longer `worker`'s."""

    async def release(
        self, job_id: uuid.UUID, worker: str, until: dt.datetime | None = None
    ) -> bool:
        """Handed back, to run at once or at `until`; the attempt does not count."""

    async def finish_cancelled(self, job_id: uuid.UUID, worker: str) -> bool: ...

    async def rescue_expired(self, lease_seconds: float) -> list[tuple[uuid.UUID, Status]]:
        """Running jobs without a heartbeat for `lease_seconds`: queued again (failed
        with their last attempt, cancelled when that was asked)."""

    async def prune_finished(self, retention_days: float, batch: int = 1000) -> int:
        """Up to `batch` jobs finished more than `retention_days` ago, deleted."""

    async def get(self, job_id: uuid.UUID) -> Job:
        """The job (JobStateError if there is none)."""

    async def cancel(self, job_id: uuid.UUID) -> Status:
        """A queued job cancelled now, a running one asked to stop (JobStateError when
        it has finished)."""

    async def retry(self, job_id: uuid.UUID) -> None:
        """A failed or cancelled job queued again with its attempts reset."""

    async def pause_job(self, job_id: uuid.UUID) -> Status: ...

    async def resume_job(self, job_id: uuid.UUID) -> None: ...

    async def pause_table(self, table: str) -> bool:
        """False when it was paused already."""

    async def resume_table(self, table: str) -> bool:
        """False when it was not paused."""

    async def set_limits(self, job_id: uuid.UUID, changes: dict[str, Any]) -> dict[str, Any]:
        """A queued or running job's limits changed (a None value removes one; a new
        window moves a queued job to its next opening): the new limits (JobStateError
        when it has finished)."""

    async def record_action(
        self, action: str, target: str, said: str, who: str | None, address: str | None
    ) -> None:
        """An operator's action in the audit: `who` and `address` the console's person
        and client, the CLI's user@host when `who` is None."""


class PgQueue:
    """The queue in PostgreSQL: each step one statement of store/jobs.sql, on a pool's
    connection, or on the caller's (its transaction holding an operator's change and
    its audit row together)."""

    def __init__(self, pool: asyncpg.Pool | asyncpg.Connection) -> None:
        self.pool = pool

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[asyncpg.Connection]:
        if not hasattr(self.pool, "acquire"):  # the caller's connection
            yield self.pool
            return
        async with self.pool.acquire() as conn:
            yield conn

    async def enqueue(
        self, task_name: str, payload: dict[str, Any], how: Queueing
    ) -> tuple[uuid.UUID, bool]:
        return await jobs.enqueue(self.pool, task_name, payload, how)

    async def claim(self, worker: str, limit: int) -> list[Job]:
        return await jobs.claim_jobs(self.pool, worker, limit)

    async def seconds_to_next_run(self) -> float | None:
        return await jobs.seconds_to_next_run(self.pool)

    async def heartbeat(self, job_id: uuid.UUID, worker: str) -> Lease | None:
        return await jobs.heartbeat(self.pool, job_id, worker)

    async def complete(self, job_id: uuid.UUID, worker: str, progress: dict[str, Any]) -> bool:
        return await jobs.complete(self.pool, job_id, worker, progress)

    async def complete_many(self, job_ids: list[uuid.UUID], worker: str) -> int:
        return await jobs.complete_many(self.pool, job_ids, worker)

    async def fail_attempt(
        self, job: Job, worker: str, error: str, base: float = 5.0, cap: float = 600.0
    ) -> Status | None:
        return await jobs.fail_attempt(self.pool, job, worker, error, base, cap)

    async def release(
        self, job_id: uuid.UUID, worker: str, until: dt.datetime | None = None
    ) -> bool:
        return await jobs.release(self.pool, job_id, worker, until)

    async def finish_cancelled(self, job_id: uuid.UUID, worker: str) -> bool:
        return await jobs.finish_cancelled(self.pool, job_id, worker)

    async def rescue_expired(self, lease_seconds: float) -> list[tuple[uuid.UUID, Status]]:
        return await jobs.rescue_expired(self.pool, lease_seconds)

    async def prune_finished(self, retention_days: float, batch: int = 1000) -> int:
        return await jobs.prune_finished(self.pool, retention_days, batch)

    async def get(self, job_id: uuid.UUID) -> Job:
        return await jobs.get_job(self.pool, job_id)

    async def cancel(self, job_id: uuid.UUID) -> Status:
        async with self._session() as conn:
            return await jobs.cancel(conn, job_id)

    async def retry(self, job_id: uuid.UUID) -> None:
        async with self._session() as conn:
            await jobs.retry(conn, job_id)

    async def pause_job(self, job_id: uuid.UUID) -> Status:
        async with self._session() as conn:
            return await jobs.pause_job(conn, job_id)

    async def resume_job(self, job_id: uuid.UUID) -> None:
        async with self._session() as conn:
            await jobs.resume_job(conn, job_id)

    async def pause_table(self, table: str) -> bool:
        async with self._session() as conn:
            return await jobs.pause_table(conn, table)

    async def resume_table(self, table: str) -> bool:
        async with self._session() as conn:
            return await jobs.resume_table(conn, table)

    async def set_limits(self, job_id: uuid.UUID, changes: dict[str, Any]) -> dict[str, Any]:
        async with self._session() as conn:
            return await jobs.set_limits(conn, job_id, changes)

    async def record_action(
        self, action: str, target: str, said: str, who: str | None, address: str | None
    ) -> None:
        async with self._session() as conn:
            await audit.record(conn, action, target, said, who=who, address=address)
