"""`archiver serve` as the tests run it: a real process on a free loopback port, and the
clients users have (psql, psycopg, asyncpg; postgres_fdw through `archiver attach`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from archiver.testing.services import free_port
from tests.support import archiver_cmd, start_process, wait_for_text
from tests.support.harness import Harness

PASSWORD = "serve-test-password-0123456789"


@dataclass(frozen=True)
class Served:
    """A running serve: where it listens and how a client logs in."""

    port: int
    log: Path
    pid: int = 0
    password: str = PASSWORD
    user: str = "archiver"

    def dsn(self, **extra: str) -> str:
        options = {
            "host": "127.0.0.1",
            "port": str(self.port),
            "user": self.user,
            "password": self.password,
            "dbname": "archive",
            "sslmode": "disable",
            **extra,
        }
        return " ".join(f"{k}={v}" for k, v in options.items())

    def psql(self, *sql: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """psql (the machine's) running each statement, unaligned, tuples only."""
        args = ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", self.dsn(**extra)]
        for statement in sql:
            args += ["-c", statement]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


def serve_env(h: Harness, **extra: str) -> dict[str, str]:
    return {**h.env, "ARCHIVER_SERVE_PASSWORD": PASSWORD, **extra}


@contextmanager
def serving(h: Harness, **extra: str) -> Iterator[Served]:
    """`archiver serve` on a free port until the block ends (SIGTERM); it must then stop
    cleanly: exit 0, "serve: stopped" and no traceback in its log."""
    port = free_port()
    log = h.tmp / f"serve-{port}.log"
    proc = start_process(
        archiver_cmd("serve", "--bind", f"127.0.0.1:{port}"), serve_env(h, **extra), log
    )
    try:
        wait_for_text(log, "listening on", timeout=60)
        yield Served(port, log, pid=proc.pid)
    finally:
        proc.terminate()
        code = proc.wait(30)
    said = log.read_text()
    assert code == 0 and "serve: stopped" in said and "Traceback" not in said, said[-3000:]


def definitions_database(h: Harness) -> str:
    """The database (and role) serve declares the test's archived tables in (dropped
    with the test's database: tests.support.fresh_database)."""
    return f"{h.url.rsplit('/', 1)[1]}_archive"


def attach(h: Harness, served: Served, table: str, *args: str) -> None:
    """`archiver attach` of `table` to `served` in the test's database."""
    done = h.with_env(ARCHIVER_SERVE_PASSWORD=served.password).cli(
        "attach", "--table", table, "--port", str(served.port), "--sslmode", "disable", *args
    )
    assert done.returncode == 0, done.stderr


# A world shaped like users' own, for the client and session tests: the reference orders
# (those before BEFORE archived; `untouched` keeps them all), every type of the types
# tests (`snapshot` keeps them), and a mixed-case schema's table with a space in its
# name, a composite text key, an identity and a generated column, an enum and a domain
# of its own and comments (`lines_copy` keeps it).
ROWS, BEFORE = 6_000, "2024-12-29"
LINES_DDL = """
CREATE SCHEMA "Sales";
CREATE TYPE "Sales".tier AS ENUM ('gold', 'silver', 'bronze');
CREATE DOMAIN "Sales".sku AS text CHECK (VALUE ~ '^[A-Z]');
CREATE TABLE "Sales"."Order Lines" (
    region text,
    line_no integer GENERATED ALWAYS AS IDENTITY,
    sku "Sales".sku NOT NULL,
    tier "Sales".tier,
    qty integer NOT NULL,
    amount numeric(10,2) GENERATED ALWAYS AS (qty * 1.5) STORED,
    "Placed At" timestamptz NOT NULL,
    PRIMARY KEY (region, line_no)
);
COMMENT ON TABLE "Sales"."Order Lines" IS 'one line of an order';
COMMENT ON COLUMN "Sales"."Order Lines".qty IS 'how many';
INSERT INTO "Sales"."Order Lines" (region, sku, tier, qty, "Placed At")
SELECT (ARRAY['north', 'south', 'éast'])[1 + g % 3], 'S' || g,
       (ARRAY['gold', 'silver', 'bronze', NULL])[1 + g % 4]::"Sales".tier, g % 50,
       timestamptz '2024-01-01 00:00+00' + make_interval(hours => g)
FROM generate_series(1, 900) g;
"""


def archive_three_tables(h: Harness) -> Harness:
    """The three tables archived: orders before BEFORE, alltypes and the lines whole."""
    from archiver.testing.reference import seed_orders
    from tests.support.alltypes import seed_alltypes

    seed_orders(h.url, ROWS)
    h.sql("CREATE TABLE untouched AS SELECT * FROM orders")
    seed_alltypes(h.url)
    h.sql(LINES_DDL)
    h.sql('CREATE TABLE lines_copy AS SELECT * FROM "Sales"."Order Lines"')
    h.archive("--table", "orders", "--before", BEFORE, "--chunk-rows", "1000")
    h.archive("--table", "alltypes", "--before", "2025-01-01", "--chunk-rows", "1000")
    h.archive(
        "--table", '"Sales"."Order Lines"', "--column", '"Placed At"', "--before", "2025-01-01"
    )
    return h


def psql_lines(url: str, *commands: str) -> str:
    """psql's (aligned) output of `commands` run in one session, which must succeed."""
    args = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "--pset", "pager=off", url]
    for command in commands:
        args += ["-c", command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout
