"""A read costs the rows it reads, not the files that hold them: the same rows archived
to Azurite into --many-files small files (one job, small chunks, never compacted) and
into one file, side by side in one run, 10% of each table live:

- a key lookup of a random archived id straight through `archiver serve` (pgbench, the
  extended protocol, 4 clients; its average latency), target <= 1.2x one file;
- `archiver query --with-live "SELECT count(*), sum(total) ... WHERE customer_id < N"`
  (live and archived rows at one snapshot), a whole command, target <= 1.5x;
- `archiver query "SELECT count(*) ..."` (the archived rows), a whole command, target
  <= 1.2x."""

from __future__ import annotations

import datetime as dt
import time

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
from bench.serve import PASSWORD, pgbench_latency, wait_for
from bench.years import END, TABLE

ROWS_PER_FILE = 28
CUSTOMERS = 1_000  # row g's customer_id is g % CUSTOMERS


def many_files(bench: Bench) -> None:
    files, repeat = bench.args.many_files, bench.args.repeat
    archived = files * ROWS_PER_FILE
    rows = archived + archived // 9  # a tenth live
    live = rows - archived  # rows 1..live are the newest (row g: 5 g minutes before END)
    url = bench.dbs.copy(0)
    from archiver.testing.services import free_port

    port = free_port()
    env = env_for(url, bench.storage("az"), bench.azurite, ARCHIVER_SERVE_PASSWORD=PASSWORD,
                  ARCHIVER_COMPACT="false")  # fmt: skip
    server = None
    try:
        cutoff = (END - dt.timedelta(minutes=5 * live + 1)).isoformat()
        for name, chunk in (("many", ROWS_PER_FILE), ("one", rows)):
            for statement in TABLE:
                sql(url, statement.format(name=name, rows=rows, per_day=CUSTOMERS))
            enqueue_archive(url, f"public.{name}", cutoff, chunk)
        run_workers(env, 2)
        counts = dict(sql(url, "SELECT source_table, count(*) FROM archive_files "
                               "WHERE state = 'committed' GROUP BY 1"))  # fmt: skip
        label = f"{archived:,} archived rows in {counts['public.many']:,} files against " \
                f"{counts['public.one']}"  # fmt: skip
        server = start_process(archiver_cmd("serve", "--bind", f"127.0.0.1:{port}"), env,
                               quiet=True)  # fmt: skip
        wait_for(port)
        seconds = 1.0 if bench.args.quick else 10.0
        lookup = {t: min(pgbench_latency(port, live + 1, rows, "archiver", seconds, t)
                         for _ in range(repeat)) for t in ("many", "one")}  # fmt: skip
        bench.add(f"files: serve key lookup, pgbench, 4 clients, {label}", lookup["many"],
                  lookup["one"], "ms", "<= 1.2x", lookup["many"] <= 1.2 * lookup["one"])  # fmt: skip
        for figure, args, limit in (
            ("query --with-live count(*), sum(total) of half the customers",
             ["--with-live", f"SELECT count(*), sum(total) FROM {{t}} WHERE customer_id < {CUSTOMERS // 2}"], 1.5),
            ("query count(*)", ["SELECT count(*) FROM {t}"], 1.2),
        ):  # fmt: skip
            mine, theirs = (
                min(_seconds(env, [a.format(t=t) for a in args]) for _ in range(repeat))
                for t in ("many", "one")
            )
            bench.add(f"files: {figure}, {label}", mine, theirs, "s", f"<= {limit}x",
                      mine <= limit * theirs)  # fmt: skip
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        bench.dbs.drop(url)


def _seconds(env: dict[str, str], args: list[str]) -> float:
    started = time.monotonic()
    run_process(archiver_cmd("query", *args), env)
    return time.monotonic() - started
