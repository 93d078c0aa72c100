"""Aggregates along foreign keys (`--with-children`), on a schema shaped like users' own:
orders <- shipments (CASCADE) <- tracking_events -> orders (SET NULL: a row reachable by
two paths), orders <- order_lines (RESTRICT, composite key), orders <- returns
(partitioned, its key declared on each partition). Every table compared by key and
value with what its Parquet files hold; restored exactly; crashes and a frozen worker
with lost 0 / twice 0 over every table."""

from __future__ import annotations

import json
import signal
from collections import Counter
from typing import Any

import pytest

from archiver.testing.services import Azurite
from tests.support import (
    Process,
    assert_refused,
    enqueued,
    fast_env,
    kill_at_failpoint,
    sql,
    start_worker,
    wait_for_text,
)
from tests.support.archive import blob_names, normalize, rows_in_blobs
from tests.support.harness import Harness

CUTOFF = "2024-01-01"
SCHEMA = """
CREATE TABLE orders (id bigint PRIMARY KEY, created_at date NOT NULL, note text);
CREATE TABLE shipments (
    id bigint PRIMARY KEY,
    order_id bigint NOT NULL REFERENCES orders ON DELETE CASCADE,
    carrier text);
CREATE INDEX ON shipments (order_id);
CREATE TABLE order_lines (
    order_id bigint REFERENCES orders ON DELETE RESTRICT,
    line int,
    sku text,
    total numeric(10,2) GENERATED ALWAYS AS (line * 2.5) STORED,
    PRIMARY KEY (order_id, line));
CREATE TABLE tracking_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    shipment_id bigint REFERENCES shipments ON DELETE CASCADE,
    order_id bigint REFERENCES orders ON DELETE SET NULL,
    status text);
CREATE TABLE returns (
    id bigint, order_id bigint NOT NULL, returned_at date NOT NULL,
    PRIMARY KEY (id, returned_at)) PARTITION BY RANGE (returned_at);
CREATE TABLE returns_old PARTITION OF returns FOR VALUES FROM ('2020-01-01') TO ('2024-06-01');
CREATE TABLE returns_new PARTITION OF returns FOR VALUES FROM ('2024-06-01') TO ('2030-01-01');
ALTER TABLE returns_old ADD CONSTRAINT returns_old_order FOREIGN KEY (order_id) REFERENCES orders ON DELETE CASCADE;
ALTER TABLE returns_new ADD CONSTRAINT returns_new_order FOREIGN KEY (order_id) REFERENCES orders ON DELETE CASCADE;
"""
TABLES = {  # table -> key columns
    "orders": ["id"],
    "shipments": ["id"],
    "order_lines": ["order_id", "line"],
    "tracking_events": ["id"],
    "returns": ["id", "returned_at"],
}


def seed(url: str, orders: int = 600) -> None:
    """`orders` orders, two thirds older than CUTOFF, each with 0-2 shipments, 1-3 lines,
    tracking events by shipment, by order, or by both (two paths), and some returns."""
    sql(url, SCHEMA)
    sql(
        url,
        f"""
        INSERT INTO orders SELECT i, CASE WHEN i % 3 = 0 THEN DATE '2024-06-01'
            ELSE DATE '2023-01-01' + (i % 300) END, 'order ' || i
        FROM generate_series(1, {orders}) i;
        INSERT INTO shipments SELECT o.id * 10 + s, o.id, 'carrier ' || s
        FROM orders o, generate_series(1, 2) s WHERE s <= o.id % 3;
        INSERT INTO order_lines SELECT o.id, l, 'sku-' || l FROM orders o,
            generate_series(1, 3) l WHERE l <= 1 + o.id % 3;
        INSERT INTO tracking_events (shipment_id, order_id, status)
        SELECT s.id, CASE WHEN s.id % 2 = 0 THEN s.order_id END, 'in transit' FROM shipments s;
        INSERT INTO tracking_events (shipment_id, order_id, status)
        SELECT NULL, o.id, 'order note' FROM orders o WHERE o.id % 4 = 0;
        INSERT INTO returns SELECT o.id, o.id, CASE WHEN o.id % 2 = 0
            THEN DATE '2024-01-15' ELSE DATE '2025-01-15' END
        FROM orders o WHERE o.id % 5 = 0;
        ANALYZE;
        """,
    )


def snapshot(url: str) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """Every row of every table, by key."""
    return {
        table: {
            tuple(r[k] for k in keys): normalize(dict(r))
            for r in sql(url, f"SELECT * FROM {table}")
        }
        for table, keys in TABLES.items()
    }


def leaving(url: str) -> dict[str, set[tuple[Any, ...]]]:
    """The keys an archive of orders older than CUTOFF must take from each table."""
    old = f"SELECT id FROM orders WHERE created_at < '{CUTOFF}'"
    queries = {
        "orders": old,
        "shipments": f"SELECT id FROM shipments WHERE order_id IN ({old})",
        "order_lines": f"SELECT order_id, line FROM order_lines WHERE order_id IN ({old})",
        "tracking_events": f"SELECT id FROM tracking_events WHERE order_id IN ({old}) OR "
        f"shipment_id IN (SELECT id FROM shipments WHERE order_id IN ({old}))",
        "returns": f"SELECT id, returned_at FROM returns WHERE order_id IN ({old})",
    }
    return {t: {tuple(r) for r in sql(url, q)} for t, q in queries.items()}


def check_exactly_once(
    url: str,
    azurite: Azurite,
    container: str,
    before: dict[str, dict[tuple[Any, ...], dict[str, Any]]],
    expected: dict[str, set[tuple[Any, ...]]],
    stray: frozenset[str] = frozenset(),
    copied: bool = False,
) -> None:
    """Per table: each row that had to go is in exactly one catalogued file, with the
    values it had, and gone from the table (still there when `copied`); every other row
    is untouched."""
    assert blob_names(azurite.connection_string, container) == sorted(
        {r["path"] for r in sql(url, "SELECT path FROM archive_files")} | stray
    ), "blobs and catalog differ"
    now = snapshot(url)
    for table, keys in TABLES.items():
        paths = [
            r["path"]
            for r in sql(
                url, "SELECT path FROM archive_files WHERE source_table = $1", f"public.{table}"
            )
        ]
        rows = rows_in_blobs(azurite.connection_string, container, paths)
        archived = Counter(tuple(r[k] for k in keys) for r in rows)
        twice = [k for k, n in archived.items() if n > 1]
        assert not twice, f"{table}: {len(twice)} rows archived twice, e.g. {twice[:3]}"
        assert set(archived) == expected[table], f"{table}: archived rows differ"
        for r in rows:
            key = tuple(r[k] for k in keys)
            assert r == before[table][key], f"{table} {key}: archived values differ"
        if copied:
            assert now[table] == before[table], f"{table}: a copy changed rows"
            continue
        assert not expected[table] & set(now[table]), f"{table}: archived rows still there"
        assert now[table] == {k: v for k, v in before[table].items() if k not in expected[table]}, (
            f"{table}: rows that stay were changed"
        )


def enqueue(env: dict[str, str], *extra: str) -> list[str]:
    args = ["--table", "orders", "--before", CUTOFF, "--with-children", "--chunk-rows", "60"]
    return enqueued(env, *args, *extra)


def test_an_aggregate_moved_by_two_workers_then_restored(h: Harness) -> None:
    seed(h.url)
    before, expected = snapshot(h.url), leaving(h.url)

    refused = h.cli("enqueue", "--table", "orders", "--before", CUTOFF)
    assert_refused(refused, code=1)
    for needle in (
        "shipments_order_id_fkey, ON DELETE CASCADE",
        "returns_old_order",
        "--with-children",
    ):
        assert needle in refused.stderr
    assert not h.sql("SELECT 1 FROM background_jobs")

    sql(  # fires for every moved shipment; orders' foreign-key triggers are not listed
        h.url,
        "CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;"
        "CREATE TRIGGER shipped AFTER DELETE ON shipments FOR EACH ROW EXECUTE FUNCTION noop();",
    )
    plan = h.cli("enqueue", "--table", "orders", "--before", CUTOFF, "--with-children", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    triggers = [line for line in plan.stdout.splitlines() if line.startswith("delete trigger")]
    assert triggers == ["delete trigger public.shipments: shipped (AFTER, for each row)"]
    assert "public.tracking_events" in plan.stdout and "public.returns" in plan.stdout
    # tracking_events.shipment_id and .order_id have no index: each chunk scans it
    assert "tracking_events_shipment_id_fkey" in plan.stdout, plan.stdout
    assert "shipments_order_id_fkey" not in plan.stdout

    jobs = enqueue(h.env, "--parallel", "2")
    assert len(jobs) == 2
    workers = [start_worker(h.env, "--burst") for _ in range(2)]
    assert [w.wait(180) for w in workers] == [0, 0]
    for job_id in jobs:
        h.wait_for(job_id, "completed", timeout=10)
    check_exactly_once(h.url, h.azurite, h.container, before, expected)
    tables = {r["source_table"] for r in h.sql("SELECT source_table FROM archive_files")}
    assert tables == {f"public.{t}" for t in TABLES}  # each table under its own name
    for job_id in jobs:
        verified = h.cli("verify", "--job", job_id)
        assert verified.returncode == 0, verified.stdout + verified.stderr

    # a range of orders comes back with the rows of their aggregate whose parents are all
    # back: tracking events of their shipments and orders, lines, returns
    rng = ("2023-03-01", "2023-06-01")
    restored = h.cli("restore", "--table", "orders", "--from", rng[0], "--to", rng[1])
    assert restored.returncode == 0, restored.stderr
    back = {k for k, r in before["orders"].items() if rng[0] <= str(r["created_at"]) < rng[1]}
    ids = {k[0] for k in back}
    shipped = {k for k, r in before["shipments"].items() if r["order_id"] in ids}
    wanted = {
        "orders": back,
        "shipments": shipped,
        "order_lines": {k for k, r in before["order_lines"].items() if r["order_id"] in ids},
        "returns": {k for k, r in before["returns"].items() if r["order_id"] in ids},
        "tracking_events": {
            k
            for k, r in before["tracking_events"].items()
            if (r["shipment_id"] is None or (r["shipment_id"],) in shipped)
            and (r["order_id"] is None or r["order_id"] in ids)
            and k in expected["tracking_events"]
        },
    }
    now = snapshot(h.url)
    for table in TABLES:
        assert expected[table] & set(now[table]) == wanted[table], table
        assert all(now[table][k] == before[table][k] for k in wanted[table]), table
    assert wanted["tracking_events"] and len(back) > 10

    for job_id in jobs:  # the rest: parents before children, in one transaction per job
        restored = h.cli("restore", "--job", job_id, "--on-conflict", "skip")
        assert restored.returncode == 0, restored.stderr
    assert snapshot(h.url) == before


def test_an_aggregate_copied_from_one_snapshot(h: Harness) -> None:
    seed(h.url, orders=300)
    before, expected = snapshot(h.url), leaving(h.url)
    (job_id,) = enqueue(h.env, "--mode", "copy")
    h.drain()
    h.wait_for(job_id, "completed", timeout=10)
    check_exactly_once(h.url, h.azurite, h.container, before, expected, copied=True)
    # children's files cover no cutoff range (-infinity..infinity in the catalog)
    status = h.cli("status")
    assert status.returncode == 0 and "infinity" in status.stdout, status.stderr


def test_an_aggregates_progress_counts_every_table(h: Harness) -> None:
    """What an operator reads in archiver_running_jobs halfway through: rows and files of
    every table against estimates of every table (not the root's alone, which its rows
    done passed after the first chunk: 100% done, no ETA)."""
    seed(h.url, orders=300)
    before, expected = snapshot(h.url), leaving(h.url)
    total = sum(len(keys) for keys in expected.values())
    (job_id,) = enqueue(h.env)  # 200 old orders, 60 a chunk: 4 chunks of 5 tables' files
    fast = fast_env(h.env)
    kill_at_failpoint(fast, "after_commit", h.tmp / "a.log")  # the first chunk committed
    (row,) = h.sql("SELECT * FROM archiver_running_jobs")
    files = h.sql("SELECT row_count FROM archive_files")
    assert (row["chunks_done"], row["chunks_estimated"]) == (len(files), 20), row
    assert row["rows_done"] == sum(f["row_count"] for f in files) < total / 2
    # the planner assumes children spread evenly over all orders; old orders have more
    assert 0.7 * total <= row["rows_estimated"] <= 1.2 * total, (row, total)
    assert 10 < row["progress_pct"] < 50, (row["rows_done"], row["rows_estimated"])
    b = start_worker(fast, log=h.tmp / "b.log")  # takes it over once its lease is out
    h.wait_for(job_id, "completed")
    stop(b)
    (done,) = h.sql("SELECT progress::text FROM background_jobs WHERE task_name = 'archive'")
    progress = json.loads(done["progress"])
    assert (progress["rows"], progress["rows_estimated"]) == (total, total)
    check_exactly_once(h.url, h.azurite, h.container, before, expected)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_upload", "before_commit", "after_commit"])
def test_sigkill_mid_aggregate_chunk(h: Harness, point: str) -> None:
    seed(h.url, orders=300)
    before, expected = snapshot(h.url), leaving(h.url)
    (job_id,) = enqueue(h.env)
    fast = fast_env(h.env)
    log_a = h.tmp / "a.log"
    # the second chunk: its files for the children are written before the root's
    kill_at_failpoint(fast, point, log_a)
    b = start_worker(fast, log=h.tmp / "b.log")
    row = h.wait_for(job_id, "completed")
    stop(b)
    assert row["attempts"] == 2
    check_exactly_once(h.url, h.azurite, h.container, before, expected)


@pytest.mark.slow
def test_a_frozen_worker_past_its_lease(h: Harness) -> None:
    seed(h.url, orders=300)
    before, expected = snapshot(h.url), leaving(h.url)
    (job_id,) = enqueue(h.env)
    fast = fast_env(h.env, ARCHIVER_LOCK_TIMEOUT="1")
    log_a = h.tmp / "a.log"
    a = start_worker({**fast, "ARCHIVER_FAILPOINTS": "upload_staged=sleep:1"}, log=log_a)
    wait_for_text(log_a, "failpoint upload_staged reached")
    a.send_signal(signal.SIGSTOP)
    try:
        b = start_worker(fast, log=h.tmp / "b.log")
        h.wait_for(job_id, "completed", timeout=120)
        stop(b)
    finally:
        a.send_signal(signal.SIGCONT)
    wait_for_text(log_a, "no longer held")
    stop(a)
    catalogued = {r["path"] for r in h.sql("SELECT path FROM archive_files")}
    stray = frozenset(blob_names(h.azurite.connection_string, h.container)) - catalogued
    assert stray and all("-a001-" in name for name in stray)  # the frozen attempt's upload
    verify = h.cli("verify", "--job", job_id)  # it looks under every table's name
    assert verify.returncode == 1 and all(
        f"{n}: not in the catalog" in verify.stdout for n in stray
    )
    # the frozen worker's rows were locked, so skipped by the rescuer: the next archive
    # takes them; what was archived is archived once
    leftover = leaving(h.url)
    done = {t: expected[t] - leftover[t] for t in TABLES}
    check_exactly_once(h.url, h.azurite, h.container, before, done, stray)


def stop(proc: Process) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
