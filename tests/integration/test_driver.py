"""ARCHIVER_ADBC_DRIVER: workers and the CLI load the ADBC PostgreSQL driver from the
library it names instead of the wheel's (a Release build of the same source decodes rows
with a third of the CPU; docs/performance.md."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

from archiver.testing.reference import seed_orders
from tests.support import (
    ROOT,
    WHEEL_LIBRARY,
    assert_refused,
    enqueued,
    run_cli,
    sql_value,
    start_worker,
    wait_for_status,
)
from tests.support.harness import Harness


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


FLAWED = ROOT / "dev" / "flawed-driver" / "libadbc_driver_postgresql.so"  # `make test` fetches it


def test_a_driver_that_writes_values_back_changed_is_refused_by_doctor_and_restore(
    h: Harness,
) -> None:
    """The 1.12.0 wheel's library writes NULL elements of arrays back as "" and 0 without an
    error. A restore through it would have completed, the archived rows changed."""
    assert FLAWED.is_file(), "run `make test` (Makefile: FLAWED_DRIVER)"
    h.sql(
        "CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz NOT NULL, "
        "tags text[], counts int8[]); "
        "INSERT INTO events SELECT g, '2020-01-01'::timestamptz + g * interval '1 hour', "
        "ARRAY['t' || g, NULL, ''], ARRAY[g, NULL] FROM generate_series(1, 500) g; "
        "CREATE TABLE snapshot AS SELECT * FROM events",
    )
    [job] = enqueued(h.env, "--table", "events", "--before", "2021-01-01")
    h.drain()
    assert h.value("SELECT count(*) FROM events") == 0
    flawed = {**h.env, "ARCHIVER_ADBC_DRIVER": str(FLAWED)}

    doctor = run_cli(flawed, "doctor")
    assert doctor.returncode == 1
    (line,) = [x for x in doctor.stdout.splitlines() if x.startswith("FAIL  bulk driver")]
    assert "does not write back what it reads" in line
    assert 'text_array \'{a,NULL,""}\' came back \'{a,"",""}\'' in line, line
    assert "int8_array '{1,NULL}' came back '{1,0}'" in line, line

    refused = run_cli(flawed, "restore", "--job", job)
    assert_refused(refused, "restore refused, nothing changed: the ADBC driver does not write back")
    assert h.value("SELECT count(*) FROM events") == 0

    restored = h.cli("restore", "--job", job)  # the wheel's library: exact
    assert restored.returncode == 0, restored.stderr
    for a, b in (("events", "snapshot"), ("snapshot", "events")):
        assert h.value(f"SELECT count(*) FROM (TABLE {a} EXCEPT ALL TABLE {b}) d") == 0
