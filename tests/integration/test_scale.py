"""A job costs what it archives, not what the table holds: PostgreSQL's own counters
(pg_stat_user_tables, pg_stat_user_indexes), read around an enqueue and its job, count
the tuples and index entries a job read — a count, not a timing, so it holds on a busy
machine. Unbounded, a job's last chunk walked the key's index through every newer row
looking for more old ones (8,960,332 tuples for a day of a 10M-row table)."""

from __future__ import annotations

import pytest

from archiver.testing.reference import seed_orders
from tests.support.harness import Harness

ROWS = 100_000
OLD = 1_000  # rows older than the cutoff
PER_ROW = 10  # tuples read per archived row, at most (the bound)
ALLOWANCE = 1_000  # and a fixed allowance: a chunk's look past its last key, the planner

READ = """
SELECT (SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)
        FROM pg_stat_user_tables WHERE relid = $1::regclass),
       (SELECT coalesce(sum(idx_tup_read), 0)::bigint
        FROM pg_stat_user_indexes WHERE relid = $1::regclass)
"""


def counters(h: Harness, table: str) -> tuple[int, int]:
    """(heap tuples read, index entries read) of `table` so far; the job's backends have
    exited, and so reported them. The test's own statements run on a session kept open
    (tests.support.sql), whose counts PostgreSQL sends on at most once a second: flushed
    first, or its own reads before an enqueue land in the job's figures."""
    h.sql("SELECT pg_stat_force_next_flush()")
    row = h.sql(READ, table)[0]
    return int(row[0]), int(row[1])


def read_by(h: Harness, table: str, *enqueue: str) -> tuple[int, int]:
    """What an enqueue of `table` and its job read of it: (heap tuples, index entries)."""
    before = counters(h, table)
    h.archive("--table", table, *enqueue)
    after = counters(h, table)
    return after[0] - before[0], after[1] - before[1]


def events(h: Harness) -> None:
    """A table whose keys rise with time (identity key, oldest rows first), and the
    reference orders table, whose oldest rows have the highest keys."""
    h.sql(
        "CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "at timestamptz NOT NULL, body text);"
        "CREATE INDEX ON events (at);"
        f"INSERT INTO events (at, body) SELECT timestamptz '2024-01-01' + g * interval '1 minute', "
        f"repeat('x', 50) FROM generate_series(1, {ROWS}) g;"
        "ANALYZE events"
    )


@pytest.mark.parametrize("mode", ["move", "copy"])
def test_a_job_reads_about_the_rows_it_archives(h: Harness, mode: str) -> None:
    seed_orders(h.url, ROWS)  # row g is g minutes before 2025-01-01: old rows last
    events(h)
    # the OLD oldest rows of each: those older than the OLD-th oldest's successor
    cases = [
        (
            "orders",
            "created_at",
            h.value("SELECT created_at FROM orders WHERE id = $1", ROWS - OLD),
        ),
        ("events", "at", h.value("SELECT at FROM events WHERE id = $1", OLD + 1)),
    ]
    for table, column, before in cases:
        old = h.value(f"SELECT count(*) FROM {table} WHERE {column} < $1", before)
        assert old == OLD
        heap, index = read_by(
            h,
            table,
            "--column",
            column,
            "--before",
            before.isoformat(),
            "--mode",
            mode,
            "--chunk-rows",
            "300",
        )
        assert (
            h.value(
                "SELECT sum(row_count) FROM archive_files WHERE source_table = $1",
                f"public.{table}",
            )
            == OLD
        )
        limit = PER_ROW * OLD + ALLOWANCE
        assert heap <= limit, f"{table}, {mode}: {heap:,} tuples read for {OLD:,} rows"
        assert index <= limit, f"{table}, {mode}: {index:,} index entries for {OLD:,} rows"
        # nothing to archive: a look at the cutoff column's index, not at the table. The
        # planner, asked about a cutoff below its histogram, reads the index's lowest
        # entries for the real minimum, and walks past the ones the job before deleted
        # (not vacuumed yet): up to OLD of them.
        heap, index = read_by(
            h, table, "--column", column, "--before", "2000-01-01", "--mode", mode
        )
        assert heap + index <= ALLOWANCE + OLD, f"{table}, {mode}, none old: {heap:,} + {index:,}"


def test_without_an_index_on_the_cutoff_column_enqueue_and_the_dry_run_warn(
    h: Harness,
) -> None:
    h.sql(
        "CREATE TABLE audit (id bigint PRIMARY KEY, at date NOT NULL);"
        "INSERT INTO audit SELECT g, date '2020-01-01' + g FROM generate_series(1, 100) g"
    )
    args = ["--table", "audit", "--column", "at", "--before", "2020-02-01"]
    dry = h.cli("enqueue", *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "warning        no index on public.audit leads with at" in dry.stdout, dry.stdout
    queued = h.cli("enqueue", *args)
    assert queued.returncode == 0, queued.stderr
    assert queued.stderr.startswith("archiver: warning: no index on public.audit leads with at")
    assert queued.stderr.count("\n") == 1
    h.sql("CREATE INDEX ON audit (at)")
    assert "warning" not in h.cli("enqueue", *args, "--dry-run").stdout
    again = h.cli("enqueue", *args, "--mode", "copy")
    assert again.returncode == 0 and not again.stderr, again.stderr


def test_parallel_ranges_and_an_aggregate_read_about_what_they_archive(h: Harness) -> None:
    seed_orders(h.url, ROWS)
    before = h.value("SELECT created_at FROM orders WHERE id = $1", ROWS - OLD)
    start = counters(h, "orders")
    h.enqueue("--table", "orders", "--before", before.isoformat(), "--parallel", "2")
    h.drain(workers=2)
    heap, index = (b - a for a, b in zip(start, counters(h, "orders"), strict=True))
    done = (
        "SELECT count(*) FROM background_jobs WHERE status = 'completed' AND task_name = 'archive'"
    )
    assert h.value(done) == 2
    assert h.value("SELECT sum(row_count) FROM archive_files") == OLD
    assert heap <= PER_ROW * OLD + ALLOWANCE, f"--parallel 2: {heap:,} tuples for {OLD:,} rows"
    assert index <= PER_ROW * OLD + ALLOWANCE, f"--parallel 2: {index:,} entries"

    events(h)  # with a child table, each event one item
    h.sql(
        "CREATE TABLE items (id bigint PRIMARY KEY, event_id bigint NOT NULL "
        "REFERENCES events ON DELETE CASCADE, qty int);"
        "CREATE INDEX ON items (event_id);"
        f"INSERT INTO items SELECT g, g, 1 FROM generate_series(1, {ROWS}) g;"
        "ANALYZE items"
    )
    before = h.value("SELECT at FROM events WHERE id = $1", OLD + 1)
    first = counters(h, "events") + counters(h, "items")
    h.archive(
        "--table", "events", "--column", "at", "--before", before.isoformat(), "--with-children"
    )
    end = counters(h, "events") + counters(h, "items")
    read = [b - a for a, b in zip(first, end, strict=True)]
    assert h.value("SELECT count(*) FROM items") == ROWS - OLD
    assert (
        h.value("SELECT sum(row_count) FROM archive_files WHERE source_table = 'public.items'")
        == OLD
    )
    for what, n in zip(
        ("events heap", "events index", "items heap", "items index"), read, strict=True
    ):
        assert n <= PER_ROW * OLD + ALLOWANCE, f"--with-children, {what}: {n:,} for {OLD:,} rows"


def test_an_idle_worker_polls_at_its_interval(h: Harness) -> None:
    """Nothing queued: the claim loop waits its poll interval between claims (an empty
    queue's "next run in 0 s" once made it poll 20 times a second, ~80 transactions a
    second on the queue database)."""
    import time

    from tests.support import start_worker, wait_for_text

    xacts = (
        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
        "WHERE datname = current_database()"
    )
    log = h.tmp / "worker.log"
    worker = start_worker(h.with_env(ARCHIVER_POLL_INTERVAL="1").env, log=log)
    wait_for_text(log, "started")
    # a backend reports its counters at most once a second, so its start-up's arrive with
    # its next transactions: the window opens once they have (49 counted in one loaded
    # run of 20d885f, a second after "started")
    time.sleep(3)
    before = h.value(xacts)
    time.sleep(5)
    after = h.value(xacts)
    worker.terminate()
    assert worker.wait(30) == 0
    # five polls of a few statements each, a heartbeat-timer rescue or two, these reads
    assert after - before <= 40, f"{after - before} transactions in 5 s of an idle worker"
