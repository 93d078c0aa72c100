"""The type table's decisions, SQL side and Arrow side, without a database."""

from __future__ import annotations

import pyarrow as pa
import pytest

from archiver.pgtypes import sql as pgtypes
from archiver.pgtypes.arrow import (
    INTERVAL_STRUCT,
    converter_for,
    split_special,
    staging_table,
    unscaled_decimal,
    within_python_range,
)
from archiver.pgtypes.column import Column
from archiver.pgtypes.sql import plan_column


def typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


@pytest.mark.parametrize(
    ("column", "expression", "parquet", "companion"),
    [
        (Column("n", "integer", "int4"), '"n"', "INT32", None),
        (Column("d", "date", "date"), '"d"', "DATE", "d__pg_text"),
        (Column("p", "numeric(12,2)", "numeric", "N", typmod(12, 2)),
         """CASE WHEN "p" = 'NaN' THEN '-9223372036854775808'::int8 ELSE ("p" * 100)::int8 END""",
         "DECIMAL(12,2)", "p__pg_text"),
        (Column("z", "numeric(18,0)", "numeric", "N", typmod(18, 0)),
         """CASE WHEN "z" = 'NaN' THEN '-9223372036854775808'::int8 ELSE "z"::int8 END""",
         "DECIMAL(18,0)", "z__pg_text"),
        (Column("w", "numeric(19,4)", "numeric", "N", typmod(19, 4)), '"w"', "DECIMAL(19,4)", "w__pg_text"),
        (Column("x", "numeric", "numeric", "N"), '"x"::numeric(38,18)',
         "DECIMAL(38,18) (the others: NULL, exact text beside)", "x__pg_text"),
        (Column("dx", "amount", "numeric", "N"), '"dx"::text', "STRING (PostgreSQL text form)", None),
        (Column("m", "money", "money", "N"), '"m"::numeric::text', "STRING (numeric text)", None),
        (Column("e", "mood", "mood", "E"), '"e"::text', "STRING (enum label)", None),
        (Column("a", "text[]", "_text", "A", -1, "text", "S"), '"a"', "LIST<STRING>", "a__pg_text"),
        (Column("i", "inet", "inet", "I"), '"i"::text', "STRING (PostgreSQL text form)", None),
    ],
)  # fmt: skip
def test_plan_column(column: Column, expression: str, parquet: str, companion: str | None) -> None:
    plan = plan_column(column)
    assert (plan.expression, plan.parquet, plan.companion) == (expression, parquet, companion)


def test_only_enums_are_dictionary_encoded() -> None:
    columns = [
        Column("n", "integer", "int4"),
        Column("e", "mood", "mood", "E"),
        Column("t", "text", "text", "S"),
        Column("a", "mood[]", "_mood", "A", -1, "mood", "E"),
    ]
    assert pgtypes.dictionary_encoded([plan_column(c) for c in columns]) == ["e"]


def test_decimal_of_one_cap() -> None:
    assert pgtypes.decimal_of(typmod(12, 2)) == (12, 2)
    assert pgtypes.decimal_of(typmod(38, 10)) == (38, 10)
    assert pgtypes.decimal_of(typmod(39, 0)) is None  # past Delta's decimal: text
    assert pgtypes.decimal_of(typmod(3, 5)) is None  # scale above precision
    assert pgtypes.decimal_of(-1) is None


def test_key_columns_have_no_companion_and_select_list_adds_them_last() -> None:
    key = Column("d", "date", "date")
    arr = Column("a", "int4[]", "_int4", "A", -1, "int4", "N")
    plans = pgtypes.plan_table((key, arr), (key,))
    assert plans[0].companion is None
    select = pgtypes.select_list(plans)
    assert select.startswith('"d" AS "d", CASE WHEN')
    assert select.endswith('AS "a__pg_text"')
    assert pgtypes.companions(plans) == ["a__pg_text"]


def test_unconstrained_numeric_keeps_its_decimal_and_exact_text_beside() -> None:
    key = Column("k", "numeric", "numeric", "N")
    x = Column("x", "numeric", "numeric", "N")
    plans = pgtypes.plan_table((key, x), (key,))
    assert plans[0].expression == '"k"' and plans[0].parquet.startswith("STRING")  # a key: text
    select = pgtypes.select_list(plans)
    special = 'NOT ("x" = trunc("x", 18) AND abs("x") < 1e20)'
    assert f'(CASE WHEN {special} THEN NULL ELSE "x"::numeric(38,18) END)::numeric(38,18)' in select
    exact = 'scale("x") <> min_scale("x")'
    assert f'CASE WHEN {special} OR {exact} THEN "x"::text END AS "x__pg_text"' in select
    kept = pgtypes.plan_table((key, x), (key,), frozenset({"x"}))  # its earlier files: text
    assert kept[1].expression == '"x"::text' and kept[1].companion is None
    restore = pgtypes.restore_expression("x", "numeric", True, "s")
    assert restore == (
        'CASE WHEN s."x__pg_text" IS NOT NULL THEN s."x__pg_text"::numeric '
        'ELSE trim_scale(s."x"::numeric) END'
    )
    assert "trim_scale" not in pgtypes.restore_expression("x", "numeric", False, "s")
    assert "trim_scale" not in pgtypes.restore_expression("p", "numeric(12,2)", True, "s")


def test_timestamp_specials_found_in_arrow() -> None:
    # What the driver makes of +-infinity: int64 extremes shifted by the 2000 epoch, wrapped.
    epoch = 946_684_800_000_000
    raw = [(2**63 - 1 + epoch) - 2**64, -(2**63) + epoch, 0, None]
    array = pa.array(raw, pa.int64()).cast(pa.timestamp("us", "UTC"))
    clean, text = split_special(array, "timestamptz")
    assert text.to_pylist() == ["infinity", "-infinity", None, None]
    assert clean.null_count == 3 and clean[2].as_py() is not None


def test_numeric_nan_and_types_delta_has_not_as_text() -> None:
    numeric = pa.array(["1.50", "NaN", None])
    storage = pa.ExtensionArray.from_storage(
        pa.opaque(pa.string(), "numeric", "postgresql"), numeric
    )
    _, text = split_special(storage, "numeric")
    assert text.to_pylist() == [None, "NaN", None]
    # uuid, json, jsonb and time travel as their text (24:00:00 too): no companion
    for base in ("uuid", "json", "jsonb", "time"):
        plan = pgtypes.plan_column(Column("c", base, base))
        assert plan.expression == '"c"::text' and plan.companion is None, base
    uuids = pgtypes.plan_column(Column("u", "uuid[]", "_uuid", "A", -1, "uuid", "U"))
    assert uuids.expression == '"u"::text[]' and uuids.parquet == "LIST<STRING>"


def test_unscaled_numeric_read_back_exactly() -> None:
    # numeric(18,2) selected as `c * 100`::int8, NaN as int8's minimum
    raw = pa.array([-123_456, 0, 999_999_999_999_999_999, -(2**63), None], pa.int64())
    clean, text = split_special(raw, "numeric")
    assert text.to_pylist() == [None, None, None, "NaN", None]
    decimals = unscaled_decimal(18, 2)(clean.slice(1))  # an offset too
    assert decimals.type == pa.decimal128(18, 2)
    assert [str(v) if v is not None else None for v in decimals.to_pylist()] == [
        "0.00",
        "9999999999999999.99",
        None,
        None,
    ]
    assert str(unscaled_decimal(18, 2)(raw.slice(0, 1))[0].as_py()) == "-1234.56"


def test_within_python_range() -> None:
    days = pa.array([0, -719_163, 2_932_897, None], pa.int32()).cast(pa.date32())
    assert within_python_range(days).to_pylist() == [True, False, False, True]  # type: ignore[union-attr]
    assert within_python_range(pa.array([1])) is None


def test_numeric_to_decimal_and_interval_round_trip() -> None:
    field = pa.field(
        "p",
        pa.opaque(pa.string(), "numeric", "postgresql"),
        metadata={"POSTGRESQL:typmod": str(typmod(12, 2))},
    )
    target, convert = converter_for(field)
    assert target.type == pa.decimal128(12, 2) and convert is not None
    values = pa.ExtensionArray.from_storage(field.type, pa.array(["1.25", None]))
    assert [str(v) if v is not None else None for v in convert(values).to_pylist()] == [
        "1.25",
        None,
    ]

    interval_field = pa.field("i", pa.month_day_nano_interval())
    target, convert = converter_for(interval_field)
    assert target.type == INTERVAL_STRUCT and convert is not None
    intervals = pa.array(
        [pa.MonthDayNano([14, 3, 5_000_000_000]), None], pa.month_day_nano_interval()
    )
    struct = convert(intervals)
    assert struct.to_pylist() == [{"months": 14, "days": 3, "microseconds": 5_000_000}, None]
    staged = staging_table(pa.table({"i": struct}))
    assert staged.column("i").to_pylist() == ["14 mons 3 days 5000000 microseconds", None]
