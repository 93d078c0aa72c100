"""Names as PostgreSQL reads them: the one parser every command, policy and the console
use (archiver.ident)."""

from __future__ import annotations

import pytest

from archiver.errors import InputError
from archiver.ident import TableName, as_typed, parse_column, split_name, sql_name


@pytest.mark.parametrize(
    ("typed", "schema", "name"),
    [
        ("orders", None, "orders"),
        ("Orders", None, "orders"),  # folded, as psql folds it
        ("Sales.Orders", "sales", "orders"),
        ('"Sales"."Orders"', "Sales", "Orders"),
        ('"Sales".orders', "Sales", "orders"),
        (' "Sales" . "Order Lines" ', "Sales", "Order Lines"),
        ('"a""b"', None, 'a"b'),
        ("ÉTÉ", None, "ÉtÉ"),  # PostgreSQL folds A-Z only (UTF-8 databases)
        ('"<script>alert(1)</script>"', None, "<script>alert(1)</script>"),
        ("_x$1", None, "_x$1"),
    ],
)
def test_a_table_name_reads_as_postgresql_reads_it(
    typed: str, schema: str | None, name: str
) -> None:
    table = TableName.parse(typed)
    assert (table.schema, table.name) == (schema, name)
    assert TableName.parse(table.sql) == table  # what archiver prints reads back the same


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ('"Sales', "not closed"),
        ('""', "empty quoted name"),
        ("a.b.c", "expected table or schema.table"),
        ("Order Lines", "unexpected 'L' at character 7"),
        ("a.", "expected a name at character 3"),
        ("1abc", "expected a name at character 1"),
        ('"my.table"', "holding a dot is not supported"),
        ("", "expected a name"),
    ],
)
def test_a_name_postgresql_would_not_read_is_one_line(typed: str, says: str) -> None:
    with pytest.raises(InputError, match=says.replace("(", r"\(")):
        TableName.parse(typed)


def test_a_recorded_table_is_typed_back_exactly() -> None:
    assert as_typed("public.orders") == "public.orders"
    assert as_typed("Sales.Orders") == '"Sales"."Orders"'
    assert as_typed('public.a"b') == 'public."a""b"'
    assert str(TableName.parse(as_typed("Sales.Order Lines"))) == "Sales.Order Lines"
    assert sql_name("user") == "user" and sql_name("CreatedAt") == '"CreatedAt"'


def test_a_column_is_one_name() -> None:
    assert parse_column("created_at") == "created_at"
    assert parse_column("CreatedAt") == "createdat"
    assert parse_column('"CreatedAt"') == "CreatedAt"
    assert parse_column('"total, eur"') == "total, eur"
    assert split_name('a."B"') == ["a", "B"]
    with pytest.raises(InputError, match="expected one name"):
        parse_column("t.created_at")
