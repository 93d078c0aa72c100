"""The benchmark: archiver against what PostgreSQL itself streams out, in one table.

    make bench                                      # 1M rows; 3M for memory and scale
    make bench BENCH_ARGS="--rows 200000 --repeat 1"
    make bench BENCH_ARGS="--against 7257763 --skip scale"   # a regression as a ratio
    python -m bench.run --rows 2000 --quick         # what the test suite runs

Each figure is a ratio to a baseline taken in the same run (these machines are noisy),
best of --repeat runs. The floor is psql's `\\copy (SELECT * FROM orders WHERE created_at
< cutoff) TO '/dev/null' (FORMAT binary)`. An archive's time is its job's own time, from
claim to completion as the queue records them (server clock; process start-up excluded).
Peak RSS is the worker process's ru_maxrss (wait4), i.e. its whole life.
"""

from __future__ import annotations

import argparse
import os
import sys

from archiver.config import check_adbc_driver
from archiver.errors import ConfigError
from bench import (
    against,
    catalog,
    console,
    data,
    files,
    footprint,
    iceberg,
    jobs,
    lifecycle,
    live,
    partitions,
    restore,
    scale,
    serve,
    tpch,
    years,
)
from bench.core import Bench

SECTIONS = (
    "queue", "data", "memory", "footprint", "restore", "partitions", "scale", "catalog",
    "console", "erase", "live", "tpch", "years", "iceberg", "serve", "files",
)  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="reference rows (default 1M)")
    p.add_argument("--big-rows", type=int, help="rows for memory and scale (default 3x --rows)")
    p.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    p.add_argument("--quick", action="store_true", help="tiny: one run each, few queue jobs")
    p.add_argument("--skip", action="append", default=[], choices=SECTIONS)
    p.add_argument(
        "--scale-rows",
        default="1000000,10000000,30000000",
        help="table sizes of the daily-style jobs (default 1M,10M,30M; --quick: 2k,20k)",
    )
    p.add_argument(
        "--erase-rows", type=int, default=10_000_000, help="archive size of the erase (default 10M)"
    )
    p.add_argument("--tpch-scale", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    p.add_argument(
        "--years", type=float, default=10, help="years of daily jobs of the years section (10)"
    )
    p.add_argument(
        "--live-rows",
        type=int,
        default=10_000_000,
        help="archived rows of the --with-live files-read figures (default 10M)",
    )
    p.add_argument(
        "--many-files",
        type=int,
        default=2_000,
        help="small files of the files section's table (default 2,000)",
    )
    p.add_argument(
        "--serve-lookups", type=int, default=200, help="key lookups through serve (default 200)"
    )
    p.add_argument(
        "--serve-minutes",
        type=float,
        default=10,
        help="minutes of serve's 20-connection lookup load (default 10)",
    )
    p.add_argument(
        "--against",
        metavar="COMMIT",
        help="also time the data path against this commit, interleaved (a ratio per figure)",
    )
    p.add_argument(
        "--adbc-driver",
        metavar="PATH",
        help="also run the missed data-path figures with this build of libadbc_driver_postgresql.so",
    )
    p.add_argument(
        "--admin-url",
        default=os.environ.get(
            "ARCHIVER_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = p.parse_args(argv)
    if args.adbc_driver:
        try:
            check_adbc_driver("--adbc-driver", args.adbc_driver)
        except ConfigError as exc:
            p.error(str(exc))
    args.big_rows = args.big_rows or 3 * args.rows
    args.latency_jobs, args.noop_jobs, args.queue_template_rows = 200, 10_000, 1
    args.one_row_tables, args.policy_tables = 100, 200
    args.catalog_sizes = ((1_000, 1_000), (1_000_000, 100_000))  # (finished jobs, files)
    args.scale_rows = [int(n) for n in args.scale_rows.split(",")]
    if args.quick:
        args.scale_rows = [2_000, 20_000]
        args.repeat, args.latency_jobs, args.noop_jobs, args.one_row_tables = 1, 5, 200, 3
        args.policy_tables, args.catalog_sizes = 3, ((1_000, 1_000), (3_000, 2_000))
        args.erase_rows = 20_000
        args.tpch_scale, args.live_rows, args.years = 0.01, 20_000, 0.04
        args.serve_lookups, args.serve_minutes, args.many_files = 20, 0.05, 40
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    with bench.running():
        # The queue first: its latencies are of idle workers on a quiet server, and the
        # data sections end by dropping databases of GBs. For a while after, this
        # machine's fsyncs (every commit's) stall up to ~100 ms: claim p99 78-108 ms
        # right after them against 2.3-8.0 ms on a quiet server, as after an `rm` of a
        # 1.5 GB file (docs/performance.md).
        if "queue" not in args.skip:
            jobs.queue(bench)
        if args.against:
            against.against(bench, args.against)
        if "data" not in args.skip:
            data.data_path(bench)
            if "memory" not in args.skip:
                data.memory(bench)
        if "footprint" not in args.skip:
            footprint.footprint(bench)
        if "restore" not in args.skip:
            restore.restore_at_scale(bench)
            restore.restore_published(bench)
        if "partitions" not in args.skip:
            partitions.partitions(bench)
        if "scale" not in args.skip:
            scale.scale(bench)
        if "catalog" not in args.skip:
            catalog.catalog_at_scale(bench)
            catalog.many_tables(bench)
        if "console" not in args.skip:
            console.console_at_scale(bench)
        if "erase" not in args.skip:
            lifecycle.erase_at_scale(bench)
        if "live" not in args.skip:
            live.live_at_scale(bench)
            live.files_read(bench)
        if "tpch" not in args.skip:
            tpch.tpch_with_live(bench)
        if "years" not in args.skip:
            years.years_on(bench)
        if "iceberg" not in args.skip:
            iceberg.iceberg_year(bench)
            iceberg.iceberg_rest(bench)
        if "serve" not in args.skip:
            serve.serve_figures(bench)
        if "files" not in args.skip:
            files.many_files(bench)
    print(bench.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
