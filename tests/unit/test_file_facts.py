"""What a file brings to its Delta table (its schema, its statistics) and how a table's
schema takes a file's: no PostgreSQL, no storage."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from archiver.delta.evolve import SchemaRefused, merge, wider
from archiver.files.facts import NotDeltaType, delta_type, file_facts


def test_a_files_schema_and_statistics_from_its_footer(tmp_path: Path) -> None:
    at = [dt.datetime(2024, 1, 1, 0, 0, 0, 1500, tzinfo=dt.UTC), None]
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "at": pa.array(at, pa.timestamp("us", tz="UTC")),
            "naive": pa.array([dt.datetime(2020, 5, 1), None], pa.timestamp("us")),
            "note": pa.array(["a", "x" * 40], pa.string()),
            "score": pa.array([float("nan"), 1.0]),
            "ratio": pa.array([0.5, 2.0]),
            "total": pa.array([None, None], pa.decimal128(12, 2)),
            "tags": pa.array([["a"], None], pa.list_(pa.string())),
            "when__pg_text": pa.array([None, "infinity"], pa.string()),
        }
    )
    local = tmp_path / "f.parquet"
    pq.write_table(table, local, row_group_size=1)  # two row groups, combined
    schema, stats = (json.loads(x) for x in file_facts(local))
    assert [(f["name"], f["type"]) for f in schema["fields"]] == [
        ("id", "long"),
        ("at", "timestamp"),
        ("naive", "timestamp_ntz"),
        ("note", "string"),
        ("score", "double"),
        ("ratio", "double"),
        ("total", "decimal(12,2)"),
        ("tags", {"type": "array", "elementType": "string", "containsNull": True}),
    ]  # no companion
    assert stats["numRecords"] == 2
    assert stats["minValues"]["id"] == 1 and stats["maxValues"]["id"] == 2
    # milliseconds: the minimum rounded down, the maximum up (a reader never skips wrongly)
    assert stats["minValues"]["at"] == "2024-01-01T00:00:00.001Z"
    assert stats["maxValues"]["at"] == "2024-01-01T00:00:00.002Z"
    assert stats["minValues"]["naive"] == "2020-05-01T00:00:00.000"
    assert stats["minValues"]["note"] == "a" and "note" not in stats["maxValues"]  # cut
    assert "total" not in stats["minValues"] and stats["nullCount"]["total"] == 2
    # a float column's maximum is left out: Parquet's leaves NaN out, which sorts above all;
    # a row group of NaN alone has no minimum or maximum: the column has none then
    assert stats["minValues"]["ratio"] == 0.5 and "ratio" not in stats["maxValues"]
    assert "score" not in stats["minValues"] and "score" not in stats["maxValues"]
    assert stats["nullCount"]["at"] == 1 and "tags" not in stats["nullCount"]


def test_types_delta_has_none_for_are_named() -> None:
    with pytest.raises(NotDeltaType, match="'c_time'"):
        delta_type("c_time", pa.time64("us"))
    with pytest.raises(NotDeltaType):
        delta_type("u", pa.uuid())
    with pytest.raises(NotDeltaType):
        delta_type("n", pa.decimal256(40, 2))


def field(name: str, kind: object) -> dict[str, object]:
    return {"name": name, "type": kind, "nullable": True, "metadata": {}}


def test_a_tables_schema_follows_its_files() -> None:
    table = [field("id", "long"), field("a", "integer"), field("b", "string")]
    later = [field("id", "long"), field("a", "long"), field("c", "string")]
    merged = merge(table, later, "public.t")
    assert [(f["name"], f["type"]) for f in merged.fields] == [
        ("id", "long"),
        ("a", "long"),
        ("b", "string"),  # dropped upstream: kept
        ("c", "string"),
    ]
    assert [f["name"] for f in merged.added] == ["c"]
    assert merged.widened == [("a", "integer", "long")]
    assert merge(merged.fields, [field("a", "short")], "public.t").widened == []  # narrower
    assert wider("decimal(10,2)", "decimal(12,2)") == "decimal(12,2)"
    assert wider("decimal(10,2)", "decimal(12,3)") is None
    assert wider("float", "double") == "double"
    with pytest.raises(SchemaRefused) as refused:
        merge(merged.fields, [field("a", "string")], "public.t")
    assert str(refused.value) == (
        "table public.t, column 'a': the Delta table holds long, a file holds string, "
        "which Delta readers cannot read as one type"
    )
