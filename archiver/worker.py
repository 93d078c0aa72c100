"""The worker: claims jobs, runs each in a thread, keeps its leases, obeys signals.

One asyncio loop per process. The loop owns the queue connections (asyncpg pool plus a
dedicated LISTEN connection); each job's bulk work runs in a thread on its own ADBC
connections, and is told between chunks when to stop (signal, cancel, lease lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import adbc_driver_manager
import asyncpg
import pyarrow as pa

from archiver import db, failpoints, metrics
from archiver.config import ConfigFile
from archiver.context import Context
from archiver.errors import ArchiverError, LeaseLost, OutsideWindow, error_line
from archiver.kinds.kind import JobRun
from archiver.kinds.registry import KINDS, kind_of
from archiver.maintenance import Maintenance
from archiver.model import Job, Status
from archiver.store.queue import PgQueue, Queue

log = logging.getLogger(__name__)
T = TypeVar("T")

JOBS_CHANNEL, CANCEL_CHANNEL = "archiver_jobs", "archiver_cancel"
BATCH_KINDS = frozenset(k.name for k in KINDS.values() if k.batch)  # no work: completed in batches
# A stop never waits on a dead flow: a claim unanswered this long after the first signal
# is given up, and past the deadline a chunk's rollback or a job's hand-back this long.
STOP_GRACE = 3.0
FINISH_TIMEOUT = 2.0
# Failures that need no traceback in the log: operator-facing and connection errors.
EXPECTED_ERRORS = (ArchiverError, adbc_driver_manager.OperationalError, *db.CONNECTION_ERRORS)


class StopRequested(ArchiverError):
    """The worker is shutting down; the job goes back to the queue as it is."""


class PauseRequested(StopRequested):
    """An operator paused the job or its table; it goes back to the queue, paused."""


class CancelRequested(ArchiverError):
    """An operator cancelled the job; it stops at the chunk boundary."""


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(
        self,
        ctx: Context,
        *,
        concurrency: int = 1,
        burst: bool = False,
        name: str | None = None,
        config: ConfigFile | None = None,
        queue: Queue | None = None,
    ) -> None:
        """`ctx`: the process's context, whose storage, scratch directory and ADBC
        connections every job uses; `run` opens its pool of the queue database on it.
        `queue`: the jobs' queue (default: PostgreSQL's, at settings.database_url; the
        in-memory one of archiver.testing.queue runs the loop with no database, without
        LISTEN and the duties that read the catalog)."""
        self.ctx, self.settings, self.config = ctx, ctx.settings, config
        self.jobs: Queue | None = queue
        self.concurrency, self.burst = concurrency, burst
        self.name = name or worker_name()
        self.runs: dict[uuid.UUID, JobRun] = {}
        self.wake = asyncio.Event()
        self.stopping = False
        self.hard_stop = asyncio.Event()
        self.claim_given_up = asyncio.Event()  # STOP_GRACE after the first signal
        self.pool: asyncpg.Pool | None = None
        # Job threads. A thread stuck in network I/O cannot be interrupted: on a hard stop
        # its job is handed back and the process exits without joining it (`abandoned`).
        self.executor = ThreadPoolExecutor(concurrency, thread_name_prefix="job")
        self.abandoned = False

    # -- signals ---------------------------------------------------------------------

    def request_stop(self) -> None:
        """First signal: stop claiming, let chunks finish within the deadline.
        Second signal: roll back now."""
        if self.stopping:
            log.warning("second stop signal: rolling back chunks in progress")
            self.hard_stop.set()
        else:
            log.info(
                "stopping: no new jobs; chunks in progress get %.0fs",
                self.settings.shutdown_deadline,
            )
            self.stopping = True
            for run in self.runs.values():
                if run.interrupt is None:  # a cancel or a lost lease already wins
                    run.interrupt = StopRequested("worker stopping")
            later = asyncio.get_running_loop().call_later
            later(self.settings.shutdown_deadline, self.hard_stop.set)
            later(STOP_GRACE, self.claim_given_up.set)
        self.wake.set()

    # -- main loop -------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        tasks: list[asyncio.Task[None]] = []
        if self.jobs is None:
            self.pool = await self.ctx.open_pool(size=self.concurrency + 3)
            self.jobs = PgQueue(self.pool)
            tasks.append(asyncio.create_task(self._listen()))
        maintenance = Maintenance(self.ctx, self.jobs, self.wake.set, self.config)
        await maintenance.once()
        tasks += maintenance.start()
        log.info(
            "worker %s started (concurrency %d, Arrow memory pool %s)",
            self.name,
            self.concurrency,
            pa.default_memory_pool().backend_name,
        )
        try:
            claiming = asyncio.create_task(self._claim_loop())
            given_up = asyncio.create_task(self.claim_given_up.wait())
            await asyncio.wait({claiming, given_up}, return_when=asyncio.FIRST_COMPLETED)
            given_up.cancel()
            if claiming.done():
                claiming.result()  # what ended it, raised here
            else:  # waiting on the queue database past STOP_GRACE
                log.warning("stopping: a claim still waits on the queue database; given up")
                claiming.cancel()
            await self._drain()
        finally:
            for task in tasks:
                task.cancel()
            if tasks:  # a task's goodbye on a dead flow is not waited for past this
                await asyncio.wait(tasks, timeout=db.CLOSE_TIMEOUT + 1)
            self.executor.shutdown(wait=not self.abandoned, cancel_futures=True)
            await self.ctx.aclose()
        log.info("worker %s stopped", self.name)

    async def _claim_loop(self) -> None:
        """Claim and start jobs until a stop (or, with --burst, until none is left)."""
        while not self.stopping:
            self.wake.clear()
            claimed = drained = False
            wait = self.settings.poll_interval
            try:
                while len(self.runs) < self.concurrency and not self.stopping:
                    free = self.concurrency - len(self.runs)
                    idle = not self.runs
                    found = await self._queue().claim(self.name, free)
                    if not found:
                        drained = idle
                        await failpoints.areach("claim_found_nothing")
                        break
                    claimed = True
                    batch = [j.id for j in found if j.task_name in BATCH_KINDS]
                    for job in found:
                        if job.task_name not in BATCH_KINDS:
                            self._start(job)
                    if batch:
                        await self._queue().complete_many(batch, self.name)
                        log.debug("completed %d no-op jobs", len(batch))
                    if len(found) < free:
                        break
                # NOTIFY fires when a retry is queued, not when its backoff ends.
                next_run = await self._queue().seconds_to_next_run()
                if next_run is not None:
                    wait = min(wait, max(next_run, 0.05))
            except (*db.CONNECTION_ERRORS, asyncpg.PostgresConnectionError) as exc:
                log.warning("queue database unreachable (%s); retrying", error_line(exc))
                await self._expire_connections()  # none of them is to be trusted now
            except Exception:  # never let the claim loop die: log it, retry after a wait
                log.exception("unexpected error in the claim loop; retrying")
                await self._expire_connections()
            # A burst ends only on a claim that found nothing while none of this worker's
            # jobs ran: one that ran may have held back another job on its table, and may
            # have ended during the claim or an await since (a CI run lost two jobs so).
            if self.burst and drained:
                break
            if claimed and len(self.runs) < self.concurrency:
                continue
            self.ctx.bulk_pool.prune()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), wait)

    async def _drain(self) -> None:
        """Wait for running jobs; past the deadline (or a second signal) roll them back."""
        if not self.runs:
            return
        tasks = [r.task for r in self.runs.values() if r.task]
        hard = asyncio.create_task(self.hard_stop.wait())
        # All jobs finishing, or the deadline: one early finisher must not cut the others short.
        every_job = asyncio.gather(*tasks, return_exceptions=True)
        either: list[asyncio.Future[Any]] = [every_job, hard]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if self.runs:
            await self._abort_chunks()
            await asyncio.wait(tasks, timeout=FINISH_TIMEOUT)
            stuck = list(self.runs.values())  # threads stuck in I/O: hand back anyway
            for run in stuck:
                log.warning("job %s: chunk still busy at exit; handing the job back", run.job.id)
            releases = [self._queue().release(r.job.id, self.name) for r in stuck]
            await asyncio.gather(*(self._finish_quietly(r, FINISH_TIMEOUT) for r in releases))
            self.abandoned = self.abandoned or bool(stuck)
        hard.cancel()

    async def _abort_chunks(self) -> None:
        """End the source transactions of running chunks: PostgreSQL rolls them back."""
        pids = [pid for r in self.runs.values() for pid in r.source_pids]
        if not pids:
            return
        try:  # a session of its own: the pool's may be the ones on a dead flow
            async with asyncio.timeout(FINISH_TIMEOUT):
                conn = await self.ctx.open_session(self.settings.effective_source_url)
                try:
                    await conn.execute(
                        "SELECT pg_terminate_backend(p) FROM unnest($1::int[]) p", pids
                    )
                finally:
                    await db.close_bounded(conn)
        except (ArchiverError, asyncpg.PostgresError, *db.CONNECTION_ERRORS, TimeoutError) as exc:
            log.error("could not roll back chunks in progress: %s", error_line(exc))

    def _queue(self) -> Queue:
        assert self.jobs is not None, "run() sets the queue"
        return self.jobs

    async def _expire_connections(self) -> None:
        if self.pool is not None:
            await self.pool.expire_connections()

    # -- LISTEN ----------------------------------------------------------------------

    async def _listen(self) -> None:
        """Keep a dedicated LISTEN connection; after each (re)connect, poll once, since
        notifications sent while disconnected are lost."""
        delay = 0.5
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await self.ctx.open_session(self.settings.database_url)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(JOBS_CHANNEL, self._on_job_notify)
                await conn.add_listener(CANCEL_CHANNEL, self._on_cancel_notify)
                delay = 0.5
                self.wake.set()
                while not lost.is_set():
                    try:
                        await asyncio.wait_for(lost.wait(), 10)
                    except TimeoutError:
                        # notice a dead connection early: no answer in 10 s is one
                        await conn.execute("SELECT 1", timeout=10)
                log.warning("LISTEN connection lost (closed by the server); reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "LISTEN connection lost (%s); reconnecting in %.1fs", error_line(exc), delay
                )
            finally:
                if conn is not None:
                    conn.terminate()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    def _on_job_notify(self, *_args: object) -> None:
        self.wake.set()

    def _on_cancel_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            run = self.runs.get(uuid.UUID(payload))
        except ValueError:
            return
        if run is not None and run.interrupt is None:
            run.interrupt = CancelRequested("cancelled by an operator")

    # -- one job ---------------------------------------------------------------------

    def _start(self, job: Job) -> None:
        run = JobRun(job, self.name)
        self.runs[job.id] = run
        log.info("job %s: claimed (attempt %d of %d) %s",
                 job.id, job.attempts, job.max_attempts, job.payload)  # fmt: skip
        metrics.job_claimed(job)
        run.task = asyncio.create_task(self._run_job(run))

    async def _run_job(self, run: JobRun) -> None:
        job, queue = run.job, self._queue()
        beat = asyncio.create_task(self._heartbeat(run))
        try:
            if job.cancel_requested_at is not None:
                raise CancelRequested("cancelled by an operator")
            kind = kind_of(job)
            request = kind.request(job)
            try:
                if kind.threaded:
                    loop = asyncio.get_running_loop()
                    result = await loop.run_in_executor(
                        self.executor, kind.run, self.ctx, run, request
                    )
                else:
                    result = await kind.run(self.ctx, run, request)
            finally:  # before the job is finished: the queue is never idle while it is owed
                if kind.after is not None:
                    await self._finish_quietly(kind.after(self.ctx, job))
        except StopRequested as stop:
            await self._finish_quietly(queue.release(job.id, self.name))
            paused = isinstance(stop, PauseRequested)
            log.info("job %s: %s to the queue", job.id, "paused; back" if paused else "handed back")
            metrics.job_finished("handed_back")
        except OutsideWindow as closed:
            await self._finish_quietly(queue.release(job.id, self.name, closed.opens))
            log.info("job %s: %s; back to the queue until %s", job.id, closed, closed.opens)
            metrics.job_finished("window_closed")
        except CancelRequested:
            await self._finish_quietly(queue.finish_cancelled(job.id, self.name))
            log.info("job %s: cancelled", job.id)
            metrics.job_finished("cancelled")
        except LeaseLost as exc:
            log.warning("job %s: %s; leaving it to its new holder", job.id, exc)
            metrics.job_finished("lease_lost")
        except Exception as exc:
            if isinstance(run.interrupt, StopRequested):  # failed because we aborted it
                await self._finish_quietly(queue.release(job.id, self.name))
                log.info("job %s: rolled back and handed back to the queue", job.id)
                metrics.job_finished("handed_back")
            else:
                metrics.job_error(exc)
                log.error(
                    "job %s: attempt %d failed: %s",
                    job.id,
                    job.attempts,
                    error_line(exc),
                    exc_info=not isinstance(exc, EXPECTED_ERRORS),
                )
                s = self.settings
                failed = queue.fail_attempt(job, self.name, error_line(exc),
                                            s.retry_base_seconds, s.retry_max_seconds)  # fmt: skip
                status = await self._finish_quietly(failed)
                log.info("job %s: now %s", job.id, status)
                metrics.job_finished(
                    "requeued" if status == Status.QUEUED else str(status or "unknown")
                )
        else:
            if await self._finish_quietly(queue.complete(job.id, self.name, result.to_json())):
                log.info("job %s: completed, %s", job.id, result.said())
                metrics.job_finished("completed")
        finally:
            beat.cancel()
            self.runs.pop(job.id, None)
            self.wake.set()

    async def _finish_quietly(self, write: Awaitable[T], timeout: float = 60.0) -> T | None:
        """A finishing write; if the database is away (or does not answer within
        `timeout`: a dead flow), the lease expiry settles the job."""
        try:
            return await asyncio.wait_for(write, timeout)
        except (*db.CONNECTION_ERRORS, asyncpg.PostgresError, TimeoutError) as exc:
            log.error(
                "could not record the job's outcome (%s); its lease will expire", error_line(exc)
            )
            return None

    async def _heartbeat(self, run: JobRun) -> None:
        queue = self._queue()
        while True:
            await asyncio.sleep(self.settings.heartbeat_seconds)
            try:
                # not cut short by a timeout of ours: a cancel in the middle of the pool's
                # connect leaks its slot (a restart of PostgreSQL then starved the pool)
                held = await queue.heartbeat(run.job.id, self.name)
            except (*db.CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
                log.warning("job %s: heartbeat failed (%s)", run.job.id, error_line(exc))
                continue
            if run.interrupt is not None:
                continue  # the first reason to stop wins
            if held is None:
                run.interrupt = LeaseLost(f"job {run.job.id} is no longer held by {self.name}")
            elif held.cancel_requested:
                run.interrupt = CancelRequested("cancelled by an operator")
            elif held.paused:
                run.interrupt = PauseRequested("paused by an operator")
