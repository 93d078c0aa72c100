"""A monthly-partitioned table moved by rows and by whole partitions."""

from __future__ import annotations

from archiver.testing.services import with_database
from bench.common import archiver_cmd, env_for, job_seconds, run_process, run_workers, sql
from bench.core import Bench


def partitions(bench: Bench) -> None:
    """About half of a monthly-partitioned table older than the cutoff, moved by whole
    partitions and by rows (two workers each): wall time and the WAL generated."""
    n = bench.args.big_rows
    template = with_database(bench.admin_url, bench.dbs.partitioned_template(n))
    cutoff = sql(
        template,
        # the month boundary nearest the median: no partition only partly older, so
        # the figures are whole partitions' against rows' (a partly older partition's
        # rows move by DELETE either way)
        "SELECT date_trunc('month', percentile_disc(0.5) WITHIN GROUP (ORDER BY created_at)"
        " + interval '15 days')::text FROM events",
    )[0][0]
    measured = {}
    for mode in ("rows", "drop"):  # (a composite key: rows cannot be split --parallel)

        def run(mode: str = mode) -> tuple[float, float]:
            url = bench.dbs.copy(n, partitioned=True)
            try:
                env = env_for(url, bench.storage("az"), bench.azurite)
                lsn = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8"
                before = sql(url, lsn)[0][0]
                run_process(archiver_cmd("enqueue", "--table", "events", "--before", cutoff,
                                 "--partitions", mode), env)  # fmt: skip
                run_workers(env, 2)
                wal = sql(url, lsn)[0][0] - before
                return job_seconds(url), wal
            finally:
                bench.dbs.drop(url)

        measured[mode] = min(run() for _ in range(bench.args.repeat))
    (rows_s, rows_wal), (drop_s, drop_wal) = measured["rows"], measured["drop"]
    mb = 1024 * 1024
    label = f"{n:,} rows by month, older than {cutoff[:10]}"
    bench.add(f"move by rows, {label}", rows_s, None, "s", "", None)
    bench.add(f"move by whole partitions, {label}", drop_s, rows_s, "s", "<= 0.6x",
             drop_s <= 0.6 * rows_s)  # fmt: skip
    bench.add("WAL of the move by rows", rows_wal / mb, None, "MB", "", None)
    bench.add("WAL of the move by whole partitions", drop_wal / mb, rows_wal / mb, "MB",
             "<= 0.01x", drop_wal <= 0.01 * rows_wal)  # fmt: skip
