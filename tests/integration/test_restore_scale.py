"""Restore costs what it restores, not the size of the files it restores from.

A month out of files of 136k and 545k rows ran twenty minutes: the rows a file kept
went back to PostgreSQL as `= ANY (ARRAY(...))`, searched without a hash for every
staged row. Seconds would not catch that in a test (a 20k-row file takes milliseconds
either way), so this test counts instead, in the real restore against the real server:

- the rows staged in PostgreSQL, which must be about the range's, not the file's;
- the shape of the plan of every statement over the staged rows (EXPLAIN, taken just
  before the statement runs, in the restore's own transaction): no nested loop that
  scans anything but an index once per outer row, no subplan searched per row, and no
  `= ANY` over a non-constant array (PostgreSQL hashes only constant ones).

Both fail on the code before the fix (it staged every row, and its key ends filtered
by `= ANY ($1)` with an InitPlan). So does the count of the file's whole reads on
a84fc94 (it read every column of the file at once; now a row group at a time)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import adbc_driver_manager.dbapi
import pyarrow.parquet as pq
import pytest

from archiver.config import Settings
from archiver.context import Context
from archiver.operations import restore_files as restore_op
from archiver.operations.selection import FileSelection
from archiver.restore import Restored
from archiver.testing.reference import seed_orders
from tests.support.harness import Harness

ROWS = 20_000  # one file; the reference table has a row a minute: ~14 days
DAY = 1_440
LO, HI = "2024-12-20T00:00:00+00:00", "2024-12-21T00:00:00+00:00"
STAGES = ("archiver_restore_stage",)
# a nested loop may repeat these once per outer row: each reads only matching rows
INDEXED = {"Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Result"}
NON_CONSTANT_ANY = re.compile(r"= ANY \(\$\d+\)|= ANY \(\(SubPlan|= ANY \(ARRAY\(SELECT")


class Recorder:
    """Each statement a restore runs over its staged rows, EXPLAINed just before it runs
    (the same cursor, transaction and parameters), and the rows it staged."""

    def __init__(self) -> None:
        self.plans: list[tuple[str, dict[str, Any]]] = []
        self.staged = 0
        self.whole_reads = 0  # a file's every column read at once (not a row group)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cursor = adbc_driver_manager.dbapi.Cursor
        execute, ingest = cursor.execute, cursor.adbc_ingest
        read = pq.ParquetFile.read
        recorder = self

        def read_some(self: Any, columns: Any = None, *args: Any, **kw: Any) -> Any:
            recorder.whole_reads += columns is None
            return read(self, columns, *args, **kw)

        def explained(self: Any, operation: Any, parameters: Any = None, **kw: Any) -> Any:
            text = operation if isinstance(operation, str) else ""
            head = text.lstrip().split(None, 1)[0].upper() if text.strip() else ""
            if head in ("SELECT", "WITH", "INSERT") and any(s in text for s in STAGES):
                execute(self, f"EXPLAIN (FORMAT JSON) {text}", parameters)
                plan = self.fetchall()[0][0]
                recorder.plans.append((text, json.loads(plan)[0]["Plan"]))
            return execute(self, operation, parameters, **kw)

        def counted(self: Any, table_name: str, data: Any, *args: Any, **kw: Any) -> Any:
            if table_name in STAGES:
                recorder.staged += data.num_rows
            return ingest(self, table_name, data, *args, **kw)

        monkeypatch.setattr(cursor, "execute", explained)
        monkeypatch.setattr(cursor, "adbc_ingest", counted)
        monkeypatch.setattr(pq.ParquetFile, "read", read_some)


def repeated_scans(plan: dict[str, Any], path: str = "") -> list[str]:
    """Where `plan` does per-row work over a whole relation: a nested loop whose inner
    side is not an index lookup, a subplan that is not hashed, `= ANY` over a
    non-constant array."""
    found = []
    here = f"{path}/{plan['Node Type']}"
    children = plan.get("Plans", [])
    if plan["Node Type"] == "Nested Loop" and len(children) == 2:
        inner = children[1]
        if inner["Node Type"] not in INDEXED:
            found.append(f"{here}: a {inner['Node Type']} once per outer row")
    for key in ("Filter", "Join Filter", "Hash Cond", "Index Cond", "Recheck Cond"):
        if NON_CONSTANT_ANY.search(plan.get(key, "")):
            found.append(f"{here}: {key} {plan[key]}")
    for child in children:
        if child.get("Parent Relationship") == "SubPlan" and "hashed" not in child.get(
            "Subplan Name", ""
        ):
            rel = child.get("Relation Name", "")
            if child["Node Type"] not in INDEXED or rel in STAGES:
                found.append(f"{here}: subplan {child.get('Subplan Name')} per row")
        found += repeated_scans(child, here)
    return found


def test_a_day_out_of_a_big_file_stages_a_day_and_scans_it_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_orders(h.url, ROWS)
    h.sql("CREATE TABLE snapshot AS SELECT * FROM orders")
    h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", str(ROWS))
    assert h.value("SELECT count(*) FROM archive_files") == 1
    recorder = Recorder()
    recorder.install(monkeypatch)

    async def restore() -> Restored:
        async with Context(Settings.from_env(h.env)) as ctx:
            done, _ = await restore_op.restore(
                ctx,
                FileSelection(job_id=None, table="orders", cutoff_from=LO, cutoff_to=HI),
                into=None,
                keep_archive=False,
                skip_conflicts=False,
                dry_run=False,
                ignore_dropped_columns=False,
                report=lambda _: None,
            )
            return done

    done = asyncio.run(restore())
    monkeypatch.undo()
    assert done.rows == DAY
    # a day and a day's margin either side, not the file's 20,000 rows
    assert recorder.staged <= 3 * DAY + 2, f"{recorder.staged:,} rows staged for {DAY:,}"
    # the file read a row group at a time, and its cutoff column alone, to stage, rewrite
    # and find the kept rows' key ends: never whole (a day out of a 1M-row file peaked at
    # 519-583 MB on a84fc94, which read it whole here; bench, restore section)
    assert recorder.whole_reads == 0
    assert recorder.plans, "no statement over the staged rows was seen"
    problems = [
        f"{problem}\n    in: {text[:200]}"
        for text, plan in recorder.plans
        for problem in repeated_scans(plan)
    ]
    assert not problems, "\n".join(problems)
    # the move itself: each row in one place, the rest of the file rewritten
    assert h.value("SELECT count(*) FROM orders") == DAY
    h.exactly_once(set(range(1, ROWS + 1)))
    assert h.cli("verify", "--table", "orders").returncode == 0


def test_the_shape_check_sees_a_quadratic_search(h: Harness) -> None:
    """The check itself fails on the statement that was quadratic (a kept-row list as
    `= ANY (ARRAY(SELECT …))`), and passes on its hashed replacement."""
    h.sql("CREATE TABLE archiver_restore_stage (__archiver_row bigint, id bigint)")
    h.sql("INSERT INTO archiver_restore_stage SELECT g, g FROM generate_series(0, 19999) g")
    h.sql("ANALYZE archiver_restore_stage")
    rows = json.dumps(list(range(0, 20_000, 2)))
    quadratic = (
        "SELECT id FROM archiver_restore_stage s WHERE s.__archiver_row = ANY "
        "(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) ORDER BY id LIMIT 1"
    )
    hashed = (
        "SELECT id FROM archiver_restore_stage s WHERE s.__archiver_row IN "
        "(SELECT jsonb_array_elements_text($1::jsonb)::bigint) ORDER BY id LIMIT 1"
    )
    plans = [
        json.loads(h.value(f"EXPLAIN (FORMAT JSON) {q}", rows))[0]["Plan"]
        for q in (quadratic, hashed)
    ]
    assert repeated_scans(plans[0]), plans[0]
    assert not repeated_scans(plans[1]), plans[1]
