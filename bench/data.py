"""The data path: archiver against what PostgreSQL itself streams out (the floor), the
best exporter (DuckDB), and a raw DELETE; and the worker's memory."""

from __future__ import annotations

import functools

from archiver.model import Mode
from bench.common import (
    CUTOFF,
    DELETE_SQL,
    FLOOR_SQL,
    TWO_CONNECTIONS,
    best,
    copy_statement,
    psql_seconds,
    server_share,
)
from bench.core import Bench


def data_path(bench: Bench) -> None:
    n, repeat = bench.args.rows, bench.args.repeat
    url = bench.dbs.copy(n)
    floor = best(repeat, lambda: psql_seconds(url, FLOOR_SQL.format(cutoff=CUTOFF)))
    bench.add(f"floor: psql \\copy binary, {n:,} rows", floor, None, "s", "", None)
    read = server_share(url, Mode.COPY)
    server_copy = best(repeat, lambda: psql_seconds(url, *read))
    bench.add("archiver's copy query alone, psql \\copy", server_copy, floor, "s",
             "(reported: the server's share)", None)  # fmt: skip
    file_runs = [bench.archive_copy(url, "file") for _ in range(repeat)]
    copy_file = min(s for s, _, _ in file_runs)
    bench.add("copy mode -> file://", copy_file, floor, "s", "<= 1.10x", copy_file <= 1.10 * floor)
    duck = best(repeat, lambda: bench.duckdb_export(url, "file"))
    bench.add("DuckDB postgres_scanner -> one zstd Parquet file, a thread per core", duck,
             floor, "s", "(reported: the best exporter here)", None)  # fmt: skip
    bench.add("copy mode -> file://, against that DuckDB export", copy_file, duck, "s",
             "(reported: 'as fast as the best exporter')", None)  # fmt: skip
    statement = copy_statement(url)
    duck_own = best(repeat, lambda: bench.duckdb_export(url, "file", statement))
    bench.add("DuckDB postgres_scanner running archiver's copy statement (postgres_query: "
              "one connection, exact types, key order) -> one zstd Parquet file", duck_own,
              copy_file, "s", "(reported: against copy mode -> file://)", None)  # fmt: skip
    # end to end: `archiver enqueue … && archiver worker --burst`, process start-up,
    # claim and completion included, against the job's own time in the same run
    whole, own = min((w, s) for s, _, w in file_runs)
    bench.add("enqueue && worker --burst, end to end", whole, own, "s",
             "<= 1.3x (the job's own time)", whole <= 1.3 * own)  # fmt: skip
    two_runs = [bench.archive_copy(url, "file", **TWO_CONNECTIONS) for _ in range(repeat)]
    copy_two = min(s for s, _, _ in two_runs)
    bench.add("copy mode -> file://, ARCHIVER_COPY_CONNECTIONS=2", copy_two, copy_file, "s",
             "(reported)", None)  # fmt: skip
    copy_az = min(bench.archive_copy(url, "az")[0] for _ in range(repeat))
    bench.add("copy mode -> Azurite", copy_az, floor, "s", "<= 1.25x", copy_az <= 1.25 * floor)
    duck_az = best(repeat, lambda: bench.duckdb_export(url, "az"))
    bench.add("DuckDB postgres_scanner -> Azurite, one zstd Parquet file", duck_az, floor,
             "s", "(reported: the best exporter here)", None)  # fmt: skip
    bench.add("copy mode -> Azurite, against that DuckDB export", copy_az, duck_az, "s",
             "(reported: 'as fast as the best exporter')", None)  # fmt: skip
    plans(bench, url, duck, duck_az)
    bench.dbs.drop(url)
    raw = [DELETE_SQL.format(cutoff=CUTOFF)]
    delete = best(repeat, lambda: bench.psql_on_a_copy(n, lambda _: raw))
    bench.add("raw DELETE of the same rows", delete, None, "s", "", None)
    take = best(repeat, lambda: bench.psql_on_a_copy(n, lambda u: server_share(u, Mode.MOVE)))
    bench.add("archiver's move statement alone, psql \\copy", take, floor + delete,
             "s", "(reported: the server's share)", None)  # fmt: skip
    chosen = best(repeat, lambda: bench.psql_on_a_copy(
        n, lambda u: server_share(u, Mode.MOVE, chosen=True)))  # fmt: skip
    bench.add("the same, its rows chosen first (where old rows are sparse in key order)",
             chosen, take, "s", "(reported)", None)  # fmt: skip
    move = best(repeat, lambda: bench.archive_move(n, 1, 1)[0])
    bench.add("move mode -> Azurite", move, floor + delete, "s", "<= 1.5x (floor+DELETE)",
             move <= 1.5 * (floor + delete))  # fmt: skip
    # the move's own time includes its Delta publication (the publish job it queues)
    plain = best(repeat, lambda: bench.archive_move(n, 1, 1, ARCHIVER_DELTA="false")[0])
    bench.add("move mode -> Azurite, with its Delta Lake publication", move, plain, "s",
              "<= 1.05x (ARCHIVER_DELTA=false)", move <= 1.05 * plain)  # fmt: skip
    locking = best(repeat, lambda: bench.archive_move(n, 1, 1, ARCHIVER_ROW_LOCK_WAIT="0")[0])
    bench.add("move mode -> Azurite, ARCHIVER_ROW_LOCK_WAIT=0 (every row locked first)",
             locking, move, "s", "(reported)", None)  # fmt: skip
    for plan, extra in PLANS:
        seconds = best(
            repeat, functools.partial(lambda e: bench.archive_move(n, 1, 1, **e)[0], extra)
        )
        target = "<= 1.3x (floor+DELETE)" if plan == "backlog" else "(reported)"
        met = seconds <= 1.3 * (floor + delete) if plan == "backlog" else None
        bench.add(f"move mode -> Azurite, the {plan} plan", seconds, floor + delete, "s",
                  target, met)  # fmt: skip
    spread(bench, n)
    bench.peak_small = max(p for _, p, _ in file_runs)
    bench.peak_small_two = max(p for _, p, _ in two_runs)
    if bench.args.adbc_driver:
        with_driver(bench, n, floor, delete)


def spread(bench: Bench, n: int) -> None:
    """A backlog move split across two workers (`enqueue --parallel 2`: a span of the
    table's pages each), each worker held to a core of its own as if on a machine of its
    own, against one worker held to one core, each with the backlog plan's default
    connections. The server shares this machine's two cores with them."""
    backlog = {"ARCHIVER_BACKLOG_MIN_ROWS": "1"}
    one = best(bench.args.repeat, lambda: bench.archive_move(n, 1, 1, True, **backlog)[0])
    two = best(bench.args.repeat, lambda: bench.archive_move(n, 2, 2, True, **backlog)[0])
    bench.add("move mode -> Azurite, a backlog split across 2 workers (--parallel 2) each "
              "held to a core, against 1 worker held to one", two, one, "s",
              "(reported: 0.5x where the workers are the bound)", None)  # fmt: skip


# Each plan forced whatever the table's size: the key plan by one backlog connection, the
# backlog plan by a minimum of one old row (archive.plan.choose_plan).
PLANS: tuple[tuple[str, dict[str, str]], ...] = (
    ("key", {"ARCHIVER_BACKLOG_CONNECTIONS": "1"}),
    ("backlog", {"ARCHIVER_BACKLOG_MIN_ROWS": "1"}),
)


def plans(bench: Bench, url: str, duck: float, duck_az: float) -> None:
    """Both plans of a copy against DuckDB's export to the same place, and the worker's
    peak RSS of each (the backlog plan reads on ARCHIVER_BACKLOG_CONNECTIONS)."""
    repeat, peaks = bench.args.repeat, dict[str, int]()
    for kind, label, exporter in (("file", "file://", duck), ("az", "Azurite", duck_az)):
        for plan, extra in PLANS:
            runs = [bench.archive_copy(url, kind, **extra) for _ in range(repeat)]
            seconds = min(s for s, _, _ in runs)
            peaks[plan] = max(peaks.get(plan, 0), *(p for _, p, _ in runs))
            target = "<= 1.0x" if plan == "backlog" else "(reported)"
            met = seconds <= exporter if plan == "backlog" else None
            bench.add(f"copy mode -> {label}, the {plan} plan, against DuckDB's export",
                      seconds, exporter, "s", target, met)  # fmt: skip
    mb = 1024 * 1024
    bench.add("worker peak RSS, the backlog plan, against the key plan", peaks["backlog"] / mb,
              peaks["key"] / mb, "MB", "<= 2x", peaks["backlog"] <= 2 * peaks["key"])  # fmt: skip


def with_driver(bench: Bench, n: int, floor: float, delete: float) -> None:
    """The figures that miss their targets, again with --adbc-driver: a build of the
    driver other than the wheel's (docs/performance.md: ARCHIVER_ADBC_DRIVER)."""
    repeat, driver = bench.args.repeat, {"ARCHIVER_ADBC_DRIVER": bench.args.adbc_driver}
    url = bench.dbs.copy(n)
    for kind, label, goal in (("file", "file://", 1.10), ("az", "Azurite", 1.25)):
        for connections, extra in (
            ("", {}),
            (", ARCHIVER_COPY_CONNECTIONS=2", TWO_CONNECTIONS),
        ):
            seconds = min(
                bench.archive_copy(url, kind, **driver, **extra)[0] for _ in range(repeat)
            )
            bench.add(f"copy mode -> {label}, --adbc-driver{connections}", seconds, floor,
                     "s", f"<= {goal:.2f}x", seconds <= goal * floor)  # fmt: skip
    bench.dbs.drop(url)
    move = best(repeat, lambda: bench.archive_move(n, 1, 1, **driver)[0])
    bench.add("move mode -> Azurite, --adbc-driver", move, floor + delete, "s",
             "<= 1.5x (floor+DELETE)", move <= 1.5 * (floor + delete))  # fmt: skip


def memory(bench: Bench) -> None:
    n, big = bench.args.rows, bench.args.big_rows
    url = bench.dbs.copy(big)
    peak_big = max(bench.archive_copy(url, "file")[1] for _ in range(bench.args.repeat))
    peak_big_two = max(
        bench.archive_copy(url, "file", **TWO_CONNECTIONS)[1] for _ in range(bench.args.repeat)
    )
    bench.dbs.drop(url)
    mb = 1024 * 1024
    bench.add(f"worker peak RSS, {n:,} rows", bench.peak_small / mb, None, "MB", "", None)
    bench.add(f"worker peak RSS, {big:,} rows", peak_big / mb, bench.peak_small / mb, "MB",
             "<= 300 MB, <= 1.10x", peak_big <= 300 * mb and peak_big <= 1.10 * bench.peak_small)  # fmt: skip
    bench.add(f"worker peak RSS, {n:,} rows, ARCHIVER_COPY_CONNECTIONS=2",
             bench.peak_small_two / mb, bench.peak_small / mb, "MB", "(reported)", None)  # fmt: skip
    bench.add(f"worker peak RSS, {big:,} rows, ARCHIVER_COPY_CONNECTIONS=2", peak_big_two / mb,
             peak_big / mb, "MB", "(reported)", None)  # fmt: skip
