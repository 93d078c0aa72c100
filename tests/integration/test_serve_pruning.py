"""What `archiver serve` reads of the catalog for a statement: the files its integer key
bounds leave out are left out in the catalog's own query (a key lookup reads back its
file and the table's newest, not every file), and what serve then reads is what
archiver query's pruning alone leaves, for every shape of bound; lookups and common
table expressions named as the table, exact through psycopg."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from archiver.testing.reference import seed_orders
from tests.support.harness import Harness
from tests.support.serve import serving

BEFORE = "2024-12-29"


PRUNED = [  # (statement in DuckDB's words, its parameters)
    ("SELECT * FROM orders WHERE id = $1", [k])
    for k in (1, 4321, 4322, 9000, 12000, 19999, 20000, 20001, -5, 10**30)
] + [
    ("SELECT * FROM orders WHERE id IN (4400, 15000, 30000)", []),
    ("SELECT * FROM orders WHERE id BETWEEN $1 AND $2", [9000, 9500]),
    ("SELECT * FROM orders WHERE id > 18000", []),
    ("SELECT * FROM orders WHERE id < 6000 AND id IN (5000, 18000)", []),
    ("SELECT * FROM orders WHERE id >= 7000 AND id <= 7001", []),
    ("SELECT * FROM orders WHERE id = '7000'", []),
    ("SELECT * FROM public.orders WHERE id = 8000", []),
    ("SELECT * FROM orders a JOIN orders b ON a.id = b.id WHERE a.id = 5000 AND b.id = 16000", []),
    ("SELECT * FROM orders WHERE id = 5000 UNION ALL SELECT * FROM orders", []),
    ("SELECT * FROM orders WHERE id = 5000 OR id = 16000", []),
    ("SELECT * FROM orders WHERE customer_id = 3", []),
    ("SELECT * FROM orders WHERE id = 10 AND created_at < '2024-06-01'", []),
    ("SELECT count(*) FROM orders", []),
]


def test_the_catalog_leaves_out_what_pruning_would(h: Harness, monkeypatch: Any) -> None:
    """serve's catalog query leaves out the files a statement's integer key bounds prune
    (a key lookup reads back its file and the table's newest, not every file); what
    serve then reads is what archiver query's pruning alone leaves, for every shape of
    bound, and a lookup through serve is exact."""
    import duckdb

    from archiver.config import Settings
    from archiver.query import statement
    from archiver.serve.fileset import FileSet
    from archiver.store.served import served_files

    seed_orders(h.url, 20_000)
    h.sql("CREATE TABLE untouched AS SELECT * FROM orders")
    h.archive("--table", "orders", "--before", BEFORE, "--chunk-rows", "1500")
    settings = Settings.from_env(h.env)
    files = FileSet(settings.database_url, str(settings.storage_location()))
    parser = duckdb.connect()
    try:
        every = served_files(files._connection(), ["orders"], files.storage, False)
        assert len(every) >= 10
        lookup = served_files(
            files._connection(), ["orders"], files.storage, False, {"id": [[9000, 9000, [9000]]]}
        )
        newest = max(r[11] for r in every)
        assert len(lookup) <= 2 and newest in [r[11] for r in lookup]
        assert any(int(r[6]) <= 9000 <= int(r[7]) for r in lookup)

        def paths(sql: str, params: list[Any]) -> dict[str, list[str]]:
            plain, _ = files.files(sql, params, statement.serialized(sql, parser))
            assert plain is not None
            return {t: [f.path for f in fs] for t, fs in plain.files.items()}

        ends = sorted({int(r[c]) + d for r in every for c in (6, 7) for d in (-1, 0, 1)})
        shapes = (
            PRUNED
            + [("SELECT * FROM orders WHERE id = $1", [k]) for k in ends]
            + [("SELECT * FROM orders WHERE id BETWEEN $1 AND $2", [k, k]) for k in ends]
        )
        answers = [paths(sql, params) for sql, params in shapes]
        monkeypatch.setattr(statement, "integer_ranges", lambda refs: {})
        for (sql, params), answer in zip(shapes, answers, strict=True):
            assert answer == paths(sql, params), (sql, params)
    finally:
        files.close()
        parser.close()
    with serving(h) as served, psycopg.connect(served.dsn()) as conn:
        for key in (4321, 9000, 20000, 3):
            got = conn.execute("SELECT id, total FROM orders WHERE id = %s", (key,)).fetchall()
            want = h.sql(
                "SELECT id, total FROM untouched WHERE id = $1 AND created_at < $2::text::timestamptz",
                key,
                BEFORE,
            )
            assert [tuple(r) for r in got] == [tuple(r) for r in want]
        # a common table expression named as the table hides it, but in its own body
        shadowed = "WITH orders AS (SELECT 7 AS id) SELECT id FROM orders"
        assert conn.execute(shadowed).fetchall() == [(7,)]
        own = "WITH orders AS (SELECT id FROM orders WHERE id = 9000) SELECT id FROM orders"
        assert conn.execute(own).fetchall() == [(9000,)]


def _integer_end(text: str | None) -> int | None:
    return int(text) if text is not None and re.fullmatch(r"[+-]?[0-9]{1,30}", text) else None


def _meets(row: tuple[Any, ...], ranges: list[list[Any]]) -> bool:
    """Whether a file (a served_files row) may hold a key one of `ranges` keeps, tested
    on its own ends, exactly: ends that are not integers in order bound nothing."""
    low, high = _integer_end(row[6]), _integer_end(row[7])
    if low is None or high is None or low > high:
        low = high = None
    for lo, hi, values in ranges:
        for a, b in [(lo, hi)] if values is None else [(v, v) for v in values]:
            a = lo if a is None or (lo is not None and lo > a) else a
            b = hi if b is None or (hi is not None and hi < b) else b
            if a is not None and b is not None and a > b:
                continue  # no key is in both
            if (a is None or high is None or high >= a) and (b is None or low is None or low <= b):
                return True
    return False


SPANS: list[list[list[Any]]] = [  # ranges of `id` a statement keeps, one per reading of the table
    [[k, k, None]]
    for k in (
        0,
        5,
        19_999,
        20_000,
        39_999,
        -7,
        1_600_000_000_000_000_123,
        9_223_372_036_854_775_807,
        -9_223_372_036_854_775_808,
        77_777,
    )
] + [
    [[100, 5_000, None]],
    [[None, -1, None]],
    [[39_990, None, None]],
    [[None, None, [3, 17_005, 1_600_000_000_000_000_500]]],
    [[10, 20, [15, 500]]],  # 500 is outside the bounds: not a key the statement can read
    [[10, 20, None], [30_000, 30_005, None]],
    [[50, 40, None]],  # no key
]


def test_the_key_span_index_answers_as_every_file_would_at_thousands_of_files(
    h: Harness,
) -> None:
    """At 6,000 catalogued files of every shape (narrow and wide, overlapping, negative,
    snowflake-sized, beyond bigint, ends that sort as text, an empty partition's, of
    another key column, of another storage, pending), serve's catalog query with a
    statement's key ranges returns exactly the files whose own ends meet them, with the
    table's newest; found by the index on their spans (EXPLAIN names it)."""
    from archiver.serve.fileset import FileSet
    from archiver.store.served import served_files

    h.sql("CREATE TABLE spans (id bigint PRIMARY KEY, other_id bigint, created_at timestamptz)")
    storage = "file:///spans-test"
    shapes = """
        CASE WHEN g % 97 = 0 THEN ARRAY['0'] WHEN g % 89 = 0 THEN ARRAY['-50']
             WHEN g % 83 = 0 THEN ARRAY['1600000000000000000']
             WHEN g % 79 = 0 THEN ARRAY['10'] WHEN g % 73 = 0 THEN ARRAY[]::text[]
             WHEN g % 71 = 0 THEN ARRAY['99999999999999999999'] WHEN g % 67 = 0 THEN ARRAY['abc']
             ELSE ARRAY[(g * 10)::text] END,
        CASE WHEN g % 97 = 0 THEN ARRAY['1000000'] WHEN g % 89 = 0 THEN ARRAY['-1']
             WHEN g % 83 = 0 THEN ARRAY['1600000000000000999']
             WHEN g % 79 = 0 THEN ARRAY['9'] WHEN g % 73 = 0 THEN ARRAY[]::text[]
             WHEN g % 71 = 0 THEN ARRAY['999999999999999999999'] WHEN g % 67 = 0 THEN ARRAY['abd']
             ELSE ARRAY[(g * 10 + 9)::text] END"""
    h.sql(f"""
        INSERT INTO archive_files (job_id, part, source_table, storage_url, path, row_count,
            byte_size, md5, key_columns, min_key, max_key, cutoff_column, state)
        SELECT gen_random_uuid(), g, 'public.spans',
               CASE WHEN g % 61 = 0 THEN 'file:///elsewhere' ELSE '{storage}' END,
               'f-' || g, 10, 100, '', CASE WHEN g % 59 = 0 THEN ARRAY['other_id'] ELSE ARRAY['id'] END,
               {shapes}, 'created_at',
               CASE WHEN g % 53 = 0 THEN 'pending' ELSE 'committed' END
        FROM generate_series(0, 5999) g""")  # fmt: skip
    h.sql("ANALYZE archive_files")
    files = FileSet(h.url, storage)
    try:
        conn = files._connection()
        every = served_files(conn, ["spans"], storage, False)
        assert 5_000 < len(every) < 6_000
        newest = max(r[11] for r in every)
        for ranges in SPANS:
            got = {r[11] for r in served_files(conn, ["spans"], storage, False, {"id": ranges})}
            want = {r[11] for r in every if r[5] != "id" or _meets(r, ranges)} | {newest}
            assert got == want, (ranges, sorted(got - want)[:5], sorted(want - got)[:5])
            if ranges[0][0] == ranges[0][1]:  # a lookup: its files, the wide and the unbounded
                assert len(got) < len(every) / 10, ranges
        # a lookup's plan: the spans' index, not every file of the table
        plan = conn.exec_(b"EXPLAIN EXECUTE served_files('[\"spans\"]', '" + storage.encode()
                          + b"', false, '{\"id\": [[5, 5, null]]}')")  # fmt: skip
        text = "\n".join(bytes(plan.get_value(i, 0) or b"").decode() for i in range(plan.ntuples))
        assert "archive_files_key_span" in text, text
    finally:
        files.close()
