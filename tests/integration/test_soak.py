"""The soak's short form (issue 42): three minutes of production's mix at once -- the
scheduler, three workers and the console under a real supervisord; policies on an
aggregate with its children, a range-partitioned table and a text-keyed table; restores,
erasures, purges, tier moves (offline to the Archive tier among them), rehydrations and
queries, some SIGKILLed mid-way; a worker and the scheduler SIGKILLed, PostgreSQL and
Azurite restarted, backends terminated, the network to each paused, reset, refusing or
slow -- with every invariant of
archiver.testing.soak_checks checked each minute and at the end. `python -m bench.soak
--minutes 30` is the long form (docs/performance.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from archiver.testing.soak import FAULTS, OPERATIONS, run_soak

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)  # three minutes of load, the drain, the final checks
def test_three_minutes_of_everything_at_once(tmp_path: Path) -> None:
    figures = run_soak(3, tmp_path / "soak", seed=1, say=lambda line: None)
    assert figures.problems == [], "\n".join(figures.problems)
    attempted = {key.split()[0] for key in figures.operations}
    assert attempted >= set(OPERATIONS), figures.operations  # and verify, before Archive
    assert set(figures.faults) == set(FAULTS), figures.faults
    network = figures.faults["network_postgres"] + figures.faults["network_blobs"]
    assert sum(figures.network.values()) == network, figures.network
    assert figures.checks_passed >= 4  # two minutes, the end's, after the stop
    assert figures.answers_checked >= 2  # query answers against the soak's own counts
    assert figures.view_answers >= 1  # of them, the _all views' through postgres_fdw
    assert figures.rows_inserted > 10_000 and figures.subjects_erased >= 1
