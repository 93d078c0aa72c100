"""`archiver attach`: in the application's database, `archive.<table>_all` holds every row
of the table, live or archived, each exactly once, as the application's own transaction
sees it -- while a throttled `--with-children` move commits chunks, while a compaction
merges files and while a restore moves rows back, in every query shape (a count, a join
of two views, a join with a live table, a key lookup, a range, an aggregate), checked
every time. postgres_fdw (the machine's PostgreSQL) pushes the lookup and the range
down to serve, which opens only the files that hold them."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import asyncpg

from archiver.testing.services import free_port
from tests.support import archiver_cmd, start_process, start_worker
from tests.support.harness import Harness
from tests.support.serve import attach, serving

ORDERS = 12_000
SCHEMA = """
CREATE TABLE customers (c_custkey integer PRIMARY KEY, c_name text NOT NULL);
INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(0, 996) g;
CREATE TABLE orders (
    o_orderkey bigint PRIMARY KEY,
    o_custkey integer NOT NULL REFERENCES customers,
    o_orderdate date NOT NULL,
    o_totalprice numeric(12,2) NOT NULL,
    o_comment text NOT NULL);
CREATE TABLE lineitem (
    l_orderkey bigint NOT NULL REFERENCES orders ON DELETE CASCADE,
    l_linenumber integer NOT NULL,
    l_quantity integer NOT NULL,
    PRIMARY KEY (l_orderkey, l_linenumber));
CREATE INDEX ON orders (o_orderdate);
INSERT INTO orders
    SELECT g, g % 997, date '1992-01-01' + (g * 7919 % 2555), (g % 5000) * 1.25, md5(g::text)
    FROM generate_series(1, {orders}) g;
INSERT INTO lineitem
    SELECT o, n, (o + n) % 50 FROM generate_series(1, {orders}) o, generate_series(1, 1 + o % 5) n;
ANALYZE customers, orders, lineitem;
CREATE TABLE untouched_orders AS SELECT * FROM orders;
CREATE TABLE untouched_lineitem AS SELECT * FROM lineitem;
"""

SHAPES = {
    "count": "SELECT count(*) FROM archive.orders_all",
    "two views joined": "SELECT count(*) FROM archive.lineitem_all l "
    "JOIN archive.orders_all o ON o.o_orderkey = l.l_orderkey",
    "a live table joined": "SELECT count(*) FROM archive.orders_all o "
    "JOIN customers c ON c.c_custkey = o.o_custkey",
    "a key": "SELECT count(*) FROM archive.orders_all WHERE o_orderkey = {key}",
    "a range": "SELECT count(*) FROM archive.orders_all "
    "WHERE o_orderdate >= date '1993-03-01' AND o_orderdate < date '1993-06-01'",
    "an aggregate": "SELECT sum(o_totalprice) FROM archive.orders_all",
    "an IN list": "SELECT count(*) FROM archive.orders_all WHERE o_custkey IN (5, 6, 7) "
    "AND o_comment <> ALL (ARRAY[md5('5'), md5('6')])",
    "each key once": "SELECT count(*) FROM (SELECT o_orderkey FROM archive.orders_all "
    "GROUP BY 1 HAVING count(*) <> 1) d",
}


def truth(h: Harness) -> dict[str, Any]:
    """What each shape answers over the untouched tables."""
    return {
        "count": ORDERS,
        "two views joined": h.value("SELECT count(*) FROM untouched_lineitem"),
        "a live table joined": ORDERS,
        "a key": 1,
        "a range": h.value(
            "SELECT count(*) FROM untouched_orders "
            "WHERE o_orderdate >= date '1993-03-01' AND o_orderdate < date '1993-06-01'"
        ),
        "an aggregate": h.value("SELECT sum(o_totalprice) FROM untouched_orders"),
        "an IN list": h.value(
            "SELECT count(*) FROM untouched_orders WHERE o_custkey IN (5, 6, 7) "
            "AND o_comment <> ALL (ARRAY[md5('5'), md5('6')])"
        ),
        "each key once": 0,
    }


async def ask_until(url: str, want: dict[str, Any], done: Any, least: int) -> list[Any]:
    """Ask every shape in turn, at least `least` rounds and until `done()`: the wrong
    answers. One round also holds a REPEATABLE READ transaction across commits and
    counts twice in it."""
    conn = await asyncpg.connect(url)
    wrong: list[Any] = []
    rounds = 0
    rng = random.Random(3)
    try:
        while rounds < least or not done():
            for name, sql in SHAPES.items():
                got = await conn.fetchval(sql.format(key=rng.randint(1, ORDERS)))
                if got != want[name]:
                    wrong.append((rounds, name, got))
            async with conn.transaction(isolation="repeatable_read"):
                first = await conn.fetchval(SHAPES["count"])
                await asyncio.sleep(0.7)  # chunks commit, files are retired and reaped
                second = await conn.fetchval(SHAPES["two views joined"])
                if (first, second) != (want["count"], want["two views joined"]):
                    wrong.append((rounds, "repeatable read", first, second))
            rounds += 1
    finally:
        await conn.close()
    return wrong


def test_the_view_is_exact_while_rows_move_merge_and_come_back(h: Harness, tmp_path: Path) -> None:
    h.sql(SCHEMA.format(orders=ORDERS))
    want = truth(h)
    with serving(h) as served:
        for table in ("orders", "lineitem"):
            attach(h, served, table)
        # before any archive: every row live, the views exact already
        assert asyncio.run(ask_until(h.url, want, lambda: True, 1)) == []

        # a throttled move of orders with their line items, a chunk every ~0.1 s
        h.enqueue(
            "--table", "orders", "--column", "o_orderdate", "--before", "1996-01-01",
            "--with-children", "--chunk-rows", "300", "--max-rows-per-second", "3000",
        )  # fmt: skip
        worker = start_worker(h.env, log=tmp_path / "worker.log")
        try:
            wrong = asyncio.run(ask_until(h.url, want, lambda: not moving(h), 3))
        finally:
            worker.terminate()
            worker.wait(30)
        assert not wrong, wrong
        moved = h.value("SELECT count(*) FROM untouched_orders") - h.value(
            "SELECT count(*) FROM orders"
        )
        assert moved > ORDERS // 2
        assert (
            h.value("SELECT count(*) FROM archive_files WHERE source_table = 'public.orders'") > 10
        )

        # pushdown: the key and the range reach serve as WHERE clauses
        plan = "\n".join(
            r[0]
            for r in h.sql(
                "EXPLAIN VERBOSE SELECT * FROM archive.orders_all WHERE o_orderkey = 42 "
                "AND o_orderdate < date '1994-01-01'"
            )
        )
        assert "((o_orderkey = 42))" in plan and "o_orderdate <" in plan, plan
        listed = "\n".join(r[0] for r in h.sql(f"EXPLAIN VERBOSE {SHAPES['an IN list']}"))
        assert "= ANY ('{5,6,7}'::integer[])" in listed, listed  # an array literal, read
        agg = "\n".join(
            r[0]
            for r in h.sql("EXPLAIN VERBOSE SELECT count(*), sum(o_totalprice) FROM archive.orders")
        )
        assert "Remote SQL: SELECT count(*), sum(o_totalprice) FROM public.orders" in agg, agg
        assert h.value("SELECT count(*) FROM archive.orders") == moved

        # a compaction merges the small files while the shapes are asked (its inputs
        # kept for readers a week, as by default)
        compact = start_process(
            archiver_cmd("compact", "--table", "orders", "--period", "none"),
            {**h.env, "ARCHIVER_READER_RETENTION": "604800"},
            tmp_path / "compact.log",
        )
        wrong = asyncio.run(ask_until(h.url, want, lambda: compact.poll() is not None, 2))
        assert compact.wait(120) == 0, (tmp_path / "compact.log").read_text()
        assert not wrong, wrong
        assert (
            h.value(
                "SELECT count(*) FROM archive_files WHERE source_table = 'public.orders' "
                "AND state = 'retired'"
            )
            > 0
        )  # its inputs kept, retired

        # a restore moves every archived row back while the shapes are asked
        restore = start_process(
            archiver_cmd("restore", "--table", "orders"), h.env, tmp_path / "restore.log"
        )
        wrong = asyncio.run(ask_until(h.url, want, lambda: restore.poll() is not None, 2))
        assert restore.wait(120) == 0, (tmp_path / "restore.log").read_text()
        assert not wrong, wrong
        assert h.value("SELECT count(*) FROM orders") == ORDERS
        assert "Traceback" not in served.log.read_text()


def test_attach_refuses_and_drops(h: Harness) -> None:
    h.sql(SCHEMA.format(orders=100))
    with serving(h) as served:
        missing = h.with_env(ARCHIVER_SERVE_PASSWORD=served.password).cli(
            "attach", "--table", "no_such_table", "--port", str(served.port)
        )
        assert missing.returncode == 1
        assert missing.stderr.strip().splitlines() == [
            "archiver: error: attach: table no_such_table does not exist in this database"
        ]
        # what it made is read once before attach returns: a wrong TLS mode, password,
        # port or host is one line naming it, and nothing is left made
        for args, env, said in (
            (("--sslmode", "require"), {}, "does not speak TLS, and --sslmode require requires it"),
            (("--sslmode", "disable"), {"ARCHIVER_SERVE_PASSWORD": "not-the-password"},
             "refused the password"),
            (("--sslmode", "disable", "--port", str(free_port())), {}, "nothing listens at"),
            (("--sslmode", "disable", "--host", "no-such-host.invalid"), {}, "host no-such-host.invalid is unknown"),
        ):  # fmt: skip
            refused = h.with_env(**{"ARCHIVER_SERVE_PASSWORD": served.password, **env}).cli(
                "attach", "--table", "orders", "--port", str(served.port), *args
            )
            assert refused.returncode == 1, refused.stdout
            lines = refused.stderr.strip().splitlines()
            assert len(lines) == 1 and said in lines[0], (args, lines)
            assert h.value("SELECT to_regclass('archive.orders')") is None
            assert h.value("SELECT count(*) FROM pg_foreign_server") == 0
            assert h.value("SELECT count(*) FROM pg_user_mappings") == 0
        role = f"reporting_{h.container.replace('-', '_')}"
        h.sql(f'CREATE ROLE "{role}"')
        try:
            attach(h, served, "orders", "--grant", role)
            assert h.value("SELECT count(*) FROM archive.orders_all") == 100
            # an archive-only reader: the archived rows, not the view that holds the live ones
            assert h.value("SELECT has_table_privilege($1, 'archive.orders', 'SELECT')", role)
            assert not h.value(
                "SELECT has_table_privilege($1, 'archive.orders_all', 'SELECT')", role
            )
            # the user mappings (the current role's, PUBLIC's): their options (serve's
            # password) are the server owner's to read alone
            mappings = "SELECT count(*) FROM pg_user_mappings WHERE srvname = 'archiver_archive'"
            assert h.value(mappings) == 2
            assert asyncio.run(options_shown_to(h.url, role)) == 0
        finally:
            h.sql(f'DROP OWNED BY "{role}"; DROP ROLE "{role}"')
        attach(h, served, "orders")  # again: replaced, not duplicated
        done = h.cli("attach", "--table", "orders", "--drop")
        assert done.returncode == 0, done.stderr
        assert h.value("SELECT to_regclass('archive.orders_all')") is None
        assert h.value("SELECT to_regclass('archive.orders')") is None


async def options_shown_to(url: str, role: str) -> int:
    """How many user mappings show their options to `role`."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'SET ROLE "{role}"')
        return int(
            await conn.fetchval("SELECT count(*) FROM pg_user_mappings WHERE umoptions IS NOT NULL")
        )
    finally:
        await conn.close()


def moving(h: Harness) -> bool:
    return bool(
        h.value("SELECT count(*) FROM background_jobs WHERE status IN ('queued', 'running')")
    )
