"""How many PostgreSQL sessions a one-shot command opens, counted by the server
(pg_stat_database.sessions of the test's database, around each command).

The rule (docs/architecture.md, "A command's sessions"): a command's steps share one
asyncpg session per database (db.command_sessions), plus one for a lock held across the
command where the design needs it (restore and erase hold their tables), plus the ADBC
sessions its bulk steps open. Each command is held to what it opens now, so a step
that opens sessions of its own again fails here."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import asyncpg
import pytest

from archiver import db
from archiver.testing.reference import seed_orders
from archiver.testing.services import with_database
from tests.harness import Harness
from tests.support import sql_value, wait_until

# command -> sessions at most: its asyncpg session, the lock's, the ADBC driver's
# database object (one connection as it is made) and each bulk step's connection
LIMITS = {
    ("verify", "--table", "orders"): 1,
    ("restore", "--table", "orders", "--from", "2024-12-27", "--to", "2024-12-28"): 5,
    ("erase", "--table", "orders", "--where", "id = 7000"): 5,
    ("purge", "--table", "orders", "--older-than", "1 day"): 5,
}


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
def test_a_command_shares_its_sessions_across_its_steps(h: Harness) -> None:
    seed_orders(h.url, 8_000)
    for cutoff in ("2024-12-26", "2024-12-27", "2024-12-28", "2024-12-29"):  # four jobs
        h.archive("--table", "orders", "--before", cutoff, "--chunk-rows", "1000")
    opened = {}
    for args, limit in LIMITS.items():
        before = sessions(h)
        done = h.cli(*args)
        assert done.returncode == 0, done.stderr
        opened[args[0]] = sessions(h) - before
        assert opened[args[0]] <= limit, (args, opened)
    assert opened["verify"] == 1, opened  # four steps, one session


def test_the_shared_session_is_given_back_clean_and_replaced_when_in_doubt(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """db.command_sessions in-process: steps in turn share a backend; a nested step gets
    its own; a transaction left open is rolled back; a session a step failed on, or one
    idle past HELD_IDLE_SECONDS, is replaced; all closed when the command ends."""

    async def pid(conn: asyncpg.Connection) -> int:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))

    async def command() -> list[int]:
        seen = []
        async with db.command_sessions():
            async with db.connection(h.url) as conn:
                seen.append(await pid(conn))
                async with db.connection(h.url) as nested:
                    seen.append(await pid(nested))
            async with db.connection(h.url) as conn:
                seen.append(await pid(conn))
                await conn.execute("BEGIN")  # left open
            async with db.connection(h.url) as conn:
                assert not conn.is_in_transaction()
                seen.append(await pid(conn))
            with pytest.raises(RuntimeError, match="a step failed"):
                async with db.connection(h.url) as conn:
                    raise RuntimeError("a step failed")
            async with db.connection(h.url) as conn:
                seen.append(await pid(conn))
            monkeypatch.setattr(db, "HELD_IDLE_SECONDS", 0.0)
            async with db.connection(h.url) as conn:
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
