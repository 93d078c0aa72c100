"""After a move: the dead tuples it left, whether (auto)vacuum ran since, and --vacuum."""

from __future__ import annotations

import json

from archiver.testing.reference import seed_orders
from tests.support.harness import Harness

LAST_VACUUM = "SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'orders'"


def test_dead_tuples_and_vacuum(h: Harness) -> None:
    seed_orders(h.url, 3_000)
    h.sql("ALTER TABLE orders SET (autovacuum_enabled = false)")
    plain = h.archive("--table", "orders", "--before", "2024-12-31")
    progress = json.loads(h.wait_for(plain, "completed")["progress"])
    assert progress["dead_tuples"] >= 0 and "vacuum_seconds" not in progress
    shown = h.cli("show", plain).stdout
    assert "at completion, no VACUUM run" in shown and "vacuum since not yet" in shown

    assert h.value(LAST_VACUUM) is None
    vacuumed = h.archive("--table", "orders", "--before", "2025-01-01", "--vacuum")
    job = h.wait_for(vacuumed, "completed")
    assert json.loads(job["progress"])["vacuum_seconds"] >= 0
    last = h.value(LAST_VACUUM)
    assert last is not None and last >= job["started_at"]
    shown = h.cli("show", vacuumed).stdout
    assert "after VACUUM (ANALYZE)" in shown and "vacuum since yes, at" in shown
