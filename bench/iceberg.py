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

from bench.common import (
    archiver_cmd,
    enqueue_archive,
    env_for,
    run_process,
    run_workers,
    sql,
    start_process,
)
from bench.core import Bench
from bench.years import TABLE

NIGHTS, PER_NIGHT = 365, 288  # a row every 5 minutes (bench.years.TABLE)
END = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def iceberg_year(bench: Bench) -> None:
    nights = 10 if bench.args.quick else NIGHTS
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


REST_PASSWORD = "bench-rest-password-0123456789"


def iceberg_rest(bench: Bench) -> None:
    """serve's Iceberg REST catalog over 100 archived tables (10 with --quick): a table's
    load (its metadata and a vended SAS, signed in as the configured user) against the
    same load from the JDBC catalog by pyiceberg in this process, and a listing of the
    catalog's tables, per table listed."""
    import json
    import statistics
    import urllib.request

    from archiver.testing.services import free_port

    tables = 10 if bench.args.quick else 100
    url = bench.dbs.copy(0)
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    env = env_for(url, bench.storage("az"), bench.azurite, ARCHIVER_DELTA="true",
                  ARCHIVER_ICEBERG="true", ARCHIVER_SERVE_PASSWORD=REST_PASSWORD,
                  ARCHIVER_SERVE_ICEBERG_REST=f"127.0.0.1:{port}")  # fmt: skip
    server = None
    try:
        for i in range(tables):
            sql(url, f"CREATE TABLE t{i} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
            sql(url, f"INSERT INTO t{i} SELECT g, '2024-01-01'::timestamptz + g * interval '1 h' "
                     "FROM generate_series(1, 100) g")  # fmt: skip
            enqueue_archive(url, f"public.t{i}", "2025-01-01T00:00:00+00:00")
        run_workers(env, 1)
        server = start_process(archiver_cmd("serve", "--bind", f"127.0.0.1:{free_port()}"), env,
                               quiet=True)  # fmt: skip

        def ask(path: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
            request = urllib.request.Request(uri + path, data, headers or {})
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read())

        form = f"grant_type=client_credentials&client_id=archiver&client_secret={REST_PASSWORD}"
        deadline = time.monotonic() + 60
        while True:
            try:
                token = ask("/v1/oauth/tokens", form.encode())["access_token"]
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        bearer = {"Authorization": f"Bearer {token}",
                  "X-Iceberg-Access-Delegation": "vended-credentials"}  # fmt: skip
        catalog = _catalog(url, bench)
        rest, own, listed = [], [], []
        try:
            for _ in range(max(bench.args.repeat, 3) * 5):
                started = time.monotonic()
                ask("/v1/namespaces/public/tables/t0", None, bearer)
                rest.append(time.monotonic() - started)
                started = time.monotonic()
                catalog.load_table(("public", "t0"))
                own.append(time.monotonic() - started)
                started = time.monotonic()
                found = ask("/v1/namespaces/public/tables", None, bearer)["identifiers"]
                listed.append(time.monotonic() - started)
        finally:
            catalog.engine.dispose()
        if len(found) != tables:
            raise RuntimeError(f"iceberg REST: {len(found)} tables listed of {tables}")
        mine, theirs = statistics.median(rest), statistics.median(own)
        bench.add(f"iceberg REST: a table's load with a vended SAS at {tables} tables (median), "
                  "against pyiceberg's load from the JDBC catalog", mine, theirs, "s",
                  "(reported)", None)  # fmt: skip
        bench.add(f"iceberg REST: listing the catalog's {tables} tables, per table (median)",
                  statistics.median(listed) / tables * 1000, None, "ms", "(reported)", None)  # fmt: skip
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
        bench.dbs.drop(url)
