"""`archiver query --with-live`: each archived table's name is its live rows together
with its archived rows, one relation, exact at one PostgreSQL snapshot: equal to the
same query over an untouched copy of the table, and counting every row once while a
move runs and while a restore holds its transaction open or has just committed."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from archiver.testing.plans import files_read
from archiver.testing.reference import seed_orders
from tests.support import archiver_cmd, assert_refused, start_process, start_worker, wait_for_text
from tests.support.harness import Harness

ROWS = 6_000


def live(h: Harness, sql: str) -> list[dict[str, Any]]:
    done = h.cli("query", "--with-live", sql, "--format", "json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def count(h: Harness, table: str = "orders") -> int:
    return int(live(h, f"SELECT count(*) AS n FROM {table}")[0]["n"])


def untouched(h: Harness) -> None:
    h.sql("CREATE TABLE untouched AS SELECT * FROM orders")


def test_the_union_equals_the_untouched_table(h: Harness) -> None:
    seed_orders(h.url, ROWS)
    untouched(h)
    h.archive("--table", "orders", "--before", "2024-12-29", "--chunk-rows", "1000")
    live_rows = h.value("SELECT count(*) FROM orders")
    assert 0 < live_rows < ROWS
    # one relation: every row once, each side said
    sides = {r["_archiver_source"]: r["n"] for r in live(
        h, "SELECT _archiver_source, count(*) AS n FROM orders GROUP BY 1")}  # fmt: skip
    assert sides == {"live": live_rows, "archive": ROWS - live_rows}
    # every column, row by row, as the untouched table holds it: uuid, jsonb, numeric,
    # enum, timestamptz, text[] (uuid and jsonb are archived as text, cast back)
    got = {r["id"]: r for r in live(h, "SELECT * EXCLUDE (_archiver_source) FROM public.orders")}
    want = h.sql("SELECT * FROM untouched")
    assert len(got) == len(want) == ROWS
    for row in want:
        mine = got[row["id"]]
        assert str(mine["customer"]) == str(row["customer"])  # NULL: "None" both
        assert (mine["total"] is None and row["total"] is None) or Decimal(
            str(mine["total"])
        ) == row["total"]
        assert mine["status"] == row["status"]
        assert (mine["details"] is None and row["details"] is None) or json.loads(
            mine["details"]
        ) == json.loads(row["details"])
        assert mine["tags"] == row["tags"]
        assert mine["note"] == row["note"]
    # aggregates over both sides, against PostgreSQL over the untouched copy
    mine = live(
        h,
        "SELECT count(*) AS n, sum(total) AS total, count(DISTINCT customer) AS customers, "
        "min(id) AS lo, max(id) AS hi FROM orders WHERE total > 100",
    )[0]
    theirs = h.sql(
        "SELECT count(*) AS n, sum(total) AS total, count(DISTINCT customer) AS customers, "
        "min(id) AS lo, max(id) AS hi FROM untouched WHERE total > 100"
    )[0]
    assert (mine["n"], Decimal(str(mine["total"])), mine["customers"], mine["lo"], mine["hi"]) == (
        theirs["n"], theirs["total"], theirs["customers"], theirs["lo"], theirs["hi"],
    )  # fmt: skip


def test_columns_added_and_dropped_since(h: Harness) -> None:
    seed_orders(h.url, ROWS)
    notes = h.value("SELECT count(note) FROM orders")
    h.archive("--table", "orders", "--before", "2024-12-29", "--chunk-rows", "1000")
    archived = ROWS - h.value("SELECT count(*) FROM orders")
    archived_notes = notes - h.value("SELECT count(note) FROM orders")
    h.sql(
        "ALTER TABLE orders ADD COLUMN region text DEFAULT 'eu'; ALTER TABLE orders DROP COLUMN note"
    )
    rows = live(
        h,
        "SELECT _archiver_source AS side, count(*) AS n, count(region) AS regions, "
        "count(note) AS notes FROM orders GROUP BY 1 ORDER BY 1",
    )
    assert rows[0] == {"side": "archive", "n": archived, "regions": 0, "notes": archived_notes}
    assert rows[1]["side"] == "live" and rows[1]["regions"] == rows[1]["n"]
    assert rows[1]["notes"] == 0


def test_every_row_once_while_a_move_runs(h: Harness, tmp_path: Path) -> None:
    seed_orders(h.url, ROWS)
    h.enqueue(
        "--table", "orders", "--before", "2025-01-01", "--chunk-rows", "200",
        "--max-rows-per-second", "2000",
    )  # fmt: skip
    worker = start_worker(h.env, log=tmp_path / "worker.log")
    try:
        counts: list[int] = []
        sides: list[dict[str, int]] = []
        deadline = time.monotonic() + 60
        while len(counts) < 8 and time.monotonic() < deadline:
            rows = live(h, "SELECT _archiver_source AS side, count(*) AS n FROM orders GROUP BY 1")
            counts.append(sum(r["n"] for r in rows))
            sides.append({r["side"]: r["n"] for r in rows})
        assert len(counts) >= 5 and all(n == ROWS for n in counts), counts
        # taken while rows were on both sides
        assert any(0 < s.get("live", 0) < ROWS for s in sides), sides
    finally:
        worker.terminate()
        worker.wait(30)


def test_every_row_once_while_a_restore_holds_its_transaction(h: Harness, tmp_path: Path) -> None:
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")
    for point in ("restore_before_commit", "restore_committed"):
        log = tmp_path / f"{point}.log"
        proc = start_process(
            archiver_cmd("restore", "--table", "orders", "--from", "2024-12-28T12:00:00+00:00",
                         "--to", "2024-12-29T06:00:00+00:00"),
            {**h.env, "ARCHIVER_FAILPOINTS": f"{point}=pause"},
            log,
        )  # fmt: skip
        wait_for_text(log, f"failpoint {point} reached")
        try:  # inserted, not committed / committed, its files retired, not yet deleted
            assert [count(h) for _ in range(3)] == [ROWS] * 3
        finally:
            proc.kill()
            proc.wait(10)
    assert count(h) == ROWS


def test_a_move_committing_between_the_catalog_and_the_live_read_is_not_seen(
    h: Harness, tmp_path: Path
) -> None:
    """The query reads the catalog, then (a failpoint's sleep) a whole move commits,
    then the query reads the live rows: at the catalog's snapshot, so every row once,
    all of them live (the move came after the snapshot). Read at a later snapshot, the
    moved rows would be in neither place."""
    seed_orders(h.url, ROWS)
    h.enqueue("--table", "orders", "--before", "2024-12-29", "--chunk-rows", "1000")
    log = tmp_path / "query.log"
    query = start_process(
        archiver_cmd("query", "--with-live", "--format", "json",
                     "SELECT _archiver_source AS side, count(*) AS n FROM orders GROUP BY 1"),
        {**h.env, "ARCHIVER_FAILPOINTS": "live_catalog_read=sleep:10"},
        log,
    )  # fmt: skip
    wait_for_text(log, "failpoint live_catalog_read reached")
    h.drain()  # the move, committed while the query sleeps
    moved = ROWS - h.value("SELECT count(*) FROM orders")
    assert moved > 0
    assert query.wait(60) == 0, log.read_text()
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert rows == [{"side": "live", "n": ROWS}], log.read_text()
    assert count(h) == ROWS  # and now, at a new snapshot, split between the two


def test_a_range_or_key_filter_reads_only_the_files_it_can_match(h: Harness) -> None:
    """Counted, not timed: the archive side reads the files whose catalogued cutoff or
    key range overlaps the query's filter (the files DuckDB's scans read), and the
    answer equals PostgreSQL's over an untouched copy."""
    seed_orders(h.url, ROWS)
    untouched(h)
    h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "500")
    files = h.value("SELECT count(*) FROM archive_files")
    assert files == ROWS // 500
    lo, hi = "2024-12-28T00:00:00+00:00", "2024-12-28T06:00:00+00:00"  # 360 rows
    overlapping = h.value(
        "SELECT count(*) FROM archive_files WHERE min_cutoff_value < $1::text::timestamptz "
        "AND max_cutoff_value >= $2::text::timestamptz",
        hi,
        lo,
    )
    assert 0 < overlapping < files
    where = f"created_at >= '{lo}' AND created_at < '{hi}'"
    plan = h.cli("query", "--with-live", "--explain", f"SELECT count(*) FROM orders WHERE {where}")
    assert plan.returncode == 0, plan.stderr
    assert files_read(plan.stdout) == overlapping, plan.stdout
    mine = live(h, f"SELECT count(*) AS n FROM orders WHERE {where}")[0]["n"]
    assert mine == h.value(f"SELECT count(*) FROM untouched WHERE {where}") == 360
    plan = h.cli("query", "--with-live", "--explain", "SELECT * FROM orders WHERE id = 4321")
    assert files_read(plan.stdout) == 1, plan.stdout
    assert live(h, "SELECT id FROM orders WHERE id = 4321") == [{"id": 4321}]


def test_copies_stay_out_and_moves_without_delta_stay_in_once_their_jobs_are_gone(
    h: Harness,
) -> None:
    """A copy job's files hold rows that are still live: never in the union. A move run
    with --no-delta is out of the Delta table too, but its rows left the table: in it.
    With their jobs pruned, each file's own metadata tells them apart."""
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2024-12-29", "--mode", "copy")
    h.archive("--table", "orders", "--before", "2024-12-28", "--no-delta")
    moved = ROWS - h.value("SELECT count(*) FROM orders")
    assert moved > 0 and h.value("SELECT count(*) FROM archive_files WHERE delta") == 0
    h.sql("DELETE FROM background_jobs")  # as the pruner does, in time
    rows = live(
        h, "SELECT _archiver_source AS side, count(*) AS n FROM orders GROUP BY 1 ORDER BY 1"
    )
    assert rows == [{"side": "archive", "n": moved}, {"side": "live", "n": ROWS - moved}]


def test_a_separate_catalog_database_is_refused_in_one_line(h: Harness) -> None:
    done = h.with_env(ARCHIVER_SOURCE_URL=h.url + "?application_name=elsewhere").cli(
        "query", "--with-live", "SELECT 1"
    )
    assert_refused(done, "no one snapshot", code=1)
