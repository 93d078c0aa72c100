"""Lock manners: an application holding a table lock that a job needs -- for a chunk's
DELETE, for its set-up, or as a copy's snapshot starts -- is waited for politely. The job
gives up after ARCHIVER_LOCK_TIMEOUT, rolls back, says which lock and who holds it, and
retries after a backoff without spending an attempt; once the lock is released the job
completes, every row exactly once. Row locks are test_row_locks.py's."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import asyncpg

from archiver.testing.reference import seed_orders
from tests.support import start_worker, wait_for_text
from tests.support.harness import Harness

CUTOFF = "2024-12-25"


@contextlib.contextmanager
def holding(url: str, application: str, statement: str) -> Iterator[None]:
    """An application's transaction holding the lock `statement` takes, from before the
    block starts until it ends."""
    locked, release = threading.Event(), threading.Event()

    def application_thread() -> None:
        async def hold() -> None:
            conn = await asyncpg.connect(url, server_settings={"application_name": application})
            async with conn.transaction():
                await conn.execute(statement)
                locked.set()
                await asyncio.to_thread(release.wait, 60)
            await conn.close()

        asyncio.run(hold())

    holder = threading.Thread(target=application_thread)
    holder.start()
    try:
        assert locked.wait(10)
        yield
    finally:
        release.set()
        holder.join(30)


def test_a_chunk_waits_politely_for_an_application_lock(h: Harness) -> None:
    seed_orders(h.url, 20_000)
    expected = {r["id"] for r in h.sql(f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'")}
    job_id = h.cli(
        "enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", "2000"
    ).stdout.strip()
    log = h.tmp / "worker.log"
    polite = {
        **h.env,
        "ARCHIVER_LOCK_TIMEOUT": "0.3",
        "ARCHIVER_FAILPOINTS": "after_commit=sleep:1",  # time to take the lock after chunk 1
    }
    worker = start_worker(polite, log=log)
    wait_for_text(log, "chunk 1 of")

    # SHARE: readers fine, no DELETE
    with holding(h.url, "billing-app", "LOCK TABLE orders IN SHARE MODE"):
        wait_for_text(log, "retrying in", timeout=30)
        wait_for_text(log, "(2 of 10", timeout=30)  # it keeps waiting, politely
        text = log.read_text()
        assert "waited 0.3s for a lock on public.orders held by pid" in text
        assert "ShareLock, billing-app: LOCK TABLE orders IN SHARE MODE" in text
        assert "the attempt is not spent" in text
        row = h.sql("SELECT status, attempts FROM background_jobs")[0]
        assert (row["status"], row["attempts"]) == ("running", 1)
    done = h.wait_for(job_id, "completed", timeout=120)
    assert done["attempts"] == 1 and done["last_error"] is None
    worker.terminate()
    worker.wait(30)
    h.exactly_once(expected)


def test_a_job_not_yet_started_waits_politely_for_an_application_lock(h: Harness) -> None:
    """A migration holding ACCESS EXCLUSIVE when a job starts: its set-up (the size
    estimate, the key bounds) gives up after ARCHIVER_LOCK_TIMEOUT and backs off like a
    chunk, the attempt not spent, instead of waiting behind the lock (noticed last round:
    it waited as long as the lock was held, its lease kept alive)."""
    seed_orders(h.url, 5_000)
    expected = {r["id"] for r in h.sql(f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'")}
    log = h.tmp / "worker.log"
    with holding(h.url, "migrator", "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE"):
        job_id = h.cli("enqueue", "--table", "orders", "--before", CUTOFF).stdout.strip()
        worker = start_worker({**h.env, "ARCHIVER_LOCK_TIMEOUT": "0.3"}, log=log)
        wait_for_text(log, "(2 of 10", timeout=30)
        text = log.read_text()
        assert "not started: waited 0.3s for a lock on public.orders held by pid" in text
        assert "AccessExclusiveLock, migrator" in text
        row = h.sql("SELECT status, attempts FROM background_jobs WHERE task_name = 'archive'")[0]
        assert (row["status"], row["attempts"]) == ("running", 1)
    done = h.wait_for(job_id, "completed", timeout=120)
    assert done["attempts"] == 1 and done["last_error"] is None
    worker.terminate()
    worker.wait(30)
    h.exactly_once(expected)


def test_a_copy_keeps_its_one_snapshot_while_an_application_takes_locks(h: Harness) -> None:
    """A copy job reads every chunk at the one snapshot it took when it started. Just
    after it took it, an application asks for an ACCESS EXCLUSIVE lock on a child table
    (giving up after 2 s, as a migration with a lock_timeout does); later, orders are
    deleted between two of its chunks. The copy must be the tables as they were at the
    job's start, the deleted orders and their lines included. Before the copy locked
    every table it reads with its snapshot, the application got its lock, the copy's
    first read of the child timed out, its rollback ended the snapshot, and the chunks
    after it read newer rows: the deleted orders were missing."""
    seed_orders(h.url, 8_000)
    h.sql(
        "CREATE TABLE lines (id bigint PRIMARY KEY, "
        "order_id bigint NOT NULL REFERENCES orders ON DELETE CASCADE, qty int); "
        "INSERT INTO lines SELECT 2 * id + k, id, k FROM orders, generate_series(0, 1) k; "
        "CREATE INDEX ON lines (order_id)"
    )
    cutoff = "2024-12-28"
    old = f"SELECT id FROM orders WHERE created_at < '{cutoff}'"
    orders = {r[0] for r in h.sql(old)}
    lines = {r[0] for r in h.sql(f"SELECT id FROM lines WHERE order_id IN ({old})")}
    (job,) = h.enqueue(
        "--table", "orders", "--before", cutoff, "--mode", "copy", "--with-children",
        "--chunk-rows", "400",
    )  # fmt: skip
    log = h.tmp / "worker.log"
    env = {
        **h.env,
        "ARCHIVER_LOCK_TIMEOUT": "0.3",
        # time for the application once the job holds its snapshot, and between chunks
        "ARCHIVER_FAILPOINTS": "copy_snapshot_open=sleep:1,after_commit=sleep:1",
    }
    worker = start_worker(env, "--burst", log=log)
    wait_for_text(log, "failpoint copy_snapshot_open reached")

    async def migration() -> None:
        conn = await asyncpg.connect(h.url, server_settings={"application_name": "billing-app"})
        try:
            async with conn.transaction():
                await conn.execute("SET LOCAL lock_timeout = '2s'")
                await conn.execute("LOCK TABLE lines IN ACCESS EXCLUSIVE MODE")
                await asyncio.sleep(2)
        except asyncpg.LockNotAvailableError:
            pass  # the copy holds its lock: the migration tries again later
        finally:
            await conn.close()

    app = threading.Thread(target=asyncio.run, args=(migration(),))
    app.start()
    wait_for_text(log, "failpoint after_commit reached", timeout=60)  # a chunk is in
    h.sql(f"DELETE FROM orders WHERE created_at < '{cutoff}' AND id > 7600")  # a later chunk's
    app.join(30)
    assert worker.wait(120) == 0
    h.wait_for(job, "completed")
    copied = h.archived()
    assert {r["id"] for r in copied if "order_id" not in r} == orders
    assert {r["id"] for r in copied if "order_id" in r} == lines
