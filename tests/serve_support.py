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
from tests.harness import Harness
from tests.support import archiver_cmd, start_process, wait_for_text

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


def attach(h: Harness, served: Served, table: str, *args: str) -> None:
    """`archiver attach` of `table` to `served` in the test's database."""
    done = h.with_env(ARCHIVER_SERVE_PASSWORD=served.password).cli(
        "attach", "--table", table, "--port", str(served.port), "--sslmode", "disable", *args
    )
    assert done.returncode == 0, done.stderr
