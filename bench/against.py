"""This checkout against an earlier commit, interleaved in one run, so that a regression
of the data path shows as a ratio the day it lands (`--against <commit>`).

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
)
from bench.core import Bench


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

    def move_job(root: Path) -> float:
        url = bench.dbs.copy(n, migrated=False)
        try:
            env = env_for(url, bench.storage("az"), bench.azurite, ARCHIVER_DELTA="false")
            run_process(archiver_cmd("migrate"), env, cwd=root, quiet=True)
            enqueue_orders(env, "move", root=root)
            run_workers(env, 1, root=root)
            return job_seconds(url)
        finally:
            bench.dbs.drop(url)

    order = list(sides.items())
    for i in range(rounds):
        for side, root in order if i % 2 == 0 else order[::-1]:
            own, whole = copy_job(root)
            for name, seconds in (("copy", own), ("whole", whole), ("move", move_job(root))):
                figures.setdefault(name, {}).setdefault(side, []).append(seconds)
    labels = {
        "copy": "copy mode -> file://, the job's own time",
        "whole": "enqueue && worker --burst, copy -> file://, end to end",
        "move": "move mode -> Azurite, the job's own time",
    }
    for name, label in labels.items():
        mine, theirs = min(figures[name]["this checkout"]), min(figures[name][short])
        spread = ", ".join(
            f"{side} {min(v):.2f}-{max(v):.2f} s" for side, v in figures[name].items()
        )
        bench.add(f"{label}, against {short} ({spread})", mine, theirs, "s",
                  "<= 1.05x (no regression)", mine <= 1.05 * theirs)  # fmt: skip
