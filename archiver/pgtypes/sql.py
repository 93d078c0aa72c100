"""The SQL side of the type table: how each column is selected, and how a staged column
turns back into its exact type on restore."""

from __future__ import annotations

from dataclasses import dataclass

from archiver.ident import quote_ident
from archiver.pgtypes.column import Column

PG_TEXT_SUFFIX = "__pg_text"

# Base type -> (Parquet representation, predicate for values it cannot hold, or None).
# {c} is the quoted column. Everything not listed here is stored as its exact text.
_STANDARD: dict[str, tuple[str, str | None]] = {
    "int2": ("INT32 (INT16)", None),
    "int4": ("INT32", None),
    "int8": ("INT64", None),
    "float4": ("FLOAT (NaN, +-Infinity kept)", None),
    "float8": ("DOUBLE (NaN, +-Infinity kept)", None),
    "bool": ("BOOLEAN", None),
    "text": ("STRING", None),
    "varchar": ("STRING", None),
    "bpchar": ("STRING (blank-padded, as PostgreSQL returns it)", None),
    "bytea": ("BYTE_ARRAY", None),
    "uuid": ("STRING (the canonical text)", None),
    "json": ("STRING (json's text as stored)", None),
    "jsonb": ("STRING (PostgreSQL's normalised text)", None),
    "date": ("DATE", "NOT isfinite({c})"),
    "timestamp": (
        "TIMESTAMP(MICROS, isAdjustedToUTC=false)",
        "(NOT isfinite({c}) OR {c} >= '294000-01-01')",
    ),
    "timestamptz": (
        "TIMESTAMP(MICROS, isAdjustedToUTC=true)",
        "(NOT isfinite({c}) OR {c} >= '294000-01-01 00:00:00+00')",
    ),
    "time": ("STRING (PostgreSQL's text, 24:00:00 included)", None),
    # The driver converts the time part to nanoseconds: beyond +-2^63 ns it refuses.
    "interval": (
        "STRUCT<months INT32, days INT32, microseconds INT64>",
        "abs(extract(hour FROM {c})) >= 2562047",
    ),
}
# Element types whose one-dimensional arrays become Parquet LIST (of the same mapping).
_LIST_ELEMENTS = frozenset(
    (
        "int2",
        "int4",
        "int8",
        "float4",
        "float8",
        "bool",
        "text",
        "varchar",
        "bpchar",
        "bytea",
        "uuid",
        "date",
        "timestamp",
        "timestamptz",
    )
)
# Found in Arrow (see pgtypes.arrow.split_special): ±infinity and timestamps past ~294,246 AD
# come back wrapped around, far below PostgreSQL's minimum; 24:00:00 as 86,400,000,000 µs;
# numeric NaN as 'nan'. Checking in SQL (a CASE per column and row) costs the server
# more than finding them in Arrow. Array elements keep the SQL predicates above.
ARROW_CHECKED = frozenset(("date", "timestamp", "timestamptz"))
# Types Delta Lake has no type for, selected as their text: Delta's string (uuid, json,
# time; Parquet's UUID and JSON annotations make delta-rs fail to read the file, and
# Delta has no time type). Restore casts the text back, exactly.
AS_TEXT = frozenset(("uuid", "json", "jsonb", "time"))
_NOT_PLAIN_ARRAY = "(array_ndims({c}) > 1 OR array_lower({c}, 1) <> 1)"
MAX_DECIMAL_PRECISION = 38  # Delta's decimal (decimal128): wider numeric(p,s) is text
# numeric(p, s) with p <= 18 travels as its unscaled value in an int8 (`c * 10^s`, exact:
# no stored value has more than s decimals): the driver hands numeric over as text built
# from PostgreSQL's base-10000 digits, and that text then had to be cast to a decimal,
# several times the client CPU of an int8 with its NaN check, on the side that bounds
# copy mode (docs/performance.md). Arrow reads the int64 back as
# Decimal128(p, s) exactly (pgtypes.arrow.unscaled_decimal). NaN comes as int8's minimum,
# which no numeric(18) value reaches.
SCALED_MAX_PRECISION = 18
# Key types the driver hands over as opaque bytes (an extension's type): a key column of
# one is selected as its text, which it reads back exactly.
TEXT_KEYS = frozenset(("citext", "uuid"))  # uuid: Delta's string (see AS_TEXT)
NUMERIC_NAN_UNSCALED = -(2**63)
# Unconstrained numeric: Delta's decimal(38,18), as Spark's JDBC reader maps it (20 digits
# before the point, 18 after). A value that does not fit (NaN, +-Infinity, more digits on
# either side: a cast would round it or fail) is NULL there, its text in the companion. A
# value whose own scale trim_scale would lose (12.50, 0.0) keeps its decimal, so readers
# see the number, and has its text in the companion too; restore rebuilds every other
# value from the decimal with trim_scale (restore_expression).
OPEN_NUMERIC = "numeric(38,18)"
_OPEN_NUMERIC_SPECIAL = "NOT ({c} = trunc({c}, 18) AND abs({c}) < 1e20)"
_OPEN_NUMERIC_TEXT = "scale({c}) <> min_scale({c})"


@dataclass(frozen=True)
class ColumnPlan:
    """How one column travels: selected as `expression`, stored as `parquet`."""

    column: Column
    expression: str  # SQL for the standard column, before `AS name`
    special: str | None  # predicate: these values go to the __pg_text column instead
    parquet: str
    # The special values are found in Arrow instead (pgtypes.arrow.split_special), because the
    # driver hands them over recognisably; no per-row CASE in PostgreSQL.
    arrow_special: bool = False
    # numeric(p, s) selected as its unscaled int8 (see SCALED_MAX_PRECISION): (p, s)
    unscaled: tuple[int, int] | None = None
    # Parquet dictionary encoding: only where the type bounds the distinct values (see
    # dictionary_encoded)
    dictionary: bool = False
    # predicate: rows whose exact text the companion keeps too, their value staying in
    # the standard column (see OPEN_NUMERIC)
    exact_text: str | None = None

    @property
    def companion(self) -> str | None:
        """The name of the __pg_text companion column, if this column has one."""
        return self.name + PG_TEXT_SUFFIX if self.special or self.arrow_special else None

    @property
    def name(self) -> str:
        return self.column.name


def decimal_of(typmod: int) -> tuple[int, int] | None:
    """(precision, scale) of numeric(p,s) when Parquet's DECIMAL holds it exactly; None for
    unconstrained numeric, a scale above the precision, or more digits than decimal256."""
    if typmod < 4:
        return None
    precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
    if scale > precision or precision > MAX_DECIMAL_PRECISION:
        return None
    return precision, scale


def open_numeric(column: Column) -> bool:
    """An unconstrained numeric column (see OPEN_NUMERIC); not a domain over one, whose
    restore could not tell its decimal from its text (restore_expression sees its name)."""
    return column.type_sql == "numeric"


def plan_column(column: Column, as_text: bool = False) -> ColumnPlan:
    """The representation of one column (the table of docs/types.md, in code); `as_text`:
    an unconstrained numeric its table's earlier files hold as text (see
    source.tables.TableInfo.numeric_as_text)."""
    c = quote_ident(column.name)
    base = column.base_type
    if open_numeric(column) and not as_text:
        return ColumnPlan(
            column,
            f"{c}::{OPEN_NUMERIC}",
            _OPEN_NUMERIC_SPECIAL.format(c=c),
            "DECIMAL(38,18) (the others: NULL, exact text beside)",
            exact_text=_OPEN_NUMERIC_TEXT.format(c=c),
        )
    if base in ARROW_CHECKED:
        return ColumnPlan(column, c, None, _STANDARD[base][0], arrow_special=True)
    if base in AS_TEXT:
        return ColumnPlan(column, f"{c}::text", None, _STANDARD[base][0])
    if base in _STANDARD:
        parquet, special = _STANDARD[base]
        return ColumnPlan(column, c, special.format(c=c) if special else None, parquet)
    if base == "numeric" and (ps := decimal_of(column.typmod)):
        p, s = ps
        if p <= SCALED_MAX_PRECISION:
            value = f"({c} * 1{'0' * s})::int8" if s else f"{c}::int8"
            expression = (
                f"CASE WHEN {c} = 'NaN' THEN '{NUMERIC_NAN_UNSCALED}'::int8 ELSE {value} END"
            )
            return ColumnPlan(
                column, expression, None, f"DECIMAL({p},{s})", arrow_special=True, unscaled=ps
            )
        return ColumnPlan(column, c, None, f"DECIMAL({p},{s})", arrow_special=True)
    if column.category == "E":
        return ColumnPlan(column, f"{c}::text", None, "STRING (enum label)", dictionary=True)
    if column.category == "A" and column.element_category == "E":
        return ColumnPlan(
            column, f"{c}::text[]", _NOT_PLAIN_ARRAY.format(c=c), "LIST<STRING> (enum labels)"
        )
    if column.category == "A" and column.element in _LIST_ELEMENTS:
        special = _NOT_PLAIN_ARRAY
        element_special = _STANDARD[column.element][1]
        if element_special:
            special += (
                f" OR EXISTS (SELECT FROM unnest({{c}}) e WHERE {element_special.format(c='e')})"
            )
        element = _STANDARD[column.element][0].split(" (")[0]
        value = c
        if column.element in AS_TEXT:
            value = f"{c}::text[]"
        elif column.base_schema is not None:  # an array of a domain: a type not built in,
            value = f"{c}::pg_catalog.{column.element}[]"  # which the driver would not know
        return ColumnPlan(column, value, special.format(c=c), f"LIST<{element}>")
    if base == "money":  # ::text depends on lc_monetary; numeric is exact
        return ColumnPlan(column, f"{c}::numeric::text", None, "STRING (numeric text)")
    return ColumnPlan(column, f"{c}::text", None, "STRING (PostgreSQL text form)")


def plan_table(
    columns: tuple[Column, ...], key: tuple[Column, ...], as_text: frozenset[str] = frozenset()
) -> list[ColumnPlan]:
    """Plans for every column. Key columns are taken as they are (their text, for
    TEXT_KEYS): their types are checked by source.describe_table and resuming needs
    their real values. `as_text`: unconstrained numeric columns kept as text."""
    names = {c.name for c in columns}
    plans = []
    for column in columns:
        plan = plan_column(column, column.name in as_text)
        if (column in key or plan.companion in names) and plan.exact_text:
            plan = plan_column(column, as_text=True)  # no room for a companion: text
        if column in key:
            raw = quote_ident(column.name)
            value = f"{raw}::text" if column.base_type in TEXT_KEYS else raw
            plan = ColumnPlan(column, value, None, plan.parquet)
        if plan.companion and plan.companion in names:  # no companion: as selected raw
            expression = quote_ident(column.name) if plan.unscaled else plan.expression
            plan = ColumnPlan(column, expression, None, plan.parquet)
        plans.append(plan)
    return plans


def select_list(plans: list[ColumnPlan]) -> str:
    """The columns of a chunk's SELECT/RETURNING: every column in table order, then the
    __pg_text companions of the columns that have one."""
    exprs = []
    for p in plans:
        value = p.expression
        if p.special:
            value = f"CASE WHEN {p.special} THEN NULL ELSE {p.expression} END"
            if p.expression != quote_ident(p.name):
                value = f"({value})::{p.expression.rsplit('::', 1)[1]}"  # keep the typmod
        exprs.append(f"{value} AS {quote_ident(p.name)}")
    for p in plans:
        if p.special:
            column = quote_ident(p.name)
            when = f"{p.special} OR {p.exact_text}" if p.exact_text else p.special
            exprs.append(
                f"CASE WHEN {when} THEN {column}::text END "
                f"AS {quote_ident(p.name + PG_TEXT_SUFFIX)}"
            )
    return ", ".join(exprs)


def restore_expression(name: str, type_sql: str, has_pg_text: bool, table: str) -> str:
    """SQL turning the staged column `name` of `table` (an alias), and its __pg_text
    companion, back into `type_sql`, the exact type format_type() gave at archive time.
    An unconstrained numeric with a companion was archived as OPEN_NUMERIC: its decimal
    trimmed of the scale's zeros (the companion holds every value that is not so)."""
    c = f"{table}.{quote_ident(name)}"
    value = f"{c}::{type_sql}"
    if has_pg_text and type_sql == "numeric":
        value = f"trim_scale({value})"
    if has_pg_text:
        text = f"{table}.{quote_ident(name + PG_TEXT_SUFFIX)}"
        value = f"CASE WHEN {text} IS NOT NULL THEN {text}::{type_sql} ELSE {value} END"
    return value


def arrow_checked(plans: list[ColumnPlan]) -> dict[str, str]:
    """Column name -> base type, for the columns whose special values Arrow finds."""
    return {p.name: p.column.base_type for p in plans if p.arrow_special}


def unscaled(plans: list[ColumnPlan]) -> dict[str, tuple[int, int]]:
    """Column name -> (precision, scale), for the numeric columns selected unscaled."""
    return {p.name: p.unscaled for p in plans if p.unscaled}


def dictionary_encoded(plans: list[ColumnPlan]) -> list[str]:
    """The columns a file dictionary-encodes: enums. A column of many distinct values
    gains nothing from a dictionary: the writer builds one until it outgrows its page
    limit, then falls back to plain, having paid for the hashing, and it holds a
    dictionary-encoded column's pages in memory until its row group ends. Dictionaries
    on every column (pyarrow's default) cost more encoding and bigger files than on the
    enum alone (docs/performance.md, the footprint)."""
    return [p.name for p in plans if p.dictionary]


def companions(plans: list[ColumnPlan]) -> list[str]:
    """Every __pg_text companion a chunk's file carries, in table order (after all the
    table's columns), whether SQL or Arrow fills it."""
    return [p.companion for p in plans if p.companion]
