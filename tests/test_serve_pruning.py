"""What `archiver serve` reads of the catalog for a statement: the files its integer key
bounds leave out are left out in the catalog's own query (a key lookup reads back its
file and the table's newest, not every file), and what serve then reads is what
archiver query's pruning alone leaves, for every shape of bound; lookups and common
table expressions named as the table, exact through psycopg."""

from __future__ import annotations

from typing import Any

import psycopg

from archiver.testing.reference import seed_orders
from tests.harness import Harness
from tests.serve_support import serving

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
