"""archiver.serve.inlining: which references of a statement are archived tables (written
in place as their files' SELECT) and which are a common table expression's name, as
DuckDB binds them; placeholders no statement text can forge."""

from __future__ import annotations

import duckdb
import pytest

from archiver.serve import inlining

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
