"""`archiver serve` read through postgres_fdw of the machine's PostgreSQL, as an
application reads `archive.orders_all` after `archiver attach`: the reference table with
~90% of its rows archived to Azurite in 100 files, the rest live.

- key lookups of random archived ids through the view, one connection: p50 and p99 of
  --serve-lookups lookups (targets 50 ms and 200 ms);
- `count(*), sum(total)` over the foreign table (pushed down: it runs inside serve)
  against the same statement through `archiver query`, each a whole client's call (the
  query's process start-up included: it is what a user waits for);
- serve's CPU per key lookup of pgbench (`\\set id random(…)` then `SELECT * FROM orders
  WHERE id = :id`, 16 clients, the extended protocol, straight to serve) against
  DuckDB's own CPU per lookup of the same keys in one process over the same files with
  serve's settings (target <= 1.5x): serve's process alone, read from /proc;
- a key lookup as a person (signed in as a role granted the table: PostgreSQL checks
  each statement in the person's session, the read audit records it) against the same
  as the configured user (recorded, not checked), pgbench's average latency on 4
  clients (target <= 1.10x, the check <= 1 ms a statement);
- serve's RSS with 20 connections each running a lookup loop for --serve-minutes: the
  highest, and the last minute's against the first (flat: ~1.0x; target <= 1 GB)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import asyncpg

from bench.common import archiver_cmd, env_for, run_process, run_workers, sql, start_process
from bench.core import Bench

PASSWORD = "bench-serve-password-0123456789"
LOOKUP = "SELECT * FROM archive.orders_all WHERE id = $1"


def serve_figures(bench: Bench) -> None:
    n = bench.args.rows
    url = bench.dbs.copy(n)
    from archiver.testing.services import free_port

    port = free_port()
    env = env_for(url, bench.storage("az"), bench.azurite, ARCHIVER_SERVE_PASSWORD=PASSWORD,
                  ARCHIVER_DELTA="false")  # fmt: skip
    archived = n - n // 10  # ids n//10+1 .. n: the oldest
    cutoff = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) - dt.timedelta(minutes=n // 10)
    server = None
    try:
        run_process(archiver_cmd("enqueue", "--table", "orders", "--before", cutoff.isoformat(),
                                 "--chunk-rows", str(max(1, archived // 120))), env)  # fmt: skip
        run_workers(env, 1)
        files = sql(url, "SELECT count(*) FROM archive_files")[0][0]
        server = start_process(
            archiver_cmd("serve", "--bind", f"127.0.0.1:{port}"), env, quiet=True
        )
        wait_for(port)
        run_process(archiver_cmd("attach", "--table", "orders", "--port", str(port),
                                 "--sslmode", "disable"), env)  # fmt: skip
        low = n // 10 + 1
        latencies = asyncio.run(_lookups(url, low, n, bench.args.serve_lookups))
        label = f"{archived:,} archived rows in {files} files"
        p50 = statistics.median(latencies)
        p99 = sorted(latencies)[max(0, int(len(latencies) * 0.99) - 1)]
        bench.add(f"serve: key lookup through archive.orders_all, p50, {label}", p50 * 1000,
                  None, "ms", "<= 50 ms", p50 <= 0.050)  # fmt: skip
        bench.add(f"serve: key lookup through archive.orders_all, p99, {label}", p99 * 1000,
                  None, "ms", "<= 200 ms", p99 <= 0.200)  # fmt: skip

        # a pgbench run each: 5 s at least in a real run, 1 s in the suite's tiny one
        seconds = max(1.0 if bench.args.quick else 5.0, bench.args.serve_minutes * 6)
        per_lookup, lookups = _pgbench_cpu(server.pid, port, low, n, seconds)
        own = _duckdb_cpu(url, env, low, n, lookups)
        bench.add(f"serve: CPU per key lookup, pgbench, 16 clients, extended protocol, {label}",
                  per_lookup * 1000, own * 1000, "ms", "<= 1.5x DuckDB's own", per_lookup <= 1.5 * own)  # fmt: skip

        person, user = _as_a_person(url, port, low, n, seconds)
        bench.add(f"serve: key lookup as a person (privilege check, audit), pgbench, 4 clients, {label}",
                  person, user, "ms", "<= 1.10x the configured user", person <= 1.10 * user)  # fmt: skip
        bench.add("serve: the privilege check's cost per statement (person - configured user)",
                  person - user, None, "ms", "<= 1 ms", person - user <= 1.0)  # fmt: skip

        aggregate = "SELECT count(*), sum(total) FROM orders"
        mine = min(
            asyncio.run(_timed(url, aggregate.replace("orders", "archive.orders")))
            for _ in range(bench.args.repeat)
        )
        theirs = min(
            _command_seconds(archiver_cmd("query", aggregate), env)
            for _ in range(bench.args.repeat)
        )
        bench.add(f"serve: count(*), sum(total) over the foreign table, {label}", mine, theirs,
                  "s", "<= 1.0x archiver query", mine <= theirs)  # fmt: skip

        seconds = bench.args.serve_minutes * 60
        rss = asyncio.run(_rss_under_load(url, server.pid, low, n, seconds))
        highest = max(rss)
        first, last = _window(rss, 0), _window(rss, -1)
        bench.add(f"serve: RSS, 20 connections in lookup loops for {seconds:g} s", highest / 2**20,
                  None, "MB", "<= 1024 MB", highest <= 2**30)  # fmt: skip
        bench.add("serve: RSS, its last minute against its first (flat: 1.0x)", last / 2**20,
                  first / 2**20, "MB", "flat", last <= first * 1.1)  # fmt: skip
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        bench.dbs.drop(url)


async def _lookups(url: str, low: int, high: int, count: int) -> list[float]:
    conn = await asyncpg.connect(url)
    rng = random.Random(1)
    try:
        await conn.fetch(LOOKUP, high)  # the foreign server's connection made
        out = []
        for _ in range(count):
            key = rng.randint(low, high)
            started = time.perf_counter()
            rows = await conn.fetch(LOOKUP, key)
            out.append(time.perf_counter() - started)
            assert len(rows) == 1 and rows[0]["_archiver_source"] == "archive", (key, rows)
        return out
    finally:
        await conn.close()


async def _timed(url: str, statement: str) -> float:
    started = time.perf_counter()
    conn = await asyncpg.connect(url)
    try:
        await conn.fetch(statement)
    finally:
        await conn.close()
    return time.perf_counter() - started


def _command_seconds(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    run_process(args, env)
    return time.perf_counter() - started


async def _rss_under_load(url: str, pid: int, low: int, high: int, seconds: float) -> list[int]:
    """serve's RSS every second while 20 connections run lookups for `seconds`."""
    stop = time.monotonic() + seconds
    samples: list[int] = []

    async def loop(seed: int) -> None:
        conn = await asyncpg.connect(url)
        rng = random.Random(seed)
        try:
            while time.monotonic() < stop:
                await conn.fetch(LOOKUP, rng.randint(low, high))
        finally:
            await conn.close()

    async def sample() -> None:
        while time.monotonic() < stop:
            samples.append(_rss(pid))
            await asyncio.sleep(1)

    await asyncio.gather(sample(), *(loop(i) for i in range(20)))
    return samples


def _cpu_seconds(pid: int) -> float:
    """A process's CPU (every thread's, user and system) so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pgbench_cpu(pid: int, port: int, low: int, high: int, seconds: float) -> tuple[float, int]:
    """serve's CPU per lookup while pgbench runs random key lookups on 16 connections
    (the extended protocol) for `seconds`, and how many it ran."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(f"\\set id random({low}, {high})\nSELECT * FROM orders WHERE id = :id;\n")
        script.flush()
        args = ["pgbench", "-n", "-M", "extended", "-c", "16", "-j", "2", "-f", script.name,
                "-h", "127.0.0.1", "-p", str(port), "-U", "archiver", "archive"]  # fmt: skip
        env = {**os.environ, "PGPASSWORD": PASSWORD, "PGSSLMODE": "disable"}
        subprocess.run([*args, "-t", "20"], env=env, check=True, capture_output=True)  # warm
        before = _cpu_seconds(pid)
        done = subprocess.run([*args, "-T", str(int(seconds))], env=env, check=True,
                              capture_output=True, text=True)  # fmt: skip
        spent = _cpu_seconds(pid) - before
    found = re.search(r"number of transactions actually processed: (\d+)", done.stdout)
    failed = re.search(r"number of failed transactions: (\d+)", done.stdout)
    assert found and int(found.group(1)) > 0, done.stdout
    assert failed is None or int(failed.group(1)) == 0, done.stdout
    lookups = int(found.group(1))
    return spent / lookups, lookups


def _as_a_person(url: str, port: int, low: int, high: int, seconds: float) -> tuple[float, float]:
    """pgbench's average latency of a key lookup (ms, 4 clients, the extended protocol)
    as a role granted the table, each statement checked by PostgreSQL in its own session
    and recorded, and as the configured user, who is recorded and not checked: the
    check's cost, the audit on both sides."""
    reader = f"bench_reader_{os.getpid()}"
    sql(url, f"CREATE ROLE {reader} LOGIN PASSWORD '{PASSWORD}'")
    try:
        sql(url, f"GRANT SELECT ON orders TO {reader}")
        _eventually(lambda: _reads(port, reader))  # a pass of serve's mirror of the grants
        person = pgbench_latency(port, low, high, reader, seconds)
        user = pgbench_latency(port, low, high, "archiver", seconds)
        return person, user
    finally:
        sql(url, f"REVOKE ALL ON orders FROM {reader}")
        sql(url, f"DROP OWNED BY {reader}")
        _eventually(lambda: _dropped(url, reader))  # once the mirror revoked it too


def _eventually(done: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("serve's mirror of the grants did not follow")
        time.sleep(0.2)


def _reads(port: int, role: str) -> bool:
    args = ["psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", role, "-d", "archive",
            "-c", "SELECT id FROM orders LIMIT 1"]  # fmt: skip
    env = {**os.environ, "PGPASSWORD": PASSWORD, "PGSSLMODE": "disable"}
    return subprocess.run(args, env=env, capture_output=True).returncode == 0


def _dropped(url: str, role: str) -> bool:
    try:
        sql(url, f"DROP ROLE IF EXISTS {role}")
    except Exception:  # its privileges in serve's definitions database not revoked yet
        return False
    return True


def pgbench_latency(
    port: int, low: int, high: int, user: str, seconds: float, table: str = "orders"
) -> float:
    """pgbench's average latency (ms) of a lookup of a random key of `table` through serve
    on `port`: 4 clients, the extended protocol."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(f"\\set id random({low}, {high})\nSELECT * FROM {table} WHERE id = :id;\n")
        script.flush()
        args = ["pgbench", "-n", "-M", "extended", "-c", "4", "-j", "2", "-f", script.name,
                "-h", "127.0.0.1", "-p", str(port), "-U", user, "archive"]  # fmt: skip
        env = {**os.environ, "PGPASSWORD": PASSWORD, "PGSSLMODE": "disable"}
        subprocess.run([*args, "-t", "20"], env=env, check=True, capture_output=True)  # warm
        done = subprocess.run([*args, "-T", str(int(seconds))], env=env, check=True,
                              capture_output=True, text=True)  # fmt: skip
    found = re.search(r"latency average = ([0-9.]+) ms", done.stdout)
    assert found, done.stdout
    return float(found.group(1))


def _duckdb_cpu(url: str, env: dict[str, str], low: int, high: int, count: int) -> float:
    """DuckDB's own CPU per lookup: one process, the same random keys, each read from
    the file holding it, with serve's settings (its external file and metadata caches,
    its threads), warmed as serve is."""
    files = sql(url, "SELECT path, min_key[1]::bigint, max_key[1]::bigint FROM archive_files "
                     "WHERE state = 'committed' ORDER BY 2")  # fmt: skip
    code = f"""
import bisect, os, random, resource, sys
import duckdb
from archiver.config import Settings
from archiver.query.engine import _azure_secret, load_extension
settings = Settings.from_env()
location = settings.storage_location()
db = duckdb.connect(config={{"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}})
if location.scheme == "az":
    load_extension(db, "azure")
    _azure_secret(db, settings)
db.execute("SET parquet_metadata_cache = true")
db.execute("SET validate_external_file_cache = 'NO_VALIDATION'")
db.execute(f"SET threads = {{settings.serve_threads}}")
db.execute(f"SET memory_limit = '{{int(settings.serve_memory_limit)}}B'")
files = {[(str(r[0]), int(r[1]), int(r[2])) for r in files]!r}
lows = [f[1] for f in files]
rng = random.Random(7)
def lookup(key):
    path = files[bisect.bisect_right(lows, key) - 1][0]
    rows = db.execute("SELECT * FROM read_parquet($1) WHERE id = $2", [location.reader_uri(path), key]).to_arrow_table()
    assert rows.num_rows <= 1
for f in files:
    lookup(f[1])
before = resource.getrusage(resource.RUSAGE_SELF)
for _ in range({count}):
    lookup(rng.randint({low}, {high}))
after = resource.getrusage(resource.RUSAGE_SELF)
print((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / {count})
"""
    return float(run_process([sys.executable, "-c", code], env, quiet=True).strip())


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _window(samples: list[int], end: int) -> int:
    """The highest sample of the first (end 0) or last (end -1) minute."""
    part = samples[:60] if end == 0 else samples[-60:]
    return max(part) if part else 0


def wait_for(port: int, timeout: float = 60) -> None:
    """Until serve accepts connections on `port`."""
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"serve did not listen on {port}")
