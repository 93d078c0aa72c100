"""After a move: the dead tuples it left, whether (auto)vacuum ran since, and --vacuum."""

from __future__ import annotations

import json

from archiver.testing.reference import seed_orders
from tests.support import run_cli, sql, sql_value, start_worker, wait_for_status


def test_dead_tuples_and_vacuum(env: dict[str, str], database_url: str) -> None:
    seed_orders(database_url, 3_000)
    sql(database_url, "ALTER TABLE orders SET (autovacuum_enabled = false)")
    plain = run_cli(env, "enqueue", "--table", "orders", "--before", "2024-12-31").stdout.strip()
    assert start_worker(env, "--burst").wait(60) == 0
    job = wait_for_status(database_url, plain, "completed")
    progress = json.loads(job["progress"])
    assert progress["dead_tuples"] >= 0 and "vacuum_seconds" not in progress
    shown = run_cli(env, "show", plain).stdout
    assert "at completion, no VACUUM run" in shown and "vacuum since not yet" in shown

    assert (
        sql_value(
            database_url, "SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'orders'"
        )
        is None
    )
    vacuumed = run_cli(
        env, "enqueue", "--table", "orders", "--before", "2025-01-01", "--vacuum"
    ).stdout.strip()
    assert start_worker(env, "--burst").wait(60) == 0
    job = wait_for_status(database_url, vacuumed, "completed")
    assert json.loads(job["progress"])["vacuum_seconds"] >= 0
    last = sql_value(
        database_url, "SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'orders'"
    )
    assert last is not None and last >= job["started_at"]
    shown = run_cli(env, "show", vacuumed).stdout
    assert "after VACUUM (ANALYZE)" in shown and "vacuum since yes, at" in shown
