"""The queue's contract (store.queue.Queue), run against PostgreSQL (PgQueue on a fresh
migrated database) and the in-memory queue (archiver.testing.queue): each scenario
holds for both, so tests of the worker on the memory queue say something true of the
real one. Time is not faked: leases expire with a lease of 0 seconds, a backoff ends at
once with a base of 0."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from archiver import db
from archiver.errors import InputError, JobStateError
from archiver.model import Queueing, Status
from archiver.operations import actions
from archiver.store import audit
from archiver.store.queue import PgQueue, Queue
from archiver.testing.queue import MemoryQueue

Scenario = Callable[[Queue], Awaitable[None]]
CONSOLE = actions.Actor("ops@example.com", "192.0.2.7")


@pytest.fixture(params=["postgres", "memory"])
def run(request: pytest.FixtureRequest) -> Callable[[Scenario], None]:
    """Runs a scenario on a fresh queue of the parameter's kind."""

    url = request.getfixturevalue("database_url") if request.param == "postgres" else ""

    @asynccontextmanager
    async def fresh() -> AsyncIterator[Queue]:
        if request.param == "memory":
            yield MemoryQueue()
            return
        pool = await db.create_pool(url, size=2)
        try:
            yield PgQueue(pool)
        finally:
            await pool.close()

    async def scenario(body: Scenario) -> None:
        async with fresh() as queue:
            await body(queue)

    return lambda body: asyncio.run(scenario(body))


async def job(
    q: Queue,
    key: str,
    *,
    lock_key: str | None,
    table: str = "public.t",
    priority: int = 0,
    max_attempts: int = 5,
    run_at: dt.datetime | None = None,
) -> uuid.UUID:
    """A new job of the bench's no-op kind on `table`."""
    how = Queueing(key, lock_key, priority, max_attempts, run_at)
    job_id, created = await q.enqueue("noop", {"table": table}, how)
    assert created
    return job_id


def test_a_twin_is_returned_while_queued_or_running_only(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        first, new = await q.enqueue("noop", {}, Queueing("k", None))
        assert new
        assert await q.enqueue("noop", {}, Queueing("k", None)) == (first, False)
        [claimed] = await q.claim("w", 5)
        assert await q.enqueue("noop", {}, Queueing("k", None)) == (first, False)
        assert await q.complete(claimed.id, "w", {"rows": 1})
        again, new = await q.enqueue("noop", {}, Queueing("k", None))
        assert new and again != first

    run(body)


def test_claims_go_by_urgency_one_per_table(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        low = await job(q, "low", lock_key=None)
        high = await job(q, "high", lock_key=None, priority=5)
        a1 = await job(q, "a1", lock_key="a")
        a2 = await job(q, "a2", lock_key="a")
        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        await job(q, "later", lock_key=None, run_at=later)
        claimed = await q.claim("w", 10)
        assert [j.id for j in claimed] == [high, low, a1]  # a2 waits for a1's table
        assert all(j.status == Status.RUNNING and j.locked_by == "w" for j in claimed)
        assert [j.attempts for j in claimed] == [1, 1, 1] and claimed[0].claims == 1
        assert await q.claim("w2", 10) == []  # a1 runs: a2 stays; `later` is not due
        assert await q.seconds_to_next_run() == 0  # a2 is due, held back by its table
        assert await q.complete(claimed[2].id, "w", {})
        [next_one] = await q.claim("w2", 10)
        assert next_one.id == a2
        waits = await q.seconds_to_next_run()  # only `later` is left
        assert waits is not None and 3500 < waits <= 3600

    run(body)


def test_a_claim_takes_at_most_its_limit(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        for i in range(5):
            await job(q, f"j{i}", lock_key=None)
        assert len(await q.claim("w", 2)) == 2
        assert len(await q.claim("w", 10)) == 3
        assert await q.claim("w", 10) == [] and await q.seconds_to_next_run() is None

    run(body)


def test_only_the_holder_finishes_a_job(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        for i in range(3):
            await job(q, f"j{i}", lock_key=None)
        mine = [j.id for j in await q.claim("w", 2)]
        [theirs] = [j.id for j in await q.claim("other", 5)]
        assert not await q.complete(theirs, "w", {})
        assert await q.heartbeat(theirs, "w") is None
        assert not await q.release(theirs, "w")
        assert await q.complete_many([*mine, theirs], "w") == 2
        assert (await q.get(mine[0])).status == Status.COMPLETED
        assert (await q.get(theirs)).status == Status.RUNNING
        assert await q.finish_cancelled(theirs, "other")
        assert (await q.get(theirs)).status == Status.CANCELLED

    run(body)


def test_failed_attempts_back_off_then_fail_keeping_ten_errors(
    run: Callable[[Scenario], None],
) -> None:
    async def body(q: Queue) -> None:
        job_id = await job(q, "j", lock_key=None, max_attempts=12)
        for attempt in range(1, 13):
            [claimed] = await q.claim("w", 1)
            assert claimed.attempts == attempt
            status = await q.fail_attempt(claimed, "w", f"boom {attempt}", base=0, cap=0)
            assert status == (Status.FAILED if attempt == 12 else Status.QUEUED)
        failed = await q.get(claimed.id)
        assert failed.id == job_id and failed.last_error == "boom 12"
        assert [e["error"] for e in failed.errors] == [f"boom {n}" for n in range(3, 13)]
        assert failed.finished_at is not None and await q.claim("w", 1) == []
        assert await q.fail_attempt(failed, "w", "late") is None  # no longer held

    run(body)


def test_a_backoff_keeps_a_job_out_until_it_ends(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        await job(q, "j", lock_key=None)
        [claimed] = await q.claim("w", 1)
        assert await q.fail_attempt(claimed, "w", "boom", base=3600, cap=3600) == Status.QUEUED
        # full jitter: anywhere in [0, 3600] seconds; 0 is as likely as any other
        waits = await q.seconds_to_next_run()
        assert waits is not None and waits <= 3600

    run(body)


def test_a_release_does_not_spend_the_attempt(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        await job(q, "j", lock_key=None)
        [claimed] = await q.claim("w", 1)
        assert await q.release(claimed.id, "w")
        [again] = await q.claim("w", 1)
        assert again.attempts == 1 and again.claims == 2  # the token of its file names moves on
        until = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
        assert await q.release(again.id, "w", until)  # a maintenance window closed
        assert await q.claim("w", 1) == []
        assert (await q.get(again.id)).run_at == until

    run(body)


def test_an_expired_lease_is_rescued(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        requeued = await job(q, "a", lock_key=None)
        cancelled = await job(q, "b", lock_key=None)
        failed = await job(q, "c", lock_key=None, max_attempts=1)
        claimed = await q.claim("dead", 3)
        assert await q.cancel(claimed[1].id) == Status.RUNNING  # asked; its worker is gone
        assert await q.rescue_expired(3600) == []  # leases still fresh
        await asyncio.sleep(0.01)
        rescued = dict(await q.rescue_expired(0))
        assert rescued == {
            requeued: Status.QUEUED,
            cancelled: Status.CANCELLED,
            failed: Status.FAILED,
        }
        back = await q.get(claimed[0].id)
        assert back.locked_by is None and "dead lost its lease" in (back.last_error or "")
        [kept] = back.errors  # the lost lease is the attempt's error, as a failure's is
        assert kept["attempt"] == 1 and kept["worker"] == "dead"
        assert kept["error"] == back.last_error
        assert await q.heartbeat(back.id, "dead") is None  # the old holder learns it
        assert not await q.complete(back.id, "dead", {})
        [again] = await q.claim("alive", 5)
        assert again.id == requeued and again.attempts == 2

    run(body)


def test_heartbeats_carry_cancel_and_pause(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        await job(q, "a", lock_key=None, table="public.a")
        await job(q, "b", lock_key=None, table="public.b")
        first, second = await q.claim("w", 2)
        lease = await q.heartbeat(first.id, "w")
        assert lease is not None and not lease.cancel_requested and not lease.paused
        await q.cancel(first.id)
        assert await q.pause_table(second.payload["table"])
        assert not await q.pause_table(second.payload["table"])
        lease = await q.heartbeat(first.id, "w")
        assert lease is not None and lease.cancel_requested and not lease.paused
        lease = await q.heartbeat(second.id, "w")
        assert lease is not None and lease.paused and not lease.cancel_requested

    run(body)


def test_paused_jobs_and_tables_are_not_claimed(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        one = await job(q, "one", lock_key=None, table="public.x")
        other = await job(q, "other", lock_key=None, table="public.y")
        assert await q.pause_job(one) == Status.QUEUED
        assert await q.pause_table("public.y")
        assert await q.claim("w", 5) == [] and await q.seconds_to_next_run() is None
        await q.resume_job(one)
        with pytest.raises(JobStateError, match="is not paused"):
            await q.resume_job(one)
        assert [j.id for j in await q.claim("w", 5)] == [one]
        assert await q.resume_table("public.y") and not await q.resume_table("public.y")
        assert [j.id for j in await q.claim("w", 5)] == [other]

    run(body)


def test_cancel_and_retry_by_status(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        queued = await job(q, "same", lock_key=None)
        assert await q.cancel(queued) == Status.CANCELLED
        with pytest.raises(JobStateError, match="only queued or running jobs can be cancelled"):
            await q.cancel(queued)
        twin = await job(q, "same", lock_key=None)  # the same work, queued
        with pytest.raises(JobStateError, match="queued or running as another job"):
            await q.retry(queued)
        with pytest.raises(JobStateError, match="only failed or cancelled jobs can be retried"):
            await q.retry(twin)
        await q.cancel(twin)
        await q.retry(queued)
        again = await q.get(queued)
        assert again.status == Status.QUEUED and again.attempts == 0
        assert again.cancel_requested_at is None and again.finished_at is None
        with pytest.raises(JobStateError, match="no job"):
            await q.get(uuid.UUID(int=1))

    run(body)


def test_pruning_takes_finished_jobs_only_a_batch_at_a_time(
    run: Callable[[Scenario], None],
) -> None:
    async def body(q: Queue) -> None:
        for i in range(5):
            await job(q, f"j{i}", lock_key=None)
        claimed = await q.claim("w", 4)
        await q.complete_many([j.id for j in claimed[:3]], "w")
        assert await q.prune_finished(30) == 0  # finished just now
        await asyncio.sleep(0.01)
        # a retention of -1 day: everything finished is older than that
        assert await q.prune_finished(-1, batch=2) == 2
        assert await q.prune_finished(-1, batch=2) == 1
        assert await q.prune_finished(-1) == 0
        statuses = sorted([(await q.get(j.id)).status for j in claimed[3:]])
        assert statuses == [Status.RUNNING]

    run(body)


# -- an operator's actions (archiver.operations.actions), the same over both queues ---------


async def audited(q: Queue, target: str) -> list[tuple[str, str, str]]:
    """(action, outcome, via) of the audit rows about `target`, oldest first."""
    if isinstance(q, MemoryQueue):
        return [(a, said, "cli" if who is None else "console")
                for a, t, said, who, _ in q.actions if t == target]  # fmt: skip
    assert isinstance(q, PgQueue)
    async with q.pool.acquire() as conn:
        rows = await audit.of_target(conn, target)
    return [(r["action"], r["outcome"], r["via"]) for r in reversed(rows)]


def test_an_operator_acts_on_a_job_and_each_action_is_audited(
    run: Callable[[Scenario], None],
) -> None:
    async def body(q: Queue) -> None:
        first = await job(q, "a", lock_key="public.t")
        target = f"job {first}"
        assert await actions.on_job(q, first, "pause", actions.CLI) == "paused"
        assert await q.claim("w", 5) == []
        assert await actions.on_job(q, first, "resume", actions.CLI) == "resumed"
        said = await actions.on_job(q, first, "throttle", CONSOLE, {"max_rows_per_second": 100})
        assert said == 'limits: {"max_rows_per_second": 100}'
        assert (await q.get(first)).limits == {"max_rows_per_second": 100}
        said = await actions.on_job(q, first, "throttle", CONSOLE, {"max_rows_per_second": None})
        assert said == "limits: none"
        assert await actions.on_job(q, first, "cancel", actions.CLI) == "cancelled"
        assert await actions.on_job(q, first, "retry", actions.CLI) == "queued again"
        [claimed] = await q.claim("w", 5)
        assert await actions.on_job(q, first, "cancel", actions.CLI) == (
            "will stop at its next chunk boundary"
        )
        assert await q.finish_cancelled(claimed.id, "w")
        with pytest.raises(JobStateError):  # finished: no limits change, nothing audited
            await actions.on_job(q, first, "throttle", actions.CLI, {"max_rows_per_second": 5})
        with pytest.raises(InputError):  # a throttle without limits
            await actions.on_job(q, first, "throttle", actions.CLI, {})
        with pytest.raises(InputError):
            await actions.on_job(q, first, "delete", actions.CLI)
        assert await audited(q, target) == [
            ("pause", "paused", "cli"),
            ("resume", "resumed", "cli"),
            ("throttle", 'limits: {"max_rows_per_second": 100}', "console"),
            ("throttle", "limits: none", "console"),
            ("cancel", "cancelled", "cli"),
            ("retry", "queued again", "cli"),
            ("cancel", "will stop at its next chunk boundary", "cli"),
        ]

    run(body)


def test_a_closed_window_moves_a_queued_job_to_its_opening(
    run: Callable[[Scenario], None],
) -> None:
    async def body(q: Queue) -> None:
        first = await job(q, "a", lock_key="public.t")
        now = dt.datetime.now(dt.UTC)
        opens = (now + dt.timedelta(hours=2)).strftime("%H:%M")
        closes = (now + dt.timedelta(hours=3)).strftime("%H:%M")
        await actions.on_job(q, first, "throttle", actions.CLI, {"window": f"{opens}-{closes}"})
        assert (await q.get(first)).run_at > now + dt.timedelta(hours=1)
        assert await q.claim("w", 5) == []

    run(body)


def test_an_operator_acts_on_many_jobs_and_on_a_table(run: Callable[[Scenario], None]) -> None:
    async def body(q: Queue) -> None:
        failed = await job(q, "a", lock_key="public.a", max_attempts=1)
        [claimed] = await q.claim("w", 5)
        assert await q.fail_attempt(claimed, "w", "boom", base=0) == Status.FAILED
        queued = await job(q, "b", lock_key="public.b", table="public.b")
        said = await actions.on_jobs(q, [failed, queued], "retry", CONSOLE, "status = failed")
        assert said == "1 of 2 jobs"  # the queued one is not retried: skipped
        assert (await q.get(failed)).status == Status.QUEUED
        assert await audited(q, "status = failed") == [("bulk retry", "1 of 2 jobs", "console")]
        with pytest.raises(InputError):  # a throttle's limits are per job
            await actions.on_jobs(q, [queued], "throttle", CONSOLE, "all")

        assert await actions.on_table(q, "public.b", "pause", actions.CLI) == "paused"
        assert await actions.on_table(q, "public.b", "pause", actions.CLI) == "was already paused"
        assert [j.id for j in await q.claim("w", 5)] == [failed]  # public.b's job waits
        assert await actions.on_table(q, "public.b", "resume", actions.CLI) == "resumed"
        assert await actions.on_table(q, "public.b", "resume", actions.CLI) == "was not paused"
        assert [j.id for j in await q.claim("w", 5)] == [queued]
        assert await audited(q, "table public.b") == [
            ("pause", "paused", "cli"),
            ("pause", "was already paused", "cli"),
            ("resume", "resumed", "cli"),
            ("resume", "was not paused", "cli"),
        ]

    run(body)
