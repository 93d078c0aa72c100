"""The soak: production's mix at once for N minutes, faults included, its invariants
checked every minute and at the end (archiver.testing.soak). Exits 1 on any problem.

    python -m bench.soak --minutes 30          # the figures in docs/performance.md
    python -m bench.soak --minutes 3 --seed 7  # what tests/integration/test_soak.py runs (seed 1)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from archiver.testing.soak import run_soak
from archiver.testing.soak_world import Figures


def table(figures: Figures, seconds: float) -> str:
    rss, span = figures.worker_rss_mb, min(figures.minutes / 2, 10.0)  # as soak_checks.rss_flat
    first = max((mb for minute, mb in rss if minute <= span), default=0.0)
    last = max((mb for minute, mb in rss if minute >= figures.minutes - span), default=0.0)
    rows = [
        ("minutes of load (then the drain and the final checks)", f"{figures.minutes:g}"),
        ("wall time, set-up to tear-down", f"{seconds / 60:.1f} min"),
        ("rows inserted", f"{figures.rows_inserted:,}"),
        ("rows restored (moved back)", f"{figures.rows_restored:,}"),
        ("data subjects erased", str(figures.subjects_erased)),
        (
            "files offline (Archive tier) at the last tier move / rehydrated",
            f"{figures.files_offline} / {figures.files_back_online}",
        ),
        ("operations", ", ".join(f"{k} {n}" for k, n in sorted(figures.operations.items()))),
        ("faults injected", ", ".join(f"{k} {n}" for k, n in sorted(figures.faults.items()))),
        (
            "of them, the network's",
            ", ".join(f"{k} {n}" for k, n in sorted(figures.network.items())),
        ),
        ("jobs at the end", ", ".join(f"{k} {n}" for k, n in figures.jobs.items())),
        ("live rows at the end", ", ".join(f"{k} {n:,}" for k, n in figures.live_rows.items())),
        (
            f"worker peak RSS, first {span:g} min / last {span:g} min",
            f"{first:.0f} MB / {last:.0f} MB",
        ),
        ("invariant checks passed", str(figures.checks_passed)),
        ("query answers checked against the soak's own counts", str(figures.answers_checked)),
        ("of them, the _all views' through postgres_fdw and serve", str(figures.view_answers)),
        ("files merged by the operator's compactions", str(figures.files_merged)),
        ("orphans left at the end (deleted by remove-orphans)", str(figures.orphans_at_the_end)),
        ("minute checks skipped (a restart meanwhile)", str(figures.checks_skipped)),
        ("problems", str(len(figures.problems))),
    ]
    lines = ["| figure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
    return "\n".join(lines + [f"- {p}" for p in figures.problems])


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep its logs")
    args = parser.parse_args()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="archiver-soak-"))
    started = time.monotonic()
    figures = run_soak(args.minutes, workdir, args.seed, say=lambda line: print(line, flush=True))
    print(table(figures, time.monotonic() - started))
    print(f"logs: {workdir / 'log'}")
    return 1 if figures.problems else 0


if __name__ == "__main__":
    sys.exit(main())
