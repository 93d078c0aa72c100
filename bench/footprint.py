"""What an archive costs the machine and the storage account: whole-machine CPU-seconds
and the bytes of the files, against DuckDB's export of the same rows (the best exporter
here) and against `psql \\copy` to /dev/null (the floor).

Each run is timed and charged from outside: the busy jiffies of `/proc/stat` (every
process: PostgreSQL's backends, the client, its start-up) and the wall clock, around
`archiver enqueue && archiver worker --burst` (copy mode, the backlog plan, file storage,
no Delta publication: DuckDB writes a plain Parquet file), around `python -m
bench.duckdb_export` (zstd, a thread per core), around psql. The three are interleaved
and each figure is the median of --repeat runs. A move is charged the same way on a
fresh copy of the table, against `psql \\copy` and a raw DELETE of the same rows."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from archiver.model import Mode
from bench.common import (
    CUTOFF,
    DELETE_SQL,
    FLOOR_SQL,
    duckdb_seconds,
    enqueue_orders,
    env_for,
    psql_seconds,
    run_workers,
    server_share,
)
from bench.core import Bench

BACKLOG = {"ARCHIVER_BACKLOG_MIN_ROWS": "1", "ARCHIVER_DELTA": "false"}  # the backlog plan


def busy_seconds() -> float:
    """The machine's CPU-seconds so far, every core and process (idle and iowait left out)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def charged(run: Callable[..., object], *args: Any) -> tuple[float, float]:
    """(whole-machine CPU-seconds, wall seconds) of `run(*args)`."""
    cpu, wall = busy_seconds(), time.perf_counter()
    run(*args)
    return busy_seconds() - cpu, time.perf_counter() - wall


def archive(env: dict[str, str], mode: str) -> None:
    """`archiver enqueue` of the reference rows, then a burst worker to the end."""
    enqueue_orders(env, mode)
    run_workers(env, 1)


def parquet_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet") if "_delta_log" not in p.parts)


def footprint(bench: Bench) -> None:
    rows = 2 * bench.args.rows
    url = bench.dbs.copy(rows)
    floor: list[tuple[float, float]] = []
    server: list[tuple[float, float]] = []
    duck: list[tuple[float, float, int]] = []
    mine: list[tuple[float, float, int]] = []
    try:
        statement = server_share(url, Mode.COPY)  # archiver's select list, nothing written
        for _ in range(bench.args.repeat):
            floor.append(charged(psql_seconds, url, FLOOR_SQL.format(cutoff=CUTOFF)))
            server.append(charged(psql_seconds, url, *statement))
            target = bench.tmp / "footprint-duckdb.parquet"
            cpu, wall = charged(duckdb_seconds, url, str(target), dict(os.environ))
            duck.append((cpu, wall, target.stat().st_size))
            target.unlink()
            store = bench.tmp / f"footprint-{len(mine)}"
            cpu, wall = charged(archive, env_for(url, f"file://{store}", None, **BACKLOG), "copy")
            mine.append((cpu, wall, parquet_bytes(store)))
    finally:
        bench.dbs.drop(url)

    def median(runs: Sequence[tuple[float, ...]], i: int) -> float:
        return statistics.median(r[i] for r in runs)

    label = f"{rows:,} rows"
    bench.add(f"floor: psql \\copy binary, whole-machine CPU, {label}", median(floor, 0), None,
              "CPU-s", "", None)  # fmt: skip
    bench.add(f"DuckDB export, whole-machine CPU, {label}", median(duck, 0), median(floor, 0),
              "CPU-s", "(reported: against the floor)", None)  # fmt: skip
    bench.add(f"archiver's copy statement alone, psql \\copy, whole-machine CPU, {label}",
              median(server, 0), median(floor, 0), "CPU-s",
              "(reported: the server's share, against the floor)", None)  # fmt: skip
    cpu, theirs = median(mine, 0), median(duck, 0)
    bench.add(f"backlog copy -> file://, whole-machine CPU, against DuckDB's export, {label}",
              cpu, theirs, "CPU-s", "<= 1.0x", cpu <= theirs)  # fmt: skip
    wall, theirs = median(mine, 1), median(duck, 1)
    bench.add(f"backlog copy -> file://, wall end to end, against DuckDB's export, {label}",
              wall, theirs, "s", "<= 1.0x", wall <= theirs)  # fmt: skip
    size, theirs = median(mine, 2) / 1e6, median(duck, 2) / 1e6
    bench.add(f"backlog copy: bytes of its files, against DuckDB's zstd file, {label}",
              size, theirs, "MB", "<= 1.0x", size <= theirs)  # fmt: skip
    move_cpu(bench, rows)


def move_cpu(bench: Bench, rows: int) -> None:
    """A backlog move's CPU per row against psql's \\copy and a raw DELETE of the rows."""
    theirs: list[float] = []
    mine: list[float] = []
    for _ in range(bench.args.repeat):
        url = bench.dbs.copy(rows)
        try:
            commands = [FLOOR_SQL.format(cutoff=CUTOFF), DELETE_SQL.format(cutoff=CUTOFF)]
            theirs.append(charged(psql_seconds, url, *commands)[0])
        finally:
            bench.dbs.drop(url)
        url = bench.dbs.copy(rows)
        try:
            env = env_for(url, bench.storage("file"), None, **BACKLOG)
            mine.append(charged(archive, env, "move")[0])
        finally:
            bench.dbs.drop(url)
    per_row = statistics.median(mine) / rows * 1e6
    floor = statistics.median(theirs) / rows * 1e6
    bench.add(f"backlog move -> file://, whole-machine CPU per row, {rows:,} rows", per_row,
              floor, "µs", "(reported: against psql \\copy + a raw DELETE)", None)  # fmt: skip
