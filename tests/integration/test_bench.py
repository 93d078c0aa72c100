"""The benchmark cannot rot: a tiny run of each section prints every figure (times are
not asserted). One test per group of sections, each 30-80 s, so the test processes
share them instead of one process running the whole bench for five minutes."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

import pytest

from tests.support import ADMIN_URL, ROOT, WHEEL_LIBRARY

pytestmark = pytest.mark.slow

# Each group: the sections it runs (--against HEAD where "against" is named: the
# interleaved comparison with the last commit), and the figures it must print.
GROUPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "queue": (
        ("queue", "against"),
        (
            "enqueue -> claimed p50",
            "enqueue -> claimed p99",
            "no-op jobs, batch shortcut",
            "one-row archive job, claim -> completed",
            "one-row archive jobs, 2 workers x 4",
            "copy mode -> file://, the job's own time, against",
            "enqueue && worker --burst, copy -> file://, end to end, against",
            "move mode -> Azurite, the job's own time, against",
            "nightly slice, 2 of 2,000 rows copied, the job's own time, against",
            "archiver query count(*), sum(total) over the moved rows, the command, against",
            "restore of a day (1,440 rows) out of the moved rows, the command, against",
        ),
    ),
    "data": (
        ("data", "memory", "footprint"),
        (
            "floor: psql",
            "copy mode -> file://",
            "DuckDB postgres_scanner -> one zstd Parquet file",
            "copy mode -> file://, against that DuckDB export",
            "copy mode -> Azurite",
            "DuckDB postgres_scanner -> Azurite, one zstd Parquet file",
            "copy mode -> Azurite, against that DuckDB export",
            "raw DELETE",
            "enqueue && worker --burst, end to end",
            "move mode -> Azurite",
            "move mode -> Azurite, with its Delta Lake publication",
            "copy mode -> file://, --adbc-driver, ARCHIVER_COPY_CONNECTIONS=2",
            "copy mode -> Azurite, --adbc-driver",
            "move mode -> Azurite, --adbc-driver",
            "worker peak RSS, 2,000 rows",
            "worker peak RSS, 6,000 rows",
            "floor: psql \\copy binary, whole-machine CPU, 4,000 rows",
            "DuckDB export, whole-machine CPU",
            "archiver's copy statement alone, psql \\copy, whole-machine CPU",
            "backlog copy -> file://, whole-machine CPU, against DuckDB's export",
            "backlog copy -> file://, wall end to end, against DuckDB's export",
            "backlog copy: bytes of its files, against DuckDB's zstd file",
            "backlog move -> file://, whole-machine CPU per row, 4,000 rows",
        ),
    ),
    "restore": (
        ("restore", "partitions"),
        (
            "restore a day (1,440 rows) out of files of 2,000 rows",
            "restore every row (2,000) back",
            "restore a day out of files of 2,000 rows (Azurite), with its Delta publication",
            "restore's peak RSS, every row (2,000)",
            "move by rows, 6,000 rows by month",
            "move by whole partitions, 6,000 rows by month",
            "WAL of the move by rows",
            "WAL of the move by whole partitions",
        ),
    ),
    "scale": (
        ("scale",),
        (
            "--parallel 2, 1 worker",
            "--parallel 2, 2 workers",
            "the same, per 1M rows, against 2,000 rows",
            "its workers' peak RSS, against 2,000 rows",
            "its WAL per row, against 2,000 rows",
            "daily-style copy, 2 of 2,000 rows: job time",
            "daily-style move, 20 of 20,000 rows: tuples + index entries read",
            "archiver query, full count of 2,000 archived rows",
            "archiver query, key lookup (id = 1,000): 1 of 20 files read",
            "archiver query, one day's count (",
        ),
    ),
    "catalog": (
        ("catalog", "console"),
        (
            "archiver status, 3,000 jobs / 2,000 files",
            "claim p99, 3,000 jobs / 2,000 files",
            "prune 3,000 finished jobs",
            "3 policies, one slot: the latest job queued after its slot",
        ),
    ),
    "reads": (
        ("erase", "live", "tpch", "serve", "files"),  # one bench process: its start-up once
        (
            "erase one customer (1 row) from a 20,000-row archive",
            "files that erase rewrote, of",
            "query --with-live, count(*), half of 2,000 rows archived",
            "query --with-live, key lookup (an archived id, 1,500)",
            "query --with-live, one day's rows (archived), count and sum",
            "query --with-live over 20,000 archived rows (Azurite), key lookup (id = 10,000): files",
            "query --with-live over 20,000 archived rows (Azurite), one day's count: files read",
            "TPC-H Q1 (SF 0.01), query --with-live",
            "TPC-H Q3 (SF 0.01), query --with-live",
            "TPC-H Q6 (SF 0.01), query --with-live",
            "serve: key lookup through archive.orders_all, p50, 1,800 archived rows in",
            "serve: key lookup through archive.orders_all, p99, 1,800 archived rows in",
            "serve: CPU per key lookup, pgbench, 16 clients, extended protocol, 1,800 archived rows in",
            "serve: key lookup as a person (privilege check, audit), pgbench, 4 clients, 1,800 archived rows in",
            "serve: the privilege check's cost per statement (person - configured user)",
            "serve: count(*), sum(total) over the foreign table, 1,800 archived rows in",
            "serve: RSS, 20 connections in lookup loops for 3 s",
            "serve: RSS, its last minute against its first (flat: 1.0x)",
            "files: serve key lookup, pgbench, 4 clients, 1,120 archived rows in 40 files against 1",
            "files: query --with-live count(*), sum(total) of half the customers, 1,120 archived",
            "files: query count(*), 1,120 archived rows in 40 files against 1",
        ),
    ),
    "years": (
        ("years", "iceberg"),
        (
            "iceberg: 10 nightly jobs of 288 rows archived and published",
            "iceberg: pyiceberg opens and plans 10 nightly publications",
            "iceberg: the same after maintenance (compaction: 1 files",
            "iceberg REST: a table's load with a vended SAS at 10 tables (median)",
            "iceberg REST: listing the catalog's 10 tables, per table (median)",
            "years: 15 daily jobs of 288 rows archived",
            "years: erase of one customer the day of the compaction (15 kept inputs deleted",
            "years, before maintenance: query --with-live 'SELECT 1' (against an empty catalog)",
            "years: compaction's peak RSS, against the archive jobs' worker's",
            "years, after maintenance: query of one week by created_at, against one file",
            "years, after maintenance: erase of one customer, against one file",
            "years: the daily table's bytes in files of 0.5-2x 128 MB or its one file",
            "years: delta-rs opens a table of 300 commits",
        ),
    ),
}


@functools.cache
def sections() -> list[str]:
    """The bench's sections, as its --help names them (tests do not import bench/)."""
    usage = subprocess.run(
        [sys.executable, "-m", "bench.run", "--help"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    found = re.search(r"--skip \{([a-z,]+)\}", usage)
    assert found, usage
    return found.group(1).split(",")


def test_the_groups_cover_every_section() -> None:
    named = [s for names, _ in GROUPS.values() for s in names if s != "against"]
    assert sorted(named) == sorted(sections())


@pytest.mark.parametrize("group", GROUPS)
def test_tiny_bench_prints_every_figure(group: str) -> None:
    names, expected = GROUPS[group]
    args = [sys.executable, "-m", "bench.run", "--rows", "2000", "--quick"]
    args += ["--admin-url", ADMIN_URL]
    args += ["--adbc-driver", str(WHEEL_LIBRARY)]  # the wheel's own library, by path
    args += ["--against", "HEAD"] if "against" in names else []
    args += [f"--skip={s}" for s in sections() if s not in names]
    forked = {**os.environ, "ARCHIVER_BENCH_FORKED": "1"}  # bench/common.py: figures not judged
    result = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT, env=forked)
    assert result.returncode == 0, result.stderr[-5000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("archiver bench: ") and "cores" in lines[0]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| figure")]
    figures = [r.split(" | ")[0].lstrip("| ") for r in rows]
    for figure in expected:  # the whole list in the message: pytest shortens a tuple's
        assert any(figure in f for f in figures), f"{figure!r} not among:\n" + "\n".join(figures)
    assert all(len(r.split(" | ")) == 6 for r in rows)
