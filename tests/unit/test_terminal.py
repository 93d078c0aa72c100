"""What the CLI prints, from plain rows."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

from archiver import terminal, text


def test_cells_by_type_and_name() -> None:
    assert text.size(999) == "999 B" and text.size(2_500_000) == "2.5 MB"
    assert text.duration(59) == "0:59" and text.duration(3725) == "1:02:05"
    assert terminal.cell("rows", 1234567) == "1,234,567"
    assert terminal.cell("bytes_archived", 1500) == "1.5 kB"
    assert terminal.cell("eta_seconds", 61.0) == "1:01"
    assert terminal.cell("rows_per_second", decimal.Decimal("12.34")) == "12.3"
    assert terminal.cell("x", None) == "-" and terminal.cell("ok", True) == "yes"
    when = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert terminal.cell("created_at", when) == "2024-01-02 03:04:05Z"
    assert terminal.cell("last_error", "e" * 100).endswith("…")
    # PostgreSQL's -infinity/infinity as asyncpg returns them (a child table's files)
    assert terminal.cell("oldest_value", dt.datetime.min) == "-infinity"
    assert terminal.cell("newest_value", dt.datetime.max) == "infinity"
    assert terminal.dumps([dt.datetime.min]) == '[\n  "-infinity"\n]'


def test_table_aligns_columns() -> None:
    rows: list[dict[str, object]] = [{"a": 1, "b": "x"}, {"a": 22222, "b": None}]
    assert terminal.table(rows, [("a", "A"), ("b", "B")]).splitlines() == [
        "A       B",
        "1       x",
        "22,222  -",
    ]


def test_progress_text_and_json() -> None:
    text = terminal.progress_text(
        {
            "rows": 24000,
            "rows_estimated": 55193,
            "bytes": 1_900_000,
            "files": 2,
            "chunks_estimated": 3,
        }
    )
    assert text == "24,000 of ~55,193 rows (43%), 1.9 MB, chunk 2 of ~3"
    job_id = uuid.UUID(int=1)
    assert '"00000000-0000-0000-0000-000000000001"' in terminal.dumps({"id": job_id})


def test_plan_report() -> None:
    plan = {
        "table": "public.orders", "rows": 1200, "chunk_rows": 1000, "chunks": 2,
        "parquet_bytes": 48000, "uses_index": True, "indexes": ["orders_created"],
        "sequential_scan": False,
    }  # fmt: skip
    report = terminal.plan_report(plan, "2024-01-01", "move")
    assert report.startswith("dry run: nothing was queued")
    assert "rows to move   ~1,200" in report and "yes (orders_created)" in report
    assert "trigger" not in report

    plan["partitions"] = [{"partition": "public.orders_2023", "bytes": 9, "rows": 9, "whole": True}]
    plan["partition_action"] = "detach"
    plan["delete_triggers"] = [{"table": "public.orders", "name": "audit", "timing": "AFTER"}]
    lines = terminal.plan_report(plan, "2024-01-01", "move").splitlines()
    assert "partition      public.orders_2023: whole: archived, then detached (~9 rows" in lines[-3]
    assert lines[-2:] == [
        "delete trigger public.orders: audit (AFTER, for each row)",
        "               each fires once per moved row, inside its chunk's transaction"
        " (not for the partitions taken whole)",
    ]


def test_counted() -> None:
    assert [text.counted(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]
