"""The queue in memory (store.queue.Queue), as procrastinate ships an in-memory connector
apart from its production code: the worker's claim loop, its job runs and its rescuer
and pruner tested in-process in milliseconds. It mirrors store/jobs.sql statement by
statement, and tests/integration/test_queue_contract.py runs the same contract against it and
against PostgreSQL, so the two cannot drift apart unnoticed. Never used by archiver
itself."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from archiver.errors import JobStateError
from archiver.limits import WINDOW, window_opens
from archiver.model import FINISHED, Job, Queueing, Status
from archiver.store.jobs import Lease, backoff_seconds

Clock = Callable[[], dt.datetime]
KEPT_ERRORS = 10  # fail_attempt keeps the newest ten


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class MemoryQueue:
    """background_jobs and archiver_paused_tables as dicts; `clock` is now() (a test
    moves it to expire a lease or end a backoff)."""

    def __init__(self, clock: Clock = _utc_now) -> None:
        self.clock = clock
        self.jobs: dict[uuid.UUID, Job] = {}
        self.dedup: dict[uuid.UUID, str] = {}
        self.lock_keys: dict[uuid.UUID, str | None] = {}
        self.paused_tables: set[str] = set()
        self.actions: list[tuple[str, str, str, str | None, str | None]] = []  # the audit

    # -- helpers -----------------------------------------------------------------------

    def _paused(self, job: Job) -> bool:
        return job.paused_at is not None or job.payload.get("table") in self.paused_tables

    def _held(self, job_id: uuid.UUID, worker: str) -> Job | None:
        job = self.jobs.get(job_id)
        if job is None or job.status != Status.RUNNING or job.locked_by != worker:
            return None
        return job

    def _twin(self, dedup_key: str, but: uuid.UUID | None = None) -> uuid.UUID | None:
        return next(
            (
                i
                for i, key in self.dedup.items()
                if key == dedup_key and i != but and self.jobs[i].status in _ACTIVE
            ),
            None,
        )

    def _set(self, job: Job, **changes: Any) -> Job:
        """The job's row changed (a Job is frozen: its new version replaces it)."""
        self.jobs[job.id] = new = dataclasses.replace(job, **changes)
        return new

    def _finish(self, job: Job, status: Status, **changes: Any) -> Job:
        return self._set(
            job, status=status, finished_at=self.clock(), locked_by=None, heartbeat_at=None,
            **changes,
        )  # fmt: skip

    # -- the Queue -----------------------------------------------------------------------

    async def enqueue(
        self, task_name: str, payload: dict[str, Any], how: Queueing
    ) -> tuple[uuid.UUID, bool]:
        twin = self._twin(how.dedup_key)
        if twin is not None:
            return twin, False
        now = self.clock()
        job = Job(
            id=uuid.uuid4(), task_name=task_name, payload=copy.deepcopy(payload),
            status=Status.QUEUED, priority=how.priority, attempts=0, max_attempts=how.max_attempts,
            locked_by=None, progress={}, last_error=None, errors=[], run_at=how.run_at or now,
            created_at=now, started_at=None, finished_at=None, heartbeat_at=None,
            cancel_requested_at=None,
        )  # fmt: skip
        self.jobs[job.id], self.dedup[job.id] = job, how.dedup_key
        self.lock_keys[job.id] = how.lock_key
        return job.id, True

    async def claim(self, worker: str, limit: int) -> list[Job]:
        now = self.clock()
        running = {self.lock_keys[j.id] for j in self.jobs.values() if j.status == Status.RUNNING}
        candidates = sorted(
            (
                j
                for j in self.jobs.values()
                if j.status == Status.QUEUED
                and j.run_at <= now
                and not self._paused(j)
                and (self.lock_keys[j.id] is None or self.lock_keys[j.id] not in running)
            ),
            key=_urgency,
        )[:limit]
        picked, keys = [], set()
        for job in candidates:  # at most one per lock_key, among the candidates
            key = self.lock_keys[job.id] or str(job.id)
            if key not in keys:
                keys.add(key)
                picked.append(job)
        claimed = [self._claimed(job, worker, now) for job in picked]
        return [copy.deepcopy(j) for j in sorted(claimed, key=_urgency)]

    def _claimed(self, job: Job, worker: str, now: dt.datetime) -> Job:
        return self._set(
            job, status=Status.RUNNING, locked_by=worker, attempts=job.attempts + 1,
            claims=job.claims + 1, started_at=job.started_at or now, heartbeat_at=now,
            finished_at=None,
        )  # fmt: skip

    async def seconds_to_next_run(self) -> float | None:
        waiting = [
            j.run_at
            for j in self.jobs.values()
            if j.status == Status.QUEUED and not self._paused(j)
        ]
        if not waiting:
            return None
        return max((min(waiting) - self.clock()).total_seconds(), 0.0)

    async def heartbeat(self, job_id: uuid.UUID, worker: str) -> Lease | None:
        job = self._held(job_id, worker)
        if job is None:
            return None
        self._set(job, heartbeat_at=self.clock())
        return Lease(job.cancel_requested_at is not None, self._paused(job))

    async def complete(self, job_id: uuid.UUID, worker: str, progress: dict[str, Any]) -> bool:
        job = self._held(job_id, worker)
        if job is None:
            return False
        self._finish(job, Status.COMPLETED, progress=copy.deepcopy(progress))
        return True

    async def complete_many(self, job_ids: list[uuid.UUID], worker: str) -> int:
        done = [j for i in set(job_ids) if (j := self._held(i, worker)) is not None]
        for job in done:
            self._finish(job, Status.COMPLETED)
        return len(done)

    async def fail_attempt(
        self, job: Job, worker: str, error: str, base: float = 5.0, cap: float = 600.0
    ) -> Status | None:
        held = self._held(job.id, worker)
        if held is None:
            return None
        now = self.clock()
        error = error[:4000]
        said = {"at": now.isoformat(), "attempt": held.attempts, "worker": worker, "error": error}
        kept = [*held.errors, said][-KEPT_ERRORS:]
        if held.attempts >= held.max_attempts:
            return self._finish(held, Status.FAILED, last_error=error, errors=kept).status
        wait = dt.timedelta(seconds=backoff_seconds(job.attempts, base, cap))
        return self._set(
            held, status=Status.QUEUED, run_at=now + wait, finished_at=None, locked_by=None,
            heartbeat_at=None, last_error=error, errors=kept,
        ).status  # fmt: skip

    async def release(
        self, job_id: uuid.UUID, worker: str, until: dt.datetime | None = None
    ) -> bool:
        job = self._held(job_id, worker)
        if job is None:
            return False
        self._set(
            job, status=Status.QUEUED, run_at=until or self.clock(),
            attempts=max(job.attempts - 1, 0), locked_by=None, heartbeat_at=None,
        )  # fmt: skip
        return True

    async def finish_cancelled(self, job_id: uuid.UUID, worker: str) -> bool:
        job = self._held(job_id, worker)
        if job is None:
            return False
        self._finish(job, Status.CANCELLED)
        return True

    async def rescue_expired(self, lease_seconds: float) -> list[tuple[uuid.UUID, Status]]:
        now = self.clock()
        rescued = []
        for job in list(self.jobs.values()):
            beat = job.heartbeat_at
            if job.status != Status.RUNNING or beat is None:
                continue
            if beat >= now - dt.timedelta(seconds=lease_seconds):
                continue
            said = f"worker {job.locked_by} lost its lease (no heartbeat since {beat})"
            entry = {"at": now.isoformat(), "attempt": job.attempts, "worker": job.locked_by,
                     "error": said}  # fmt: skip
            kept = [*job.errors, entry][-KEPT_ERRORS:]
            if job.cancel_requested_at is not None:
                job = self._finish(job, Status.CANCELLED, last_error=said, errors=kept, run_at=now)
            elif job.attempts >= job.max_attempts:
                job = self._finish(job, Status.FAILED, last_error=said, errors=kept, run_at=now)
            else:
                job = self._set(
                    job, status=Status.QUEUED, finished_at=None, locked_by=None,
                    heartbeat_at=None, last_error=said, errors=kept, run_at=now,
                )  # fmt: skip
            rescued.append((job.id, job.status))
        return rescued

    async def prune_finished(self, retention_days: float, batch: int = 1000) -> int:
        before = self.clock() - dt.timedelta(days=retention_days)
        old = [
            i
            for i, j in self.jobs.items()
            if j.status in FINISHED and j.finished_at is not None and j.finished_at < before
        ][:batch]
        for i in old:
            del self.jobs[i], self.dedup[i], self.lock_keys[i]
        return len(old)

    async def get(self, job_id: uuid.UUID) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise JobStateError(f"no job {job_id}")
        return copy.deepcopy(job)

    async def cancel(self, job_id: uuid.UUID) -> Status:
        job = await self.get(job_id)
        if job.status not in _ACTIVE:
            raise JobStateError(
                f"job {job_id} is {job.status}; only queued or running jobs can be cancelled"
            )
        asked = job.cancel_requested_at or self.clock()
        if job.status == Status.QUEUED:
            return self._set(
                job, status=Status.CANCELLED, finished_at=self.clock(), cancel_requested_at=asked
            ).status
        return self._set(job, cancel_requested_at=asked).status

    async def retry(self, job_id: uuid.UUID) -> None:
        job = await self.get(job_id)
        if job.status not in (Status.FAILED, Status.CANCELLED):
            raise JobStateError(
                f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
            )
        if self._twin(self.dedup[job_id], but=job_id) is not None:
            raise JobStateError(
                f"job {job_id}: the same work is queued or running as another job already"
            )
        self._set(
            job, status=Status.QUEUED, run_at=self.clock(), attempts=0, finished_at=None,
            cancel_requested_at=None, locked_by=None, heartbeat_at=None,
        )  # fmt: skip

    async def pause_job(self, job_id: uuid.UUID) -> Status:
        job = await self.get(job_id)
        if job.status not in _ACTIVE:
            raise JobStateError(f"job {job_id} is {job.status}; only queued or running jobs pause")
        return self._set(job, paused_at=job.paused_at or self.clock()).status

    async def resume_job(self, job_id: uuid.UUID) -> None:
        job = await self.get(job_id)
        if job.paused_at is None:
            raise JobStateError(f"job {job_id} is not paused (it is {job.status})")
        run_at = self.clock() if job.status == Status.QUEUED else job.run_at
        self._set(job, paused_at=None, run_at=run_at)

    async def pause_table(self, table: str) -> bool:
        if table in self.paused_tables:
            return False
        self.paused_tables.add(table)
        return True

    async def resume_table(self, table: str) -> bool:
        if table not in self.paused_tables:
            return False
        self.paused_tables.discard(table)
        return True

    async def set_limits(self, job_id: uuid.UUID, changes: dict[str, Any]) -> dict[str, Any]:
        job = await self.get(job_id)
        if job.status not in _ACTIVE:
            raise JobStateError(
                f"job {job_id} is {job.status}; only queued or running jobs change limits"
            )
        limits = {k: v for k, v in {**job.limits, **changes}.items() if v is not None}
        run_at = job.run_at
        if WINDOW in changes and job.status == Status.QUEUED:
            now = self.clock()
            run_at = window_opens(changes, now) or now
        return copy.deepcopy(self._set(job, limits=limits, run_at=run_at).limits)

    async def record_action(
        self, action: str, target: str, said: str, who: str | None, address: str | None
    ) -> None:
        self.actions.append((action, target, said, who, address))


_ACTIVE = (Status.QUEUED, Status.RUNNING)


def _urgency(job: Job) -> tuple[int, dt.datetime, dt.datetime]:
    return (-job.priority, job.run_at, job.created_at)
