"""This checkout against an earlier commit, interleaved in one run, so that a regression
of the data path shows as a ratio the day it lands (`--against <commit>`): a copy job, a
move job, a nightly slice (the oldest 0.1% of the table copied), and over the moved
table `archiver query`'s count and sum and a restore of a day, each a whole command.

The commit is exported into the bench's own folder and run from there, as the release it
was (archiver.testing.releases). Each side migrates its own copy of a database
holding only the reference rows, so neither runs against the other's schema. Rounds
alternate the two sides (A B, B A, ...), so a machine that slows down over the run
weighs on both alike; each figure is the best of its rounds (one round with --quick)."""

from __future__ import annotations

import time
from pathlib import Path

from archiver.testing.releases import export_commit
from bench.common import (
    ROOT,
    archiver_cmd,
    enqueue_orders,
    env_for,
    job_seconds,
    run_process,
    run_workers,
    sql,
)
from bench.core import Bench
from bench.restore import a_day
from bench.scale import DAILY_SHARE


def against(bench: Bench, commit: str) -> None:
    n, rounds = bench.args.rows, 1 if bench.args.quick else max(2, bench.args.repeat)
    other = bench.tmp / "against"
    short = export_commit(commit, other)
    sides = {"this checkout": ROOT, short: other}
    figures: dict[str, dict[str, list[float]]] = {}

    def copy_job(root: Path) -> tuple[float, float]:
        url = bench.dbs.copy(n, migrated=False)
        try:
            env = env_for(url, bench.storage("file"), None, ARCHIVER_DELTA="false")
            run_process(archiver_cmd("migrate"), env, cwd=root, quiet=True)
            started = time.monotonic()
            enqueue_orders(env, "copy", root=root)
            run_workers(env, 1, root=root)
            return job_seconds(url), time.monotonic() - started
        finally:
            bench.dbs.drop(url)

    def timed(args: list[str], env: dict[str, str], root: Path) -> float:
        started = time.monotonic()
        run_process(archiver_cmd(*args), env, cwd=root, quiet=True)
        return time.monotonic() - started

    def move_job(root: Path) -> tuple[float, float, float]:
        """(the move's own time, then over the moved rows: the query's, a day's restore's)."""
        url = bench.dbs.copy(n, migrated=False)
        try:
            env = env_for(url, bench.storage("az"), bench.azurite, ARCHIVER_DELTA="false")
            run_process(archiver_cmd("migrate"), env, cwd=root, quiet=True)
            enqueue_orders(env, "move", root=root)
            run_workers(env, 1, root=root)
            moved = job_seconds(url)
            query = timed(["query", "SELECT count(*), sum(total) FROM orders"], env, root)
            lo, hi = a_day(n)
            restored = timed(["restore", "--table", "orders", "--from", lo, "--to", hi], env, root)
            return moved, query, restored
        finally:
            bench.dbs.drop(url)

    def nightly_job(root: Path) -> float:
        url = bench.dbs.copy(n, migrated=False)
        try:
            env = env_for(url, bench.storage("file"), None, ARCHIVER_DELTA="false")
            run_process(archiver_cmd("migrate"), env, cwd=root, quiet=True)
            old = max(1, n // DAILY_SHARE)  # row g was created g minutes before 2025-01-01
            cutoff = sql(url, "SELECT created_at::text FROM orders WHERE id = $1", n - old)[0][0]
            run_process(archiver_cmd("enqueue", "--table", "orders", "--before", cutoff,
                                     "--mode", "copy"), env, cwd=root)  # fmt: skip
            run_workers(env, 1, root=root)
            return job_seconds(url)
        finally:
            bench.dbs.drop(url)

    order = list(sides.items())
    for i in range(rounds):
        for side, root in order if i % 2 == 0 else order[::-1]:
            own, whole = copy_job(root)
            moved, query, restored = move_job(root)
            for name, seconds in (("copy", own), ("whole", whole), ("move", moved),
                                  ("nightly", nightly_job(root)), ("query", query),
                                  ("restore", restored)):  # fmt: skip
                figures.setdefault(name, {}).setdefault(side, []).append(seconds)
    labels = {
        "copy": "copy mode -> file://, the job's own time",
        "whole": "enqueue && worker --burst, copy -> file://, end to end",
        "move": "move mode -> Azurite, the job's own time",
        "nightly": f"nightly slice, {max(1, n // DAILY_SHARE):,} of {n:,} rows copied, the job's own time",
        "query": "archiver query count(*), sum(total) over the moved rows, the command",
        "restore": "restore of a day (1,440 rows) out of the moved rows, the command",
    }
    for name, label in labels.items():
        mine, theirs = min(figures[name]["this checkout"]), min(figures[name][short])
        spread = ", ".join(
            f"{side} {min(v):.2f}-{max(v):.2f} s" for side, v in figures[name].items()
        )
        bench.add(f"{label}, against {short} ({spread})", mine, theirs, "s",
                  "<= 1.05x (no regression)", mine <= 1.05 * theirs)  # fmt: skip
