"""The Iceberg table a year on: a table archived by one job a night for a year (288
reference rows a night) with ARCHIVER_ICEBERG on, beside the same rows archived by one
job; the time pyiceberg takes to open each table from the catalog and plan a scan of it
(every data file listed), the year's table against the one publication's, before and
after the maintenance that merges its small files (`archiver compact`).

The nights here come seconds apart, not a day: the workers keep snapshots for
ARCHIVER_READER_RETENTION seconds, so the section sets it to 2 s, which keeps as many of
these publications as a day's retention keeps of nightly ones (the one before and the
current)."""

from __future__ import annotations

import datetime as dt
import signal
import time
from typing import Any

from bench.common import archiver_cmd, enqueue_archive, env_for, run_process, sql, start_process
from bench.core import Bench
from bench.years import TABLE

NIGHTS, PER_NIGHT = 365, 288  # a row every 5 minutes (bench.years.TABLE)
END = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def iceberg_year(bench: Bench) -> None:
    nights = 30 if bench.args.quick else NIGHTS
    url = bench.dbs.copy(0)
    storage = bench.storage("az")
    env = env_for(
        url, storage, bench.azurite, ARCHIVER_DELTA="true", ARCHIVER_ICEBERG="true",
        ARCHIVER_COMPACT="false", ARCHIVER_READER_RETENTION="2",
    )  # fmt: skip
    try:
        rows = nights * PER_NIGHT
        for name in ("nightly", "once"):
            for statement in TABLE:
                sql(url, statement.format(name=name, rows=rows, per_day=PER_NIGHT))
        started = time.monotonic()
        worker = start_process(archiver_cmd("worker"), env, quiet=True)
        try:  # a job a night, oldest first, each published before the next comes
            for night in range(nights):
                cutoff = END - dt.timedelta(days=nights - 1 - night)
                enqueue_archive(url, "public.nightly", cutoff.isoformat())
                _published(url, "public.nightly", night + 1, worker)
            enqueue_archive(url, "public.once", END.isoformat())
            _published(url, "public.once", 1, worker)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
        built = time.monotonic() - started
        bench.add(f"iceberg: {nights} nightly jobs of {PER_NIGHT} rows archived and published",
                  built, None, "s", "(reported)", None)  # fmt: skip
        catalog = _catalog(url, bench)
        try:
            (mine, theirs), shape = _open_and_plan(catalog, bench.args.repeat)
            bench.add(f"iceberg: pyiceberg opens and plans {nights} nightly publications "
                      f"({shape}), against one publication", mine, theirs, "s", "(reported)",
                      None)  # fmt: skip
            run_process(archiver_cmd("compact", "--table", "nightly"), env, quiet=True)
            (mine, theirs), shape = _open_and_plan(catalog, bench.args.repeat)
        finally:
            catalog.engine.dispose()
        bench.add(f"iceberg: the same after maintenance (compaction: {shape}), against one "
                  "publication", mine, theirs, "s", "<= 1.2x", mine <= 1.2 * theirs)  # fmt: skip
    finally:
        bench.dbs.drop(url)


def _published(url: str, table: str, publications: int, worker: Any) -> None:
    """Wait until `table`'s Iceberg table holds its `publications`-th publication."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = sql(url, "SELECT iceberg_published FROM delta_tables WHERE source_table = $1",
                    table)  # fmt: skip
        if found and found[0][0] is not None and found[0][0] >= publications:
            return
        if worker.poll() is not None:
            raise RuntimeError(f"iceberg: the worker exited ({worker.poll()})")
        time.sleep(0.02)
    raise RuntimeError(f"iceberg: {table}'s publication {publications} never came")


def _catalog(url: str, bench: Bench) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        "archive",
        uri="postgresql+psycopg://" + url.split("://", 1)[1],
        init_catalog_tables="false",
        **{
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            "adls.connection-string": bench.azurite.connection_string,
            "adls.account-name": "devstoreaccount1",
        },
    )


def _open_and_plan(catalog: Any, repeat: int) -> tuple[tuple[float, float], str]:
    """The best times to load each table and list its scan's files, the nightly table's
    and the one publication's in turn (a drift of the machine hits both), and the
    nightly table's shape."""
    times: dict[str, list[float]] = {"nightly": [], "once": []}
    shape = ""
    for _ in range(max(repeat, 3) * 3):
        for name in times:
            started = time.monotonic()
            table = catalog.load_table(("public", name))
            files = list(table.scan().plan_files())
            times[name].append(time.monotonic() - started)
            if name == "nightly":
                snapshot = table.current_snapshot()
                manifests = len(snapshot.manifests(table.io)) if snapshot is not None else 0
                shape = (f"{len(files)} files, {len(table.snapshots())} snapshots kept, "
                         f"{manifests} manifests")  # fmt: skip
    return (min(times["nightly"]), min(times["once"])), shape
