"""The archive years on: a table archived by one job a day for --years years (288
reference rows a day, a customer_id each customer has one row a day of), beside the same
rows archived by one job into one file, and a third table of 1,000 small files a year
(one job, chunks of 12 rows: the catalog's count of files, never compacted); every command a user runs, timed as a whole
command on each, before and after the workers' maintenance (compaction); the files'
count and sizes, the Delta log's objects and the time delta-rs takes to open it; the
peak RSS of compaction against a worker's; and a Delta log of --years of hourly
publications (8,760 a year), written by archiver's own commit writer and tidied as its
publisher does (a checkpoint every 100 versions), opened by delta-rs."""

from __future__ import annotations

import datetime as dt
import json
import statistics
import time
from typing import Any

from archiver.delta.commits import CHECKPOINT_EVERY, tidy
from archiver.lifecycle.compact import DEFAULT_TARGET
from bench.common import (
    archiver_cmd,
    enqueue_archive,
    env_for,
    run_process,
    run_workers,
    sql,
    start_process,
    wait_measured,
)
from bench.core import Bench

PER_DAY = 288  # a row every 5 minutes
SMALL_PER_YEAR, SMALL_ROWS = 1_000, 12  # the third table's files: an hour of rows each
END = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
TABLE = (
    "CREATE TABLE {name} (LIKE orders INCLUDING ALL)",
    "ALTER TABLE {name} ADD COLUMN customer_id int NOT NULL DEFAULT 0",
    """INSERT INTO {name}
       SELECT g, md5(g::text)::uuid, (ARRAY['new','paid','shipped','cancelled'])[1 + g % 4]::order_status,
              round((g % 100000) * 1.37, 2), 'EUR',
              timestamptz '2025-01-01 00:00:00+00' - make_interval(mins => 5 * g::int),
              now(), jsonb_build_object('sku', 'A' || g), ARRAY['t' || (g % 5)], 'note ' || g,
              g % {per_day}
       FROM generate_series(1, {rows}) g""",
    "VACUUM (ANALYZE) {name}",
)


def years_on(bench: Bench) -> None:
    years, repeat = bench.args.years, bench.args.repeat
    days = max(2, round(years * 365))
    rows = days * PER_DAY
    url = bench.dbs.copy(0)
    empty = bench.dbs.copy(0)
    storage = bench.storage("az")
    env = env_for(url, storage, bench.azurite, ARCHIVER_DELTA="true", ARCHIVER_COMPACT="false")
    bare = env_for(empty, bench.storage("az"), bench.azurite, ARCHIVER_DELTA="true")
    try:
        small = max(100, round(years * SMALL_PER_YEAR))
        for name, n in (("daily", rows), ("single", rows), ("small", small * SMALL_ROWS)):
            for statement in TABLE:
                sql(url, statement.format(name=name, rows=n, per_day=PER_DAY))
        started = time.monotonic()
        for day in range(days - 1, -1, -1):  # a job a day, oldest first
            enqueue_archive(url, "public.daily", (END - dt.timedelta(days=day)).isoformat())
        enqueue_archive(url, "public.single", END.isoformat())
        enqueue_archive(url, "public.small", END.isoformat(), SMALL_ROWS)
        worker_peak = max(run_workers(env, 2))
        built = time.monotonic() - started
        files = _files(url, "public.daily")
        every = int(sql(url, "SELECT count(*) FROM archive_files WHERE state = 'committed'")[0][0])
        bench.add(f"years: {days:,} daily jobs of {PER_DAY} rows archived ({files:,} files; "
                  f"{every:,} in the catalog)", built, None, "s", "(reported)", None)  # fmt: skip
        week = (END - dt.timedelta(days=days // 2), END - dt.timedelta(days=days // 2 - 7))
        before = _commands(env, bare, repeat, week)
        for figure, (mine, theirs) in before.items():
            bench.add(f"years, before maintenance: {figure}", mine, theirs, "s", "(reported)", None)
        code, compact_peak, seconds = _measured(env, "compact", "--table", "daily")
        assert code == 0
        run_workers(env, 1)  # what compaction queued: nothing; the sweep of its inputs
        bench.add("years: compaction of the daily table", seconds, None, "s", "(reported)", None)
        bench.add("years: compaction's peak RSS, against the archive jobs' worker's",
                  compact_peak / 2**20, worker_peak / 2**20, "MB", "<= 1.0x",
                  compact_peak <= worker_peak)  # fmt: skip
        after = _commands(env, bare, repeat, week)
        for figure, (mine, theirs) in after.items():
            target = "<= 1.1x" if "SELECT 1" in figure else "<= 1.2x"
            limit = 1.1 if "SELECT 1" in figure else 1.2
            bench.add(f"years, after maintenance: {figure}", mine, theirs, "s", target,
                      mine <= limit * theirs)  # fmt: skip
        sizes = [r[0] for r in sql(url, "SELECT byte_size FROM archive_files WHERE "
                                        "source_table = 'public.daily' AND state = 'committed'")]  # fmt: skip
        near = sum(s for s in sizes if 0.5 * DEFAULT_TARGET <= s <= 2 * DEFAULT_TARGET)
        share = 1.0 if len(sizes) == 1 else near / max(1, sum(sizes))  # one file: the period's
        bench.add(f"years: the daily table's bytes in files of 0.5-2x 128 MB or its one file "
                  f"({len(sizes)} files, {min(sizes):,}-{max(sizes):,} bytes)",
                  share * 100, None, "%", ">= 95%", share >= 0.95)  # fmt: skip
        objects, opened = _delta_open(bench, storage, "public.daily", repeat)
        bench.add(f"years: delta-rs opens the daily table ({objects:,} log objects)", opened,
                  None, "s", "(reported)", None)  # fmt: skip
        one = END - dt.timedelta(days=days // 3)
        restore = ["restore", "--table", "{t}", "--from", one.isoformat(),
                   "--to", (one + dt.timedelta(days=1)).isoformat()]  # fmt: skip
        mine, theirs = _both(env, restore)
        bench.add("years, after maintenance: restore of a day, against one file", mine, theirs,
                  "s", "<= 1.2x", mine <= 1.2 * theirs)  # fmt: skip
        # An erasure the day of a compaction deletes its kept inputs at once (they hold
        # the erased rows too): 3,650 blobs here, once. The figure the target is about
        # is the next, once the readers' retention has passed and the sweep reaped them.
        mine, theirs = _both(env, ["erase", "--table", "{t}", "--where", "customer_id = 41"])
        bench.add(f"years: erase of one customer the day of the compaction ({files:,} kept "
                  "inputs deleted with it), against one file", mine, theirs, "s", "(reported)",
                  None)  # fmt: skip
        _a_day_later(env, url)
        mine, theirs = _both(env, ["erase", "--table", "{t}", "--where", "customer_id = 42"])
        bench.add("years, after maintenance: erase of one customer, against one file", mine,
                  theirs, "s", "<= 1.2x", mine <= 1.2 * theirs)  # fmt: skip
    finally:
        bench.dbs.drop(url)
        bench.dbs.drop(empty)
    hourly_log(bench, round(years * 8760 if not bench.args.quick else 300))


def _files(url: str, table: str) -> int:
    return int(sql(url, "SELECT count(*) FROM archive_files WHERE source_table = $1 "
                        "AND state = 'committed'", table)[0][0])  # fmt: skip


def _seconds(env: dict[str, str], *args: str) -> float:
    started = time.monotonic()
    run_process(archiver_cmd(*args), env, quiet=True)
    return time.monotonic() - started


def _measured(env: dict[str, str], *args: str) -> tuple[int, int, float]:
    started = time.monotonic()
    proc = start_process(archiver_cmd(*args), env, quiet=True)
    code, peak = wait_measured(proc)
    return code, peak, time.monotonic() - started


def _best(repeat: int, *args: str, env: dict[str, str]) -> float:
    return min(_seconds(env, *args) for _ in range(repeat))


def _commands(
    env: dict[str, str], bare: dict[str, str], repeat: int, week: tuple[dt.datetime, dt.datetime]
) -> dict[str, tuple[float, float]]:
    """Each read-only command on the daily table against the same on the one file (and
    `SELECT 1` against a database with an empty catalog): (seconds, baseline)."""
    lo, hi = week[0].isoformat(), week[1].isoformat()
    out = {
        "query --with-live 'SELECT 1' (against an empty catalog)": (
            _best(repeat, "query", "--with-live", "SELECT 1", env=env),
            _best(repeat, "query", "--with-live", "SELECT 1", env=bare),
        )
    }
    for figure, args in (
        ("query count(*), sum(total)", ["query", "SELECT count(*), sum(total) FROM {t}"]),
        ("query of one week by created_at",
         ["query", f"SELECT count(*) FROM {{t}} WHERE created_at >= '{lo}' AND created_at < '{hi}'"]),
        ("query --with-live count(*)", ["query", "--with-live", "SELECT count(*) FROM {t}"]),
    ):  # fmt: skip
        mine = _best(repeat, *[a.format(t="daily") for a in args], env=env)
        theirs = _best(repeat, *[a.format(t="single") for a in args], env=env)
        out[f"{figure}, against one file"] = (mine, theirs)
    return out


def _both(env: dict[str, str], args: list[str]) -> tuple[float, float]:
    """A command once on the daily table, then once on the one file: (seconds, baseline)."""
    mine = _seconds(env, *[a.format(t="daily") for a in args])
    return mine, _seconds(env, *[a.format(t="single") for a in args])


def _a_day_later(env: dict[str, str], url: str) -> None:
    """The readers' retention passed: the workers' sweep reaps what compaction took out."""
    sql(url, "UPDATE archive_files SET kept_until = now() WHERE kept_until > now()")
    run_workers(env, 1)
    left = sql(url, "SELECT count(*) FROM archive_files WHERE state = 'retired'")[0][0]
    if left:
        raise RuntimeError(f"years: {left} retired files left after the sweep")


def _delta_open(bench: Bench, storage: str, table: str, repeat: int) -> tuple[int, float]:
    """The Delta log's objects of `table` and delta-rs's best time to open it."""
    from azure.storage.blob import ContainerClient
    from deltalake import DeltaTable

    container, prefix = storage.removeprefix("az://").split("/", 1)
    client = ContainerClient.from_connection_string(bench.azurite.connection_string, container)
    objects = sum(1 for _ in client.list_blobs(name_starts_with=f"{prefix}/{table}/_delta_log/"))
    uri = f"{storage}/{table}"
    options = _options(bench)
    times = []
    for _ in range(repeat):
        started = time.monotonic()
        DeltaTable(uri, storage_options=options).file_uris()
        times.append(time.monotonic() - started)
    return objects, min(times)


def _options(bench: Bench) -> dict[str, str]:
    return dict(bench.azurite.delta_options)


def hourly_log(bench: Bench, commits: int) -> None:
    """A Delta table of `commits` hourly publications of one file each, the newest now,
    written as archiver's publisher writes its commits (put-if-absent of the next
    version, an app transaction) and tidied as it does every CHECKPOINT_EVERY versions:
    a checkpoint, and the log entries older than the table's log retention (30 days)
    deleted. Written on the local file system, each entry dated its hour (Azurite's
    objects cannot be dated back, and delta-rs expires entries by their storage date),
    then copied to Azurite as it is: the log a table of that age holds. Then delta-rs
    opens it there."""
    import os
    import tempfile
    from pathlib import Path

    import pyarrow as pa
    from azure.storage.blob import ContainerClient
    from deltalake import DeltaTable, write_deltalake

    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "public.hourly"
        write_deltalake(str(root), pa.table({"id": pa.array([0], pa.int64())}))
        log_dir = root / "_delta_log"
        first = now - (commits + 1) * 3600
        os.utime(log_dir / f"{0:020d}.json", (first, first))
        started = time.monotonic()
        for version in range(1, commits + 1):
            hour = now - (commits - version) * 3600
            stamp = int(hour * 1000)
            actions: list[dict[str, Any]] = [
                {"commitInfo": {"timestamp": stamp, "operation": "WRITE", "engineInfo": "archiver"}},
                {"txn": {"appId": "archiver", "version": version, "lastUpdated": stamp}},
                {"add": {"path": f"job-{version}.parquet", "partitionValues": {}, "size": 1000,
                         "modificationTime": stamp, "dataChange": True,
                         "stats": json.dumps({"numRecords": 12, "minValues": {"id": version},
                                              "maxValues": {"id": version}, "nullCount": {"id": 0}})}},
            ]  # fmt: skip
            entry = log_dir / f"{version:020d}.json"
            with entry.open("x") as f:  # put-if-absent
                f.write("\n".join(json.dumps(a) for a in actions) + "\n")
            os.utime(entry, (hour, hour))
            if version % CHECKPOINT_EVERY == 0:
                tidy(DeltaTable(str(root)))
                for made in log_dir.glob(f"{version:020d}.checkpoint*.parquet"):
                    os.utime(made, (hour, hour))  # written at its hour, as the publisher's
        written = time.monotonic() - started
        storage = bench.storage("az")
        container, prefix = storage.removeprefix("az://").split("/", 1)
        client = ContainerClient.from_connection_string(bench.azurite.connection_string, container)
        client.create_container()
        objects = sorted(log_dir.iterdir())
        for path in objects:
            client.upload_blob(f"{prefix}/public.hourly/_delta_log/{path.name}", path.read_bytes())
    uri, options = f"{storage}/public.hourly", _options(bench)
    times = []
    for _ in range(max(3, bench.args.repeat)):
        begun = time.monotonic()
        table = DeltaTable(uri, storage_options=options)
        assert table.version() == commits and len(table.file_uris()) == commits + 1
        times.append(time.monotonic() - begun)
    bench.add(f"years: {commits:,} hourly publications written and tidied ({len(objects):,} log "
              "objects left)", written, None, "s", "(reported)", None)  # fmt: skip
    bench.add(f"years: delta-rs opens a table of {commits:,} commits on Azurite (median of "
              f"{len(times)})", statistics.median(times), None, "s", "<= 2 s",
              statistics.median(times) <= 2)  # fmt: skip
