"""ARCHIVER_ADBC_DRIVER: workers and the CLI load the ADBC PostgreSQL driver from the
library it names instead of the wheel's (a Release build of the same source decodes rows
with a third of the CPU; README, "Performance")."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import adbc_driver_postgresql

from bench.reference import seed_orders
from tests.support import enqueued, run_cli, sql_value, start_worker, wait_for_status

WHEEL_LIBRARY = Path(adbc_driver_postgresql.__file__).parent / "libadbc_driver_postgresql.so"


def test_a_worker_moves_rows_through_the_driver_library_it_is_given(
    env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    seed_orders(database_url, 3_000)  # row g: g minutes before 2025-01-01; 2,880 older than 22:00
    build = tmp_path / "adbc-build" / "libadbc_driver_postgresql.so"
    build.parent.mkdir()
    shutil.copy(WHEEL_LIBRARY, build)  # the same code at another path: which one is mapped shows
    env = {**env, "ARCHIVER_ADBC_DRIVER": str(build)}

    doctor = run_cli(env, "doctor")
    assert f"ok    bulk driver: {build} (ARCHIVER_ADBC_DRIVER)" in doctor.stdout, doctor.stdout

    [job] = enqueued(
        env, "--table", "orders", "--before", "2024-12-31 22:00:00+00", "--mode", "move"
    )
    worker = start_worker(env)
    wait_for_status(database_url, job, "completed")
    mapped = Path(f"/proc/{worker.pid}/maps").read_text()  # the pool keeps its connection open
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    assert str(build) in mapped
    assert str(WHEEL_LIBRARY) not in mapped
    archived = sql_value(database_url, "SELECT sum(row_count) FROM archive_files")
    assert archived == 3_000 - 120
    assert sql_value(database_url, "SELECT count(*) FROM orders") == 120
