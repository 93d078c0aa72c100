"""How many PostgreSQL sessions a one-shot command and a worker open, counted by the
server (pg_stat_database.sessions of the test's database, around each command or run).

The rule (docs/architecture.md, "The context"): a process works in one context, made
where it starts (archiver.context). A command's steps share one asyncpg session and one
ADBC connection per database, plus one session for the lock a command holds across its
steps where the design needs it (restore, erase, purge and the tier commands hold their
tables against compaction); a worker's jobs of every kind use its pool, its LISTEN
session and its ADBC connections. The ADBC driver's database object costs one session more as it is made
(the driver's PostgresDatabase::Init connects to read the server's version), once per
command and database. Here one database holds the queue, the catalog and the source."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import asyncpg
import pytest

from archiver import context
from archiver.config import Settings
from archiver.context import Context
from archiver.kinds.compact import CompactRequest
from archiver.kinds.orphans import OrphansRequest
from archiver.kinds.purge import PurgeRequest
from archiver.store import jobs
from archiver.testing.reference import seed_orders
from archiver.testing.services import with_database
from tests.support import sql, sql_value, wait_until
from tests.support.harness import Harness

ASYNCPG, ADBC, DRIVER_INIT, LOCK = 1, 1, 1, 1
# command -> the sessions it may open, in order (rehydrate before verify: the files are
# in the Archive tier until then)
LIMITS = {
    ("rehydrate", "--table", "orders", "--tier", "Cool"): ASYNCPG + ADBC + DRIVER_INIT + LOCK,
    ("verify", "--table", "orders"): ASYNCPG,
    ("restore", "--table", "orders", "--from", "2024-12-27", "--to", "2024-12-28"): (
        ASYNCPG + ADBC + DRIVER_INIT + LOCK
    ),
    ("erase", "--table", "orders", "--where", "id = 7000"): ASYNCPG + ADBC + DRIVER_INIT + LOCK,
    ("erase", "--table", "customers", "--where", "id = 70", "--with-children"): (
        ASYNCPG + ADBC + DRIVER_INIT + LOCK
    ),
    ("purge", "--table", "orders", "--older-than", "1 day"): ASYNCPG + ADBC + DRIVER_INIT + LOCK,
}
# a parent and a child, archived together (--with-children)
AGGREGATE = """
CREATE TABLE customers (id bigint PRIMARY KEY, created_at date NOT NULL, name text);
CREATE TABLE visits (id bigint PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES customers ON DELETE CASCADE, note text);
CREATE INDEX ON visits (customer_id);
INSERT INTO customers
    SELECT i, DATE '2023-01-01' + (i % 300), 'customer ' || i FROM generate_series(1, 4000) i;
INSERT INTO visits
    SELECT i * 10 + v, i, 'visit' FROM generate_series(1, 4000) i, generate_series(1, 2) v;
"""


def sessions(h: Harness) -> int:
    """The server's count of sessions made to the test's database so far, settled (read
    from another database: a reading is no session of the test's)."""
    admin, name = with_database(h.url, "postgres"), urlsplit(h.url).path.lstrip("/")
    query = "SELECT sessions FROM pg_stat_database WHERE datname = $1"
    last = -1
    for _ in range(50):
        now = int(sql_value(admin, query, name))
        if now == last:
            return now
        last = now
        time.sleep(0.2)
    return last


@pytest.mark.slow
def test_a_command_opens_one_session_of_each_driver_per_database(h: Harness) -> None:
    h = h.with_env(ARCHIVER_DELTA="true", ARCHIVER_ACCESS_TIER="Cool")
    seed_orders(h.url, 8_000)
    sql(h.url, AGGREGATE)
    for cutoff in ("2024-12-26", "2024-12-27", "2024-12-28", "2024-12-29"):  # four jobs each
        h.archive("--table", "orders", "--before", cutoff, "--chunk-rows", "1000")
    for cutoff in ("2023-03-01", "2023-06-01", "2023-09-01", "2023-11-01"):
        h.archive("--table", "customers", "--before", cutoff, "--with-children")
    assert h.cli("verify", "--table", "orders").returncode == 0
    assert h.cli("tier", "--table", "orders", "--tier", "Archive").returncode == 0
    opened = {}
    for args, limit in LIMITS.items():
        before = sessions(h)
        done = h.cli(*args)
        assert done.returncode == 0, done.stderr
        opened[args] = sessions(h) - before
        assert opened[args] <= limit, (args, opened)
    assert "visits" in h.cli("erase", "--table", "customers", "--where", "id = 71",
                             "--with-children", "--dry-run").stdout  # fmt: skip


# A worker's sessions, concurrency 1: its pool of the queue database (concurrency + 3),
# its LISTEN session, and its ADBC connections (an archive job's source, catalog and
# second source reader at once), with the driver's database object's one.
WORKER_POOL, LISTEN, WORKER_ADBC = 1 + 3, 1, 3


async def _queue_every_kind(url: str, storage_url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for request in (
            CompactRequest("public.orders", storage_url, 64 << 20, "1 year", 0),
            OrphansRequest(storage_url),
            PurgeRequest("public.orders", "1 day"),
        ):
            await jobs.enqueue_request(conn, request)
    finally:
        await conn.close()


@pytest.mark.slow
def test_a_worker_runs_jobs_of_every_kind_on_its_own_pools(h: Harness) -> None:
    """Archive and publish jobs, then compact, orphans and purge jobs, each run by a burst
    worker whose sessions the server counts: every job takes its sessions from the
    worker's context, none opens its own."""
    h = h.with_env(ARCHIVER_DELTA="true")
    seed_orders(h.url, 8_000)
    for cutoff in ("2024-12-26", "2024-12-27", "2024-12-28", "2024-12-29"):
        h.enqueue("--table", "orders", "--before", cutoff, "--chunk-rows", "500")
    before = sessions(h)
    h.drain()
    archived = sessions(h) - before
    assert sql_value(h.url, "SELECT count(*) FROM archive_files") >= 8
    assert sql_value(h.url, "SELECT count(*) FROM background_jobs WHERE task_name = 'publish'")
    storage_url = str(Settings.from_env(h.env).storage_location())
    asyncio.run(_queue_every_kind(h.url, storage_url))
    before = sessions(h)
    h.drain()
    kept = sessions(h) - before
    done = sql(h.url, "SELECT task_name, status FROM background_jobs ORDER BY created_at")
    assert {(r[0], r[1]) for r in done} >= {
        ("archive", "completed"), ("publish", "completed"), ("compact", "completed"),
        ("orphans", "completed"), ("purge", "completed"),
    }, done  # fmt: skip
    assert sql_value(h.url, "SELECT count(*) FROM archive_ledger WHERE operation = 'purge'")
    limit = WORKER_POOL + LISTEN + WORKER_ADBC + DRIVER_INIT
    assert max(archived, kept) <= limit, {"archive and publish": archived, "the rest": kept}


def test_the_shared_session_is_given_back_clean_and_replaced_when_in_doubt(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command's context in-process: steps in turn share a backend; a nested step gets
    its own; a transaction left open is rolled back; a session a step failed on, or one
    idle past HELD_IDLE_SECONDS, is replaced; all closed when the command ends."""

    async def pid(conn: asyncpg.Connection) -> int:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))

    async def command() -> list[int]:
        seen = []
        async with Context(Settings.from_env(h.env), shared_sessions=True) as ctx:
            async with ctx.connection(h.url) as conn:
                seen.append(await pid(conn))
                async with ctx.connection(h.url) as nested:
                    seen.append(await pid(nested))
            async with ctx.connection(h.url) as conn:
                seen.append(await pid(conn))
                await conn.execute("BEGIN")  # left open
            async with ctx.connection(h.url) as conn:
                assert not conn.is_in_transaction()
                seen.append(await pid(conn))
            with pytest.raises(RuntimeError, match="a step failed"):
                async with ctx.connection(h.url) as conn:
                    raise RuntimeError("a step failed")
            async with ctx.connection(h.url) as conn:
                seen.append(await pid(conn))
            monkeypatch.setattr(context, "HELD_IDLE_SECONDS", 0.0)
            async with ctx.connection(h.url) as conn:
                seen.append(await pid(conn))
        return seen

    first, nested, again, after_open, after_failure, after_idle = asyncio.run(command())
    assert nested != first and first == again == after_open
    assert after_failure != first and after_idle != after_failure
    query = "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    wait_until(
        lambda: not {r[0] for r in h.sql(query)} & {first, nested, after_failure, after_idle},
        timeout=10,
        what="the command's sessions closed at its end",
    )


def test_a_shared_session_left_holding_an_advisory_lock_is_closed(h: Harness) -> None:
    async def command() -> tuple[int, int]:
        async with Context(Settings.from_env(h.env), shared_sessions=True) as ctx:
            async with ctx.connection(h.url) as conn:
                locked = int(await conn.fetchval("SELECT pg_backend_pid()"))
                await conn.execute("SELECT pg_advisory_lock(4343)")
            async with ctx.connection(h.url) as conn:
                return locked, int(await conn.fetchval("SELECT pg_backend_pid()"))

    locked, after = asyncio.run(command())
    assert after != locked
    held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4343"
    wait_until(lambda: h.value(held) == 0, timeout=10, what="the lock's session closed")


def test_a_commands_bulk_connection_is_shared_only_when_given_back_clean(h: Harness) -> None:
    """A command's context in-process: steps in turn share one ADBC connection; a
    nested step gets its own; one given back holding a session advisory lock (a ledger
    operation's, a publisher's) or after a failure is closed, never handed on."""
    from archiver import bulk

    def pid(conn: bulk.BulkConnection) -> int:
        return int(bulk.fetch_and_rollback(conn, "SELECT pg_backend_pid()")[0][0])

    ctx = Context(Settings.from_env(h.env), shared_sessions=True)
    try:
        with ctx.bulk(h.url) as conn:
            first = pid(conn)
            with ctx.bulk(h.url) as nested:
                assert pid(nested) != first
        with ctx.bulk(h.url) as conn:
            assert pid(conn) == first
            bulk.run_in_transaction(conn, "SELECT pg_advisory_lock(4242)")
            conn.commit()
        with ctx.bulk(h.url) as conn:
            second = pid(conn)
            assert second != first
        with (
            pytest.raises(RuntimeError, match="a step failed"),
            ctx.bulk(h.url) as failing,
        ):
            assert pid(failing) == second
            raise RuntimeError("a step failed")
        with ctx.bulk(h.url) as conn:
            assert pid(conn) not in (first, second)
    finally:
        asyncio.run(ctx.aclose())
    held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242"
    wait_until(lambda: h.value(held) == 0, timeout=10, what="the lock's session closed")
