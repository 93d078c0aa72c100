"""One integration test's world, so a test reads as its scenario: its own migrated
database, its own container on the run's Azurite, a scratch directory, and the
environment of every process it starts — with the steps nearly every test takes
(enqueue, drain the queue with burst workers, read the table's keys and the archive)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg

from archiver.testing.services import Azurite
from tests.archive_check import blob_names, catalog_paths, rows_in_blobs
from tests.exactly_once import assert_exactly_once
from tests.support import run_cli, sql, sql_value, start_worker, wait_for_status


@dataclass(frozen=True)
class Harness:
    """`env` is the environment of the CLI and worker processes; `url` the database."""

    env: dict[str, str]
    url: str
    azurite: Azurite
    container: str
    tmp: Path

    def with_env(self, **extra: str) -> Harness:
        """The same world, its processes started with `extra` in their environment."""
        return replace(self, env={**self.env, **extra})

    # the database
    def sql(self, query: str, *args: Any) -> list[asyncpg.Record]:
        return sql(self.url, query, *args)

    def value(self, query: str, *args: Any) -> Any:
        return sql_value(self.url, query, *args)

    def missing(self, rows: str, of: str) -> int:
        """How many of the rows query `of` gives are not among those `rows` gives
        (EXCEPT ALL: duplicates counted)."""
        return int(self.value(f"SELECT count(*) FROM ({of} EXCEPT ALL {rows}) x"))

    def keys(self, table: str = "orders", key: str = "id") -> set[Any]:
        """The keys left in `table`."""
        return {r[0] for r in self.sql(f"SELECT {key} FROM {table}")}

    def old_ids(self, before: str, table: str = "orders", column: str = "created_at") -> set[Any]:
        """The ids of `table` older than `before`: what an archive must take, once."""
        return {
            r[0]
            for r in self.sql(
                f"SELECT id FROM {table} WHERE {column} < $1::text::timestamptz", before
            )
        }

    # the CLI and the workers
    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_cli(self.env, *args, timeout=timeout)

    def enqueue(self, *args: str) -> list[str]:
        """`archiver enqueue ARGS`, which must succeed: the ids of the jobs it queued."""
        result = self.cli("enqueue", *args)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    def drain(self, *args: str, workers: int = 1, timeout: float = 120) -> None:
        """Burst workers (`archiver worker --burst ARGS`) until the queue is empty; each
        must exit 0."""
        procs = [start_worker(self.env, "--burst", *args) for _ in range(workers)]
        for proc in procs:
            assert proc.wait(timeout) == 0

    def archive(self, *args: str, workers: int = 1, status: str = "completed") -> str:
        """Enqueue one job, drain the queue, and check the job ended in `status`."""
        (job,) = self.enqueue(*args)
        self.drain(workers=workers)
        self.wait_for(job, status)
        return job

    def wait_for(self, job_id: str, status: str, timeout: float = 90.0) -> Any:
        return wait_for_status(self.url, job_id, status, timeout)

    # the archive
    def archived(self, table: str | None = None) -> list[dict[str, Any]]:
        """Every row of the catalogued files (of `table`, schema.table, or of all)."""
        return rows_in_blobs(
            self.azurite.connection_string, self.container, catalog_paths(self.url, table)
        )

    def blobs(self, *, delta_log: bool = False) -> list[str]:
        """The container's archived files (and strays); or its Delta logs' objects."""
        return blob_names(self.azurite.connection_string, self.container, delta_log=delta_log)

    def blob(self, name: str) -> bytes:
        """A blob of the test's container, as stored."""
        from azure.storage.blob import ContainerClient

        client = ContainerClient.from_connection_string(
            self.azurite.connection_string, self.container
        )
        return bytes(client.download_blob(name).readall())

    def exactly_once(self, expected: set[Any], table: str = "orders", **kw: Any) -> None:
        """The invariant (tests/exactly_once.py): each of `expected` in exactly one place."""
        assert_exactly_once(
            self.url, self.azurite.connection_string, self.container, expected, table, **kw
        )
