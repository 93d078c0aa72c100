"""Lock manners: an application holding a lock that a chunk's DELETE needs is waited for
politely. The chunk gives up after ARCHIVER_LOCK_TIMEOUT, rolls back, says which lock and
who holds it, and retries after a backoff without spending an attempt; once the lock is
released the job completes, every row exactly once."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import asyncpg

from bench.reference import seed_orders
from tests.exactly_once import assert_exactly_once
from tests.support import Azurite, run_cli, sql, start_worker, wait_for_status, wait_for_text

CUTOFF = "2024-12-25"


def test_a_chunk_waits_politely_for_an_application_lock(
    env: dict[str, str], database_url: str, azurite: Azurite, container: str, tmp_path: Path
) -> None:
    seed_orders(database_url, 20_000)
    expected = {
        r["id"] for r in sql(database_url, f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'")
    }
    job_id = run_cli(
        env, "enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", "2000"
    ).stdout.strip()
    log = tmp_path / "worker.log"
    polite = {
        **env,
        "ARCHIVER_LOCK_TIMEOUT": "0.3",
        "ARCHIVER_FAILPOINTS": "after_commit=sleep:1",  # time to take the lock after chunk 1
    }
    worker = start_worker(polite, log=log)
    wait_for_text(log, "chunk 1 of")

    locked, release = threading.Event(), threading.Event()

    def application() -> None:
        async def hold() -> None:
            conn = await asyncpg.connect(
                database_url, server_settings={"application_name": "billing-app"}
            )
            async with conn.transaction():
                await conn.execute("LOCK TABLE orders IN SHARE MODE")  # readers fine, no DELETE
                locked.set()
                await asyncio.to_thread(release.wait, 60)
            await conn.close()

        asyncio.run(hold())

    holder = threading.Thread(target=application)
    holder.start()
    try:
        assert locked.wait(10)
        wait_for_text(log, "retrying in", timeout=30)
        wait_for_text(log, "(2 of 10", timeout=30)  # it keeps waiting, politely
        text = log.read_text()
        assert "waited 0.3s for a lock on public.orders held by pid" in text
        assert "ShareLock, billing-app: LOCK TABLE orders IN SHARE MODE" in text
        assert "the attempt is not spent" in text
        row = sql(database_url, "SELECT status, attempts FROM background_jobs")[0]
        assert (row["status"], row["attempts"]) == ("running", 1)
    finally:
        release.set()
        holder.join(30)
    done = wait_for_status(database_url, job_id, "completed", timeout=120)
    assert done["attempts"] == 1 and done["last_error"] is None
    worker.terminate()
    worker.wait(30)
    assert_exactly_once(database_url, azurite.connection_string, container, expected)
