"""archiver.serve.inlining: which references of a statement are archived tables (written
in place as their files' SELECT) and which are a common table expression's name, as
DuckDB binds them; placeholders no statement text can forge."""

from __future__ import annotations

import duckdb
import pytest

from archiver.serve import companions, inlining

TABLES = [("public", "orders"), ("public", "customers")]
BODIES = {
    ("public", "orders"): "SELECT 'archived' AS src",
    ("public", "customers"): "SELECT 'c' AS src",
}


@pytest.fixture(scope="module")
def cur() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE orders AS SELECT 'table' AS src")  # what DuckDB would bind
    return con


def run(cur: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[object, ...]]:
    made = inlining.template(cur, sql, None, set(), TABLES)
    assert made is not None
    return cur.execute(inlining.written(made, BODIES)).fetchall()


@pytest.mark.parametrize(
    ("sql", "rows"),
    [
        ("SELECT src FROM orders", [("archived",)]),
        ("SELECT src FROM ORDERS", [("archived",)]),
        ("SELECT src FROM public.orders", [("archived",)]),
        ("WITH orders AS (SELECT 'cte' AS src) SELECT src FROM orders", [("cte",)]),
        ("WITH Orders AS (SELECT 'cte' AS src) SELECT src FROM orders", [("cte",)]),
        # a CTE's own body reads the table it is named after
        (
            "WITH orders AS (SELECT src || '!' AS src FROM orders) SELECT src FROM orders",
            [("archived!",)],
        ),
        # a later CTE reads the earlier one, an earlier one the table
        (
            "WITH a AS (SELECT src FROM orders), orders AS (SELECT 'cte' AS src) "
            "SELECT (SELECT src FROM a), (SELECT src FROM orders)",
            [("archived", "cte")],
        ),
        (
            "WITH orders AS (SELECT 'cte' AS src), b AS (SELECT src FROM orders) SELECT src FROM b",
            [("cte",)],
        ),
        # a CTE in a subquery hides the table there alone
        (
            "SELECT o.src, (WITH orders AS (SELECT 'cte' AS src) SELECT src FROM orders) FROM orders o",
            [("archived", "cte")],
        ),
        # schema-qualified: the table, whatever the CTEs
        ("WITH orders AS (SELECT 'cte' AS src) SELECT src FROM public.orders", [("archived",)]),
        # a recursive CTE reads itself in its recursive term, the table in its first
        (
            "WITH RECURSIVE orders(src, n) AS (SELECT src, 1 FROM orders UNION ALL "
            "SELECT src, n + 1 FROM orders WHERE n < 2) SELECT src, n FROM orders ORDER BY n",
            [("archived", 1), ("archived", 2)],
        ),
    ],
)
def test_tables_and_ctes_bind_as_duckdb_binds_them(
    cur: duckdb.DuckDBPyConnection, sql: str, rows: list[tuple[object, ...]]
) -> None:
    assert run(cur, sql) == rows


def test_a_placeholder_in_a_literal_is_text(cur: duckdb.DuckDBPyConnection) -> None:
    """A placeholder carries a token of the process's own: a statement cannot write one."""
    text = "__archiver_0123456789abcdef_0__"
    assert run(cur, f"SELECT '{text}' AS t, src FROM orders") == [(text, "archived")]


FILED = {
    ("public", "orders"): "SELECT 1 AS id, 'x' AS total__pg_text, 7 AS _archiver_file",
    ("public", "customers"): "SELECT 1 AS id, 'c' AS name, 9 AS _archiver_file",
}


@pytest.mark.parametrize(
    ("sql", "columns"),
    [
        # a star leaves out _archiver_file of each archived table it covers
        ("SELECT *, _archiver_file FROM orders", ["id", "total__pg_text", "_archiver_file"]),
        ("SELECT o.*, o._archiver_file AS f FROM orders o", ["id", "total__pg_text", "f"]),
        (
            "SELECT * FROM orders o JOIN customers c USING (id) WHERE c._archiver_file > 0",
            ["id", "total__pg_text", "name"],
        ),
        (
            "SELECT c.*, o.id FROM orders o, customers c WHERE o._archiver_file = 7",
            ["id", "name", "id"],
        ),
        # a subquery's column of that name is no table's: a star over it shows it
        (
            "SELECT * FROM (SELECT _archiver_file AS _archiver_file FROM orders) s",
            ["_archiver_file"],
        ),
        (
            "SELECT * FROM orders o, (SELECT _archiver_file FROM customers) s",
            ["id", "total__pg_text", "_archiver_file"],
        ),
        # stars at every depth, in a WITH query and a set operation
        (
            "WITH w AS (SELECT * FROM orders WHERE _archiver_file = 7) SELECT * FROM w",
            ["id", "total__pg_text"],
        ),
        (
            "SELECT * FROM orders WHERE _archiver_file = 7 UNION ALL SELECT * FROM orders",
            ["id", "total__pg_text"],
        ),
    ],
)
def test_a_star_leaves_out_archiver_file_where_the_statement_names_it(
    cur: duckdb.DuckDBPyConnection, sql: str, columns: list[str]
) -> None:
    made = inlining.template(cur, sql, None, set(), TABLES, file_named=True)
    assert made is not None
    described = cur.execute(inlining.written(made, FILED)).description or []
    assert [d[0] for d in described] == columns


def test_hidden_columns_a_star_brings_are_paired_not_shown() -> None:
    names = ["id", "total", "total__pg_text", "_archiver_file", "total__pg_text"]
    # the last one appended: the star's companion and _archiver_file not shown
    assert companions.paired(names, 1, set()) == ([0, 1], {1: 4})
    # a companion the statement names is shown, and still pairs its column
    assert companions.paired(names[:3], 0, {"total__pg_text"}) == ([0, 1, 2], {1: 2})
