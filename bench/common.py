"""What every section of the bench shares: the reference databases, the processes it
starts, and the job's own time as the queue records it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from archiver import db
from archiver.bulk import open_bulk
from archiver.model import ArchiveRequest, KeyRange, Mode
from archiver.source.chunks import describe_archive
from archiver.testing import forkserver
from archiver.testing.forkserver import Process
from archiver.testing.reference import seed_orders
from archiver.testing.services import Azurite, with_database

CUTOFF = "2025-01-01 00:00:00+00"  # every reference row is older
TWO_CONNECTIONS = {"ARCHIVER_COPY_CONNECTIONS": "2"}  # copy mode reading chunks in pairs
FLOOR_SQL = (
    "\\copy (SELECT * FROM orders WHERE created_at < '{cutoff}') TO '/dev/null' (FORMAT binary)"
)
DELETE_SQL = "DELETE FROM orders WHERE created_at < '{cutoff}'"
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    figure: str
    value: float
    baseline: float | None
    unit: str
    target: str
    ok: bool | None

    @property
    def ratio(self) -> float | None:
        return self.value / self.baseline if self.baseline else None


def sql(url: str, query: str, *args: object) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(url)
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    return asyncio.run(run())


def psql_seconds(url: str, *commands: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url]
        + [arg for command in commands for arg in ("-c", command)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def server_share(url: str, mode: Mode, *, chosen: bool = False) -> list[str]:
    """psql commands running archiver's own statement for the whole job as one chunk --
    its select list (the exact-type expressions of pgtypes), key order and, in move mode,
    the DELETE in the form a job starts with (a key range up to the last key, waiting for
    row locks, not taking them), or `chosen`, the form that chooses its rows first --
    through the same binary COPY, with nothing on the client but psql writing to
    /dev/null: what the server alone spends on an archive."""
    with contextlib.closing(open_bulk(url)) as conn:
        queries = describe_archive(conn, "orders", "created_at", mode)
    if mode == Mode.MOVE:
        statement = queries.take(
            after_key=False,
            # the end's value is bound below, as the last key (a job's last range)
            key_range=None if chosen else KeyRange(None, "set below"),
            skip_locked=False,
            by_key_range=not chosen,
        )
    else:
        statement = queries.read(after_key=False)
    return [
        # as archiver's bind_chunk; `limit` is a keyword, so set_config instead of SET
        f"SELECT set_config('archiver.cutoff', '{CUTOFF}', false), "
        "set_config('archiver.limit', '1000000000', false), set_config('jit', 'off', false), "
        "set_config('archiver.range_through', (SELECT max(id)::text FROM orders), false)",
        f"\\copy ({statement}) TO '/dev/null' (FORMAT binary)",
    ]


def copy_statement(url: str) -> str:
    """archiver's copy statement for the whole job as one chunk, its settings written in
    (for a reader that runs it on a session of its own: DuckDB's postgres_query)."""
    with contextlib.closing(open_bulk(url)) as conn:
        statement = describe_archive(conn, "orders", "created_at", Mode.COPY).read(after_key=False)
    written = statement.replace(
        "(SELECT current_setting('archiver.cutoff')::timestamptz)", f"'{CUTOFF}'::timestamptz"
    ).replace("current_setting('archiver.limit')::bigint", "1000000000")
    if "current_setting('archiver." in written:
        raise RuntimeError(f"a setting of archiver's copy statement not written in: {written}")
    return written


class Databases:
    """Template databases holding the reference table, and throw-away copies of them."""

    def __init__(self, admin_url: str) -> None:
        self.admin = admin_url
        self.tag = f"archiver_bench_{os.getpid()}"
        self.made: list[str] = []

    def template(self, rows: int, *, migrated: bool = True) -> str:
        """The reference rows; `migrated`: with archiver's schema (this checkout's)."""
        name = f"{self.tag}_tpl_{rows}{'' if migrated else '_bare'}"
        if name not in self.made:
            sql(self.admin, f'CREATE DATABASE "{name}"')
            self.made.append(name)
            url = with_database(self.admin, name)
            if migrated:
                asyncio.run(db.migrate(url))
            seed_orders(url, rows)
            sql(url, "VACUUM (ANALYZE) orders")  # hint bits and visibility: reads stay reads
        return name

    def partitioned_template(self, rows: int) -> str:
        """The reference rows in `events`, range-partitioned by month of created_at."""
        name = f"{self.tag}_ptpl_{rows}"
        if name not in self.made:
            sql(self.admin, f'CREATE DATABASE "{name}" TEMPLATE "{self.template(rows)}"')
            self.made.append(name)
            url = with_database(self.admin, name)
            first, last = sql(url, "SELECT min(created_at), max(created_at) FROM orders")[0]
            statements = [
                "CREATE TABLE events (LIKE orders INCLUDING DEFAULTS, PRIMARY KEY (id, created_at)) "
                "PARTITION BY RANGE (created_at)",
                "CREATE INDEX ON events (created_at)",
            ]
            month = first.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            while month <= last:
                after = month.replace(
                    year=month.year + month.month // 12, month=month.month % 12 + 1
                )
                statements.append(
                    f"CREATE TABLE events_{month:%Y_%m} PARTITION OF events "
                    f"FOR VALUES FROM ('{month.isoformat()}') TO ('{after.isoformat()}')"
                )
                month = after
            statements += ["INSERT INTO events SELECT * FROM orders", "DROP TABLE orders"]
            for statement in [*statements, "VACUUM (ANALYZE) events"]:
                sql(url, statement)
        return name

    def copy(self, rows: int, partitioned: bool = False, *, migrated: bool = True) -> str:
        template = (
            self.partitioned_template(rows)
            if partitioned
            else self.template(rows, migrated=migrated)
        )
        name = f"{self.tag}_{uuid.uuid4().hex[:8]}"
        sql(self.admin, f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        self.made.append(name)
        return with_database(self.admin, name)

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        sql(self.admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.made.remove(name)

    def drop_all(self) -> None:
        for name in reversed(self.made):
            sql(self.admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.made.clear()


def env_for(url: str, storage_url: str, azurite: Azurite | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "AZURE_"))}
    env.update(ARCHIVER_DATABASE_URL=url, ARCHIVER_STORAGE_URL=storage_url, **extra)
    if azurite is not None:
        env["AZURE_STORAGE_CONNECTION_STRING"] = azurite.connection_string
    return env


def archiver_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "archiver", *args]


# Set by the tests' tiny run (tests/integration/test_bench.py), whose figures are not judged: this
# checkout's archiver processes are forked from a server that imported archiver once
# (archiver.testing.forkserver) instead of each importing it (~0.6 s of CPU, ~190 a run).
# Their peak RSS then starts at the server's; a real run never forks.
FORKED = os.environ.get("ARCHIVER_BENCH_FORKED") == "1"


def start_process(
    args: list[str], env: dict[str, str], *, cwd: Path = ROOT, quiet: bool = False
) -> Process:
    """`args` started, its output the bench's (nowhere when `quiet`)."""
    with open(os.devnull, "w") as null:
        out, err = (null, null) if quiet else (sys.stdout, sys.stderr)
        return forkserver.start(
            args, env, cwd, out.fileno(), err.fileno(), fork=FORKED and cwd == ROOT
        )


def run_process(
    args: list[str], env: dict[str, str], *, cwd: Path = ROOT, quiet: bool = False
) -> str:
    """`args` run to its end, which must exit 0: its output (its stderr shown unless
    `quiet`, and in the error if it fails)."""
    done = forkserver.run(args, env, cwd, fork=FORKED and cwd == ROOT)
    if not quiet:
        sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[1:])}: exit {done.returncode}: {done.stderr[-800:]}")
    return done.stdout


def enqueue_orders(env: dict[str, str], mode: str, *extra: str, root: Path = ROOT) -> None:
    """`archiver enqueue` of the reference rows, by the archiver at `root` (a checkout)."""
    run_process(archiver_cmd("enqueue", "--table", "orders", "--before", CUTOFF, "--mode", mode, *extra),
        env, cwd=root)  # fmt: skip


def run_workers(
    env: dict[str, str], count: int, *args: str, root: Path = ROOT, pinned: bool = False
) -> list[int]:
    """Run `count` burst workers to the end (`pinned`: each held to a core of its own by
    taskset, standing in for a machine of its own); their peak RSS in bytes, each its own
    VmHWM read every 10 ms until it exits (as wait_measured).

    Not the ru_maxrss wait4 reports: a child's starts at its parent's peak (Linux carries
    the old address space's high-water mark across exec, and Python spawns with vfork,
    whose old address space is the parent's; seen here: a 14 MB child read 314 MB after
    the parent touched 300 MB, and still after it freed them). A worker lighter than the
    bench then read as the bench (the tiny bench of a fresh clone: 165 MB both)."""
    cores = os.cpu_count() or 1
    procs = [
        start_process(
            [*(["taskset", "-c", str(i % cores)] if pinned else []),
             *archiver_cmd("worker", "--burst", *args)], env, cwd=root,
        )
        for i in range(count)
    ]  # fmt: skip
    peaks = [0] * count
    while any(proc.poll() is None for proc in procs):
        for i, proc in enumerate(procs):
            peaks[i] = max(peaks[i], high_water_mark(proc.pid))
        time.sleep(0.01)
    for proc in procs:
        if proc.returncode != 0:
            raise RuntimeError(f"worker exited with {proc.returncode}")
    return peaks


def duckdb_seconds(url: str, target: str, env: dict[str, str], statement: str = "") -> float:
    """bench.duckdb_export's seconds, in a process of its own."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.duckdb_export", url, target, CUTOFF, statement],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    ).stdout
    return float(out)


def high_water_mark(pid: int | str = "self") -> int:
    """A process's peak RSS in bytes, since its exec (VmHWM; 0 once it has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return int(status.split("VmHWM:")[1].split()[0]) * 1024 if "VmHWM:" in status else 0


def wait_measured(proc: Process) -> tuple[int, int]:
    """Wait for `proc`: (exit code, its peak RSS). The peak is its own VmHWM, read every
    10 ms until it exits (a zombie has none), not the ru_maxrss wait4 reports, which
    starts at the bench's own peak (see run_workers)."""
    peak = 0
    while (code := proc.poll()) is None:
        peak = max(peak, high_water_mark(proc.pid))
        time.sleep(0.01)
    return code, peak


def job_seconds(url: str) -> float:
    """From the first claim to the last completion of the jobs not yet measured."""
    rows = sql(
        url,
        "SELECT count(*) FILTER (WHERE status <> 'completed'), "
        "extract(epoch FROM max(finished_at) - min(started_at))::float8 "
        "FROM background_jobs WHERE NOT coalesce((progress->>'bench_seen')::bool, false)",
    )
    if rows[0][0]:
        raise RuntimeError(f"{rows[0][0]} jobs did not complete")
    sql(url, "UPDATE background_jobs SET progress = progress || '{\"bench_seen\": true}'")
    return float(rows[0][1])


def enqueue_archive(url: str, table: str, cutoff: str, chunk_rows: int | None = None) -> None:
    """What `archiver enqueue` inserts for a move of `table` (the table checked by the
    caller), without a process start per job."""
    request = ArchiveRequest(table, "created_at", cutoff, Mode.MOVE, chunk_rows)
    dedup_key, lock_key = request.keys()
    sql(url, "INSERT INTO background_jobs (task_name, payload, dedup_key, lock_key) "
              "VALUES ('archive', $1::jsonb, $2, $3)",
         json.dumps(request.payload()), dedup_key, lock_key)  # fmt: skip


def best(runs: int, measure: Callable[[], float]) -> float:
    return min(measure() for _ in range(runs))
