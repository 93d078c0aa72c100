"""What a statement's constraints rule out (archiver.query.statement, catalog.prune) and
how compaction reads a catalogued end: only what cannot hold a row it reads is left
out, and what cannot be read for sure is kept."""

from __future__ import annotations

import datetime as dt

import pytest

from archiver.lifecycle.compact import instant
from archiver.query.catalog import File, Snapshot, hull, prune
from archiver.query.statement import references


def catalogued(low: str, high: str, first: str | None = None, last: str | None = None) -> File:
    return File(f"{low}-{high}", "id", low, high, "created_at", first, last)


def kept(sql: str, files: list[File], integer_keys: bool = True) -> list[str]:
    refs = references(sql)
    assert refs is not None
    snapshot = Snapshot("", "", {"public.t": files})
    snapshot.integer_keys = {("public.t", "id")} if integer_keys else set()
    prune(snapshot, refs)
    return [f.path for f in snapshot.files["public.t"]]


FILES = [catalogued("1", "99"), catalogued("100", "199"), catalogued("200", "299")]


@pytest.mark.parametrize(
    ("where", "paths"),
    [
        ("id = 150", ["100-199"]),
        ("ID BETWEEN 99 AND 100", ["1-99", "100-199"]),  # names in any case
        ("id > 250 AND id < 260", ["200-299"]),
        ("id IN (5, 205)", ["1-99", "200-299"]),
        ("id = 150 OR id = 5", ["1-99", "100-199", "200-299"]),  # an OR: not used
        ("id = 150.0", ["1-99", "100-199", "200-299"]),  # a decimal: not used
        ("id + 0 = 150", ["1-99", "100-199", "200-299"]),  # not a column: not used
        ("id = '150'", ["100-199"]),  # a string DuckDB casts to the column's integer
    ],
)
def test_an_integer_key_rules_out_the_files_its_bounds_miss(where: str, paths: list[str]) -> None:
    assert kept(f"SELECT * FROM t WHERE {where}", FILES) == paths


def test_a_key_not_of_an_integer_type_rules_nothing_out() -> None:
    text = [catalogued("100", "3")]  # as text: '20' lies between, as a number it does not
    assert kept("SELECT * FROM t WHERE id = '20'", text, integer_keys=False) == ["100-3"]
    assert kept("SELECT * FROM t WHERE id = 20", FILES, integer_keys=False) == [
        f.path for f in FILES
    ]


def test_every_file_ruled_out_keeps_one_for_the_tables_columns() -> None:
    assert kept("SELECT * FROM t WHERE id < 0", FILES) == ["200-299"]


def test_a_table_read_twice_keeps_what_either_read_needs() -> None:
    sql = "SELECT * FROM t a JOIN t b ON a.id = b.id + 100 WHERE a.id = 150 AND b.id = 50"
    assert kept(sql, FILES) == ["1-99", "100-199"]
    unbounded = "SELECT * FROM t WHERE id = 150 UNION ALL SELECT * FROM t"
    assert kept(unbounded, FILES) == [f.path for f in FILES]


def test_the_cutoff_rules_out_with_a_days_margin() -> None:
    files = [
        catalogued("1", "9", "2024-01-01T00:00:00", "2024-01-31T23:00:00"),
        catalogued("10", "19", "2024-02-01T00:00:00", "2024-02-29T23:00:00"),
        catalogued("20", "29", "10000-01-01T00:00:00", "10000-02-01T00:00:00"),  # PostgreSQL's
    ]
    sql = "SELECT * FROM t WHERE created_at >= TIMESTAMPTZ '2024-02-15'"
    assert kept(sql, files) == ["10-19", "20-29"]
    assert kept("SELECT * FROM t WHERE created_at < '2024-02-01'", files) == [
        "1-9",
        "10-19",
        "20-29",
    ]


def test_a_file_kept_by_the_margin_alone_is_marked_to_be_read_on_its_own() -> None:
    """Files of one schema are read together (query.views); one the cutoff's margin
    alone keeps stands apart, its own ranges in DuckDB deciding whether it is read."""
    files = [
        catalogued("1", "9", "2024-01-01T00:00:00", "2024-01-31T23:00:00"),
        catalogued("10", "19", "2024-02-01T00:00:00", "2024-02-29T23:00:00"),
    ]
    refs = references("SELECT * FROM t WHERE created_at >= TIMESTAMPTZ '2024-02-01 10:00:00+00'")
    assert refs is not None
    snapshot = Snapshot("", "", {"public.t": files})
    prune(snapshot, refs)
    assert [(f.path, f.alone) for f in snapshot.files["public.t"]] == [
        ("1-9", True),  # within a day of the constant: kept, for DuckDB to rule out
        ("10-19", False),
    ]


def test_files_read_together_are_bounded_by_the_range_of_all_their_rows() -> None:
    a = catalogued("-5", "9", "2024-01-01T00:00:00", "2024-01-31T23:00:00")
    b = catalogued("100", "199", "2023-12-01T00:00:00", "2024-02-29T23:00:00")
    both = hull([a, b])
    assert (both.min_key, both.max_key) == ("-5", "199")
    assert (both.min_cutoff, both.max_cutoff) == ("2023-12-01T00:00:00", "2024-02-29T23:00:00")
    assert hull([a]) is a
    text = catalogued("abc", "abd", None, None)  # a key of text, a cutoff of no range
    loose = hull([a, text])
    assert (loose.min_key, loose.max_key, loose.min_cutoff, loose.max_cutoff) == (
        "",
        "",
        None,
        None,
    )


def test_what_duckdb_cannot_serialize_is_not_known() -> None:
    assert references("PIVOT t ON id USING count(*)") is None
    assert [r.table for r in references("SELECT * FROM main.T") or []] == ["T"]


def test_a_year_past_9999_is_the_end_of_time_to_compaction() -> None:
    assert instant("10000-01-01 00:00:00+00") == dt.datetime.max.replace(tzinfo=dt.UTC)
    assert instant(None) == dt.datetime.min.replace(tzinfo=dt.UTC)
