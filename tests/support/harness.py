"""One integration test's world, so a test reads as its scenario: its own migrated
database, its own container on the run's Azurite, a scratch directory, and the
environment of every process it starts — with the steps nearly every test takes
(enqueue, drain the queue with burst workers, read the table's keys and the archive)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from archiver.testing.services import Azurite
from tests.support import (
    fresh_database,
    run_cli,
    sql,
    sql_value,
    start_worker,
    wait_for_status,
)
from tests.support.archive import blob_names, catalog_paths, rows_in_blobs
from tests.support.exactly_once import assert_exactly_once

T = TypeVar("T")

# Where the state tables record the storage their rows are on (cloned() rewrites them).
STORAGE_URL_COLUMNS = {
    "archive_files": "storage_url",
    "delta_tables": "storage_url",
    "archive_ledger": "storage_url",
    "archiver_maintenance": "scope",
}


def world_env(database_url: str, azurite: Azurite, container: str, tmp: Path) -> dict[str, str]:
    """The environment of the CLI and worker processes of a world: its database, its
    container on the run's Azurite, its scratch directory."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "AZURE_"))}
    base.pop("DATABASE_URL", None)
    return {
        **base,
        "ARCHIVER_DATABASE_URL": database_url,
        "ARCHIVER_STORAGE_URL": f"az://{container}/archive",
        "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
        "ARCHIVER_POLL_INTERVAL": "0.5",
        # what a change takes out goes as soon as no reader's snapshot sees it: the tests
        # of deleting; tests/integration/test_reader_retention.py and compaction's keep the default
        "ARCHIVER_READER_RETENTION": "0",
        "TMPDIR": str(tmp),
    }


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
        """The invariant (tests/support/exactly_once.py): each of `expected` in exactly one place."""
        assert_exactly_once(
            self.url, self.azurite.connection_string, self.container, expected, table, **kw
        )


class Worlds:
    """Worlds built once per test process and kept until it ends, each by a function of
    a test module (`build(world) -> what the tests need to know of it`), for `cloned` to
    copy for each test: what a module's tests all start from, built by real jobs once
    instead of once a test."""

    def __init__(self, template: str, azurite: Azurite, tmp: Path) -> None:
        self.template, self.azurite, self.tmp = template, azurite, tmp
        self.stack = ExitStack()
        self.built: dict[Callable[..., Any], tuple[Harness, Any]] = {}

    def get(self, build: Callable[[Harness], T]) -> tuple[Harness, T]:
        if build not in self.built:
            container = f"w{uuid.uuid4().hex[:20]}"
            url = self.stack.enter_context(fresh_database("archiver_w", self.template))
            tmp = self.tmp / container
            tmp.mkdir()
            world = Harness(world_env(url, self.azurite, container, tmp), url, self.azurite,
                            container, tmp)  # fmt: skip
            self.built[build] = (world, build(world))
        world, known = self.built[build]
        return world, known

    def close(self) -> None:
        self.stack.close()


@contextmanager
def cloned(world: Harness, h: Harness) -> Iterator[Harness]:
    """Test `h`'s world as a copy of `world` (Worlds), as a test of its own would leave it:
    the database copied from world's (CREATE DATABASE ... TEMPLATE: world's processes
    must all have ended), world's blobs copied into h's container, and the storage URL
    each state table records rewritten to h's. What a module's tests all start from is
    built once by real jobs, then copied in a second instead of rebuilt in twenty."""
    from azure.storage.blob import BlobServiceClient

    template = world.url.rsplit("/", 1)[1]
    with fresh_database("archiver_c", template) as url:
        service = BlobServiceClient.from_connection_string(world.azurite.connection_string)
        source = service.get_container_client(world.container)
        target = service.get_container_client(h.container)
        if not target.exists():
            target.create_container()
        for blob in source.list_blobs():
            data = source.download_blob(blob.name).readall()
            target.upload_blob(blob.name, data)
        old, new = world.container, h.container  # each a random name: replaced alone
        for table, column in STORAGE_URL_COLUMNS.items():
            sql(url, f"UPDATE {table} SET {column} = replace({column}, $1, $2)", old, new)
        sql(
            url,
            "UPDATE background_jobs SET payload = replace(payload::text, $1, $2)::jsonb, "
            "dedup_key = replace(dedup_key, $1, $2), lock_key = replace(lock_key, $1, $2)",
            old, new,
        )  # fmt: skip
        yield replace(h, url=url, env={**h.env, "ARCHIVER_DATABASE_URL": url})
