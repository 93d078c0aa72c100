"""How many PostgreSQL sessions a one-shot command opens, counted by the server
(pg_stat_database.sessions of the test's database, around each command).

The rule (docs/architecture.md, "A command's sessions"): a command's steps share one
asyncpg session per database (db.command_sessions), plus one for a lock held across the
command where the design needs it (restore and erase hold their tables), plus the ADBC
sessions its bulk steps open. Each command is held to what it opens now, so a step
that opens sessions of its own again fails here."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import with_database
from tests.harness import Harness
from tests.support import sql_value

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
