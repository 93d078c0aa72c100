"""The bench's run: its databases, its Azurite, the figures it adds and the table it
prints, and the archives every section times."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from azure.storage.blob import BlobServiceClient

from archiver.testing.services import Azurite
from bench.common import (
    Databases,
    Row,
    duckdb_seconds,
    enqueue_orders,
    env_for,
    job_seconds,
    psql_seconds,
    run_workers,
    sql,
)

WAL = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8"


class Bench:
    """One run of the bench: each section adds its figures (bench.add), then main prints
    the table."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dbs = Databases(args.admin_url)
        self.admin_url = args.admin_url
        self.rows: list[Row] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="archiver-bench-"))
        self.azurite = Azurite(self.tmp / "azurite")
        # the worker's peak RSS in the data section's copies, which the memory section
        # compares with its bigger table's
        self.peak_small = self.peak_small_two = 0

    @contextmanager
    def running(self) -> Iterator[None]:
        self.azurite.start()
        try:
            yield
        finally:
            self.azurite.stop()
            self.dbs.drop_all()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def add(self, figure: str, value: float, baseline: float | None, unit: str, target: str,
            ok: bool | None) -> None:  # fmt: skip
        self.rows.append(Row(figure, value, baseline, unit, target, ok))
        print(f"  {figure}: {value:.3f} {unit}", file=sys.stderr, flush=True)

    def storage(self, kind: str) -> str:
        if kind == "file":
            return f"file://{self.tmp}/files-{uuid.uuid4().hex[:6]}"
        return f"az://c{uuid.uuid4().hex[:12]}/archive"

    def archive_copy(self, url: str, kind: str, **extra: str) -> tuple[float, int, float]:
        """(the job's own seconds, the worker's peak RSS, enqueue-to-exit wall seconds)."""
        env = env_for(url, self.storage(kind), self.azurite, **extra)
        started = time.monotonic()
        enqueue_orders(env, "copy")
        peak = run_workers(env, 1)[0]
        return job_seconds(url), peak, time.monotonic() - started

    def duckdb_export(self, url: str, kind: str, statement: str = "") -> float:
        """bench.duckdb_export's seconds, writing to a local file or to a new container
        (`statement`: that SQL's rows instead of the table's, to a local file)."""
        env = {**os.environ, "AZURE_STORAGE_CONNECTION_STRING": self.azurite.connection_string}
        if kind == "file":
            path = self.tmp / "duckdb.parquet"
            try:
                return duckdb_seconds(url, str(path), env, statement)
            finally:
                path.unlink(missing_ok=True)
        container = f"d{uuid.uuid4().hex[:12]}"
        service = BlobServiceClient.from_connection_string(self.azurite.connection_string)
        service.create_container(container)
        try:
            return duckdb_seconds(url, f"az://{container}/orders.parquet", env)
        finally:
            service.delete_container(container)

    def archive_move(
        self, rows: int, workers: int, parallel: int, pinned: bool = False, **extra: str
    ) -> tuple[float, int, float]:
        """A move of every row of a fresh copy (`pinned`: each worker held to a core of
        its own): (the job's own seconds, the workers' peak RSS, the WAL it wrote in
        bytes)."""
        url = self.dbs.copy(rows)
        try:
            env = env_for(url, self.storage("az"), self.azurite, **extra)
            before = sql(url, WAL)[0][0]
            enqueue_orders(env, "move", *(["--parallel", str(parallel)] if parallel > 1 else []))
            peak = max(run_workers(env, workers, pinned=pinned))
            wal = sql(url, WAL)[0][0] - before
            return job_seconds(url), peak, wal
        finally:
            self.dbs.drop(url)

    def psql_on_a_copy(self, rows: int, commands: Callable[[str], list[str]]) -> float:
        """psql's seconds for `commands(url)` on a fresh copy of the rows (they delete)."""
        url = self.dbs.copy(rows)
        try:
            return psql_seconds(url, *commands(url))
        finally:
            self.dbs.drop(url)

    def table(self) -> str:
        lines = [
            f"archiver bench: {os.cpu_count()} cores, best of {self.args.repeat}",
            "",
            "| figure | measured | baseline | ratio | target | met |",
            "|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            base = f"{r.baseline:.3f} {r.unit}" if r.baseline is not None else ""
            ratio = (
                ""
                if r.ratio is None
                else f"{r.ratio:.2f}x"
                if r.ratio >= 0.1
                else f"{r.ratio:.4f}x"
            )
            met = "" if r.ok is None else ("yes" if r.ok else "NO")
            lines.append(f"| {r.figure} | {r.value:.3f} {r.unit} | {base} | {ratio} | {r.target} | {met} |")  # fmt: skip
        return "\n".join(lines)
