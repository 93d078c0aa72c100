"""`query --with-live` stays exact in queries that read several tables (and one table
twice) while a move commits chunks: on an order / line-item aggregate whose tables are
big enough for DuckDB's postgres scanner to read each in parallel ctid ranges (>= 2,000
pages, its default 1,000 a range), every query shape counts every row once.

DuckDB 1.5.5's scanner, in a query with more than one scan of the attached database,
reads the first range of each parallel scan on a connection it never pins to the
transaction's snapshot: rows a chunk moved after the catalog's snapshot were then in
neither place (the issue's 16,923 of 600,572 lines)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.support import archiver_cmd, start_process, start_worker, wait_for_text
from tests.support.harness import Harness

ORDERS = 40_000
SCHEMA = """
CREATE TABLE orders (
    o_orderkey bigint PRIMARY KEY,
    o_custkey integer NOT NULL,
    o_orderdate date NOT NULL,
    o_totalprice numeric(12,2) NOT NULL,
    o_comment text NOT NULL);
CREATE TABLE lineitem (
    l_orderkey bigint NOT NULL REFERENCES orders,
    l_linenumber integer NOT NULL,
    l_quantity integer NOT NULL,
    l_comment text NOT NULL,
    PRIMARY KEY (l_orderkey, l_linenumber));
CREATE INDEX ON orders (o_orderdate);
INSERT INTO orders
    SELECT g, g % 997, date '1992-01-01' + (g * 7919 % 2555), (g % 5000) * 1.25,
           repeat(md5(g::text), 12)
    FROM generate_series(1, {orders}) g;
INSERT INTO lineitem
    SELECT o, n, (o + n) % 50, repeat(md5((o * 10 + n)::text), 3)
    FROM generate_series(1, {orders}) o, generate_series(1, 1 + o % 7) n;
ANALYZE orders, lineitem;
"""

# Each shape reads the attached database more than once; each must count every row once.
SHAPES = {
    "two tables": "SELECT (SELECT count(*) FROM orders) AS o, (SELECT count(*) FROM lineitem) AS l",
    "a join": "SELECT count(*) AS l, count(DISTINCT o.o_orderkey) AS o "
    "FROM orders o JOIN lineitem l ON l.l_orderkey = o.o_orderkey",
    "one table twice": "SELECT count(*) AS o FROM orders a JOIN orders b USING (o_orderkey)",
    "a union": "SELECT count(*) AS n FROM (SELECT o_orderkey FROM orders "
    "UNION ALL SELECT l_orderkey FROM lineitem)",
    "a subquery": "SELECT count(*) AS l FROM lineitem WHERE l_orderkey IN "
    "(SELECT o_orderkey FROM orders WHERE o_custkey >= 0)",
    "one table alone": "SELECT count(*) AS l, CAST(sum(l_quantity) AS BIGINT) AS q FROM lineitem",
}


def seed(h: Harness) -> dict[str, dict[str, Any]]:
    """The aggregate, analyzed; what each shape must answer at any moment of a move."""
    h.sql(SCHEMA.format(orders=ORDERS))
    pages = {r["relname"]: r["relpages"] for r in h.sql(
        "SELECT relname, relpages FROM pg_class WHERE relname IN ('orders', 'lineitem')")}  # fmt: skip
    assert min(pages.values()) >= 2_000, pages  # read in parallel ranges by the scanner
    lines = h.value("SELECT count(*) FROM lineitem")
    quantity = h.value("SELECT sum(l_quantity) FROM lineitem")
    return {
        "two tables": {"o": ORDERS, "l": lines},
        "a join": {"l": lines, "o": ORDERS},
        "one table twice": {"o": ORDERS},
        "a union": {"n": ORDERS + lines},
        "a subquery": {"l": lines},
        "one table alone": {"l": lines, "q": quantity},
    }


def answers(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def test_every_shape_exact_when_a_move_commits_after_the_catalog_is_read(
    h: Harness, tmp_path: Path
) -> None:
    """Each query reads the catalog, then sleeps (a failpoint) while a whole move of the
    aggregate commits, then reads the live rows: at the catalog's snapshot every row is
    live, and each shape answers what it did before the move."""
    want = seed(h)
    h.enqueue(
        "--table", "orders", "--column", "o_orderdate", "--before", "1994-01-01",
        "--with-children", "--chunk-rows", "2000",
    )  # fmt: skip
    queries = {}
    for name, sql in SHAPES.items():
        log = tmp_path / f"{name.replace(' ', '_')}.log"
        queries[name] = (log, start_process(
            archiver_cmd("query", "--with-live", "--format", "json", sql),
            {**h.env, "ARCHIVER_FAILPOINTS": "live_catalog_read=sleep:20"}, log,
        ))  # fmt: skip
    for log, _ in queries.values():
        wait_for_text(log, "failpoint live_catalog_read reached")
    h.drain()  # every chunk commits while the queries sleep
    assert h.value("SELECT count(*) FROM orders") < ORDERS
    wrong = {}
    for name, (log, proc) in queries.items():
        assert proc.wait(120) == 0, log.read_text()
        if answers(log) != [want[name]]:
            wrong[name] = answers(log)
    assert not wrong, (wrong, want)


def test_every_shape_exact_while_chunks_commit(h: Harness, tmp_path: Path) -> None:
    """A throttled move of the aggregate commits a chunk every ~0.1 s while each shape is
    asked, in turn, until the move ends: every answer equals the totals."""
    want = seed(h)
    h.enqueue(
        "--table", "orders", "--column", "o_orderdate", "--before", "1996-01-01",
        "--with-children", "--chunk-rows", "500", "--max-rows-per-second", "5000",
    )  # fmt: skip
    worker = start_worker(h.env, log=tmp_path / "worker.log")
    try:
        wrong: list[tuple[str, Any]] = []
        asked: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (len(asked) < len(SHAPES) or moving(h)):
            name = list(SHAPES)[len(asked) % len(SHAPES)]
            done = h.cli("query", "--with-live", "--format", "json", SHAPES[name])
            assert done.returncode == 0, done.stderr
            got = [json.loads(line) for line in done.stdout.splitlines()]
            asked.append(name)
            if got != [want[name]]:
                wrong.append((name, got))
        assert not wrong, (wrong, want)
        assert len(asked) >= len(SHAPES), asked
        assert h.value("SELECT count(*) FROM archive_files") > 20  # chunks committed meanwhile
    finally:
        worker.terminate()
        worker.wait(30)


def moving(h: Harness) -> bool:
    return bool(
        h.value("SELECT count(*) FROM background_jobs WHERE status IN ('queued', 'running')")
    )
