"""An interrupted command stops, on both sides (archiver.interrupt). Each long command
family is started while the test holds a lock its statement needs, so the command is
mid-statement in PostgreSQL (seen there, waiting on the lock) when SIGINT or SIGTERM
arrives: it must exit at once, non-zero, with one line, and leave no statement of its
own running; the archive as it was (nothing committed), every row once."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
import pytest

from archiver.testing.reference import seed_orders
from tests.support import archiver_cmd, start_process, wait_until
from tests.support.harness import Harness, Worlds, cloned

CUTOFF = "2024-12-28"  # of 8,000 seeded orders: 3,680 older
EVERY_FILE = "LOCK TABLE archive_files IN ACCESS EXCLUSIVE MODE"
FAMILIES = [  # (command, the lock that stops its statement, the signal)
    (["restore", "--table", "orders", "--from", "2024-12-27", "--to", CUTOFF],
     "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE", signal.SIGINT),
    (["restore", "--table", "orders", "--from", "2024-12-27", "--to", CUTOFF],
     "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE", signal.SIGTERM),
    (["erase", "--table", "orders", "--where", "id = 8000"],
     "LOCK TABLE archive_files IN EXCLUSIVE MODE", signal.SIGINT),
    (["purge", "--table", "orders", "--older-than", "1 day"],
     "LOCK TABLE archive_files IN EXCLUSIVE MODE", signal.SIGTERM),
    (["publish", "--table", "orders"],
     "LOCK TABLE delta_tables IN ACCESS EXCLUSIVE MODE", signal.SIGINT),
    (["verify", "--table", "orders"], EVERY_FILE, signal.SIGTERM),
    (["query", "--with-live", "SELECT count(*) FROM orders"], EVERY_FILE, signal.SIGINT),
    (["query", "SELECT count(*) FROM orders"], EVERY_FILE, signal.SIGTERM),
    (["enqueue", "--table", "orders", "--before", "2024-12-30", "--dry-run"],
     "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE", signal.SIGTERM),
]  # fmt: skip


def archived_orders(world: Harness) -> None:
    seed_orders(world.url, 8_000)
    world.with_env(ARCHIVER_DELTA="true").archive(
        "--table", "orders", "--before", CUTOFF, "--chunk-rows", "1000"
    )


@pytest.fixture
def archived(h: Harness, worlds: Worlds) -> Iterator[Harness]:
    """A copy of 8,000 orders, the old ones archived, built once (Worlds)."""
    world, _ = worlds.get(archived_orders)
    with cloned(world, h.with_env(ARCHIVER_DELTA="true")) as mine:
        yield mine


@contextmanager
def holding(h: Harness, lock: str) -> Iterator[None]:
    """`lock` taken in a transaction of the test's own, held until the block ends."""
    import asyncio

    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(h.url))
    try:
        loop.run_until_complete(conn.execute("BEGIN"))
        loop.run_until_complete(conn.execute(lock))
        yield
    finally:
        loop.run_until_complete(conn.close())
        loop.close()


def statements_of(h: Harness, command: str, pid: int) -> list[str]:
    """What the command's sessions are doing in PostgreSQL (application_name names it).
    A session still starting up has no state or query yet (NULL): concat_ws skips them."""
    rows = h.sql(
        "SELECT concat_ws(' ', coalesce(wait_event_type, ''), state || ':', query) "
        "FROM pg_stat_activity WHERE application_name = $1",
        f"archiver {command} {pid}",
    )
    return [r[0] for r in rows]


@pytest.mark.parametrize(
    "family",
    range(len(FAMILIES)),
    ids=[f"{a[0]}{'-with-live' if '--with-live' in a else ''}-{s.name}" for a, _, s in FAMILIES],
)
def test_a_signal_mid_statement_stops_the_command_and_its_statement(
    archived: Harness, family: int
) -> None:
    d = archived
    args, lock, sig = FAMILIES[family]
    before = {r["path"] for r in d.sql("SELECT path FROM archive_files")}
    log = d.tmp / f"{args[0]}.log"
    with holding(d, lock):
        proc = start_process(archiver_cmd(*args), d.env, log)
        wait_until(
            lambda: any(s.startswith("Lock active") for s in statements_of(d, args[0], proc.pid)),
            timeout=60,
            what=f"archiver {args[0]} waiting on the lock in PostgreSQL",
        )
        proc.send_signal(sig)
        try:
            code = proc.wait(10)  # blocked on a lock nobody releases: only the signal ends it
        except subprocess.TimeoutExpired:
            pytest.fail(f"archiver {args[0]} still running 10 s after {sig.name}")
        wait_until(
            lambda: not statements_of(d, args[0], proc.pid),
            timeout=5,
            what="the command's sessions to end",
        )  # while the lock is still held: ended by the command, not by the lock
    assert code == 128 + sig, log.read_text()
    said = log.read_text()  # its progress lines, then one line for the interruption
    errors = [line for line in said.splitlines() if line.startswith("archiver: error:")]
    assert len(errors) == 1 and f"{args[0]} interrupted ({sig.name})" in errors[0], said
    assert said.splitlines()[-1] == errors[0] and "Traceback" not in said, said
    assert {r["path"] for r in d.sql("SELECT path FROM archive_files")} == before
    assert d.value("SELECT count(*) FROM archive_ledger WHERE status = 'done'") == 0
    # what it left is what a crash leaves: a worker's next ledger sweep finishes it
    d.drain()
    assert d.value("SELECT count(*) FROM archive_ledger WHERE status = 'running'") == 0
    d.exactly_once(set(range(1, 8_001)))
    after = d.cli("verify", "--table", "orders")
    assert after.returncode == 0, after.stdout + after.stderr


def test_what_killed_commands_and_workers_left_goes_at_the_next_start(h: Harness) -> None:
    """A restore and a worker SIGKILLed mid-way (the worker's chunk file in its scratch
    directory) leave their directories in TMPDIR; the next archiver process to
    start removes them, and its own goes when it ends. (On a84fc94 every SIGKILLed
    command left an `archiver-<command>-…` directory, and a worker its `tmp…` ones.)"""
    seed_orders(h.url, 8_000)
    h.archive("--table", "orders", "--before", CUTOFF, "--chunk-rows", "1000")
    h.enqueue("--table", "orders", "--before", "2024-12-30", "--chunk-rows", "1000")
    started = []
    for args, point in (
        (["restore", "--table", "orders", "--from", "2024-12-27", "--to", CUTOFF],
         "restore_before_commit"),
        (["worker"], "before_commit"),
    ):  # fmt: skip
        log = h.tmp / f"{args[0]}.log"
        proc = start_process(
            archiver_cmd(*args), {**h.env, "ARCHIVER_FAILPOINTS": f"{point}=pause"}, log
        )
        wait_until(lambda log=log, point=point: f"failpoint {point}" in log.read_text(), 60)
        started.append((args[0], proc))
    for _, proc in started:  # both at once: a process starting removes the dead's
        proc.kill()
        proc.wait(10)
    killed = [(command, proc.pid) for command, proc in started]
    left = sorted(p.name for p in h.tmp.glob("archiver-*"))
    assert [n.split("-")[1:3] for n in left] == [[c, str(pid)] for c, pid in killed], left
    assert any(next(h.tmp.glob("archiver-worker-*")).rglob("*.parquet"))  # its chunk's file
    status = h.cli("status")
    assert status.returncode == 0, status.stderr
    assert list(h.tmp.glob("archiver-*")) == [] and list(h.tmp.glob("tmp*")) == []
