"""What a statement is and what it reads, from DuckDB's own parse of it
(json_serialize_sql), before anything runs: refused unless it is one SELECT, refused
when it names a table that cannot be read, and which files of each table it can read.

Pruning. A statement that names a table with a constraint on its cutoff column or its
integer key (`created_at >= '2024-01-01'`, `id BETWEEN 5 AND 10`, `id IN (1, 2)`, `id =
4321`) can only read rows inside it, so a file whose catalogued range lies outside
cannot contribute a row: it is left out before its footer is read (one request per file
on Azure: a year of nightly files read whole for a week's question, before). Only the
constraints that narrow for certain are taken: a conjunct (`AND`) of a SELECT's WHERE,
comparing a column of a table that SELECT reads (unqualified only where it reads one
table) with a constant. A table read anywhere without such a constraint (a second
reference, a join's other side) has all its files. Cutoff bounds get a day's margin
either way (a constant's time zone is DuckDB's session's), key bounds none, and a key
bounds only where it is of an integer type (catalog.prune). A statement DuckDB cannot
serialize (a PIVOT) reads every archived table, unpruned. What is left out never
changes an answer; what is kept is still bounded per file by DuckDB (the views'
branches)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from archiver.errors import InputError, first_line


def refuse_writes(sql: str, con: Any = None) -> None:
    """Refuse, before anything runs, whatever is not one SELECT: `archiver query` reads.
    DuckDB's own parser says what each statement is, so a COPY … TO, an ATTACH, an
    INSTALL or a CREATE never reaches the engine (nor a second statement after a
    SELECT; EXPLAIN ANALYZE would run what it explains: --explain is the way). `con`:
    the DuckDB connection to parse with (a new one by default)."""
    import duckdb

    try:
        statements = (con or duckdb.connect()).extract_statements(sql)
    except duckdb.Error as exc:
        raise InputError(f"query: {first_line(exc)}") from None
    if len(statements) != 1:
        raise InputError(
            f"query: {len(statements)} statements given; archiver query runs one SELECT, "
            "nothing ran"
        )
    if statements[0].type != duckdb.StatementType.SELECT:
        words = statements[0].query.split()
        kind = words[0].upper() if words else statements[0].type.name
        raise InputError(
            f"query: {kind} refused: archiver query only reads (one SELECT); nothing ran"
        )


def refuse_tables(sql: str, refused: dict[str, str]) -> None:
    """One line, before anything runs, when `sql` names a table of `refused` (schema.
    table: why), by its full name or by its bare one (a statement DuckDB's parse cannot
    be walked for names every one)."""
    if not refused:
        return
    refs = references(sql)
    for table, why in sorted(refused.items()):
        if refs is None or reads(table, refs):
            raise InputError(why)


def reads(table: str, refs: list[Reference]) -> list[Reference]:
    """The places `refs` read `table` (schema.table): by its full name, or its bare one
    (DuckDB resolves names without regard to case, as PostgreSQL does unquoted ones)."""
    full, bare = table.casefold(), table.split(".", 1)[1].casefold()
    return [r for r in refs if r.table.casefold() in (full, bare)]


MARGIN = dt.timedelta(days=1)

_COMPARISONS = {
    "COMPARE_EQUAL": "=",
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_LESSTHANOREQUALTO": "<=",
}

_FLIPPED = {"=": "=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}


@dataclass
class Bounds:
    """What one reference of a table's column may hold: above each of `lows`, below each
    of `highs`, and within each of `sets` (IN, =), as the statement writes them (turned
    into the file's kind when a file is judged)."""

    lows: list[Any] = field(default_factory=list)
    highs: list[Any] = field(default_factory=list)
    sets: list[frozenset[Any]] = field(default_factory=list)

    def narrow(self, op: str, value: Any) -> None:
        if op in ("=", "in"):
            self.sets.append(frozenset(value) if op == "in" else frozenset([value]))
        elif op in (">", ">="):
            self.lows.append(value)
        else:
            self.highs.append(value)


@dataclass
class Reference:
    """One place a statement reads a table, with its columns' bounds there."""

    table: str  # as written: `orders`, `public.orders`
    columns: dict[str, Bounds] = field(default_factory=dict)


def serialized(sql: str, con: Any = None) -> dict[str, Any] | None:
    """DuckDB's parse of `sql` (json_serialize_sql), None where it has none."""
    import duckdb

    try:
        row = (con or duckdb.connect()).execute("SELECT json_serialize_sql($1)", [sql]).fetchone()
    except duckdb.Error:
        return None
    tree: dict[str, Any] = json.loads(row[0]) if row else {}
    return None if tree.get("error") else tree


def references(
    sql: str,
    con: Any = None,
    tree: dict[str, Any] | None = None,
    params: list[Any] | None = None,
) -> list[Reference] | None:
    """Every place `sql` reads a table, each with the bounds its SELECT's WHERE puts on
    that table's columns where the SELECT is that simple (its FROM of tables and joins);
    a table read anywhere else (a PIVOT, a table function's argument) is read without
    bounds. None when DuckDB cannot serialize the statement (a PIVOT, say): then
    nothing is known of what it reads. `tree`: its parse, when the caller has it;
    `params`: the values its `$n` stand for (an integer or a string bounds as its
    constant would)."""
    tree = tree if tree is not None else serialized(sql, con)
    if tree is None:
        return None
    found: list[Reference] = []
    taken: set[int] = set()  # the BASE_TABLE nodes a simple SELECT read
    for node in _nodes(tree):
        if node.get("type") == "SELECT_NODE":
            found += _select(node, taken, params or [])
    for node in _nodes(tree):
        if node.get("type") == "BASE_TABLE" and id(node) not in taken:
            found.append(Reference(_name(node)))
    return found


def _name(base: dict[str, Any]) -> str:
    """A table as written, `main.` (DuckDB's own schema) taken as no schema."""
    schema = base.get("schema_name") or ""
    if schema.casefold() == "main":
        schema = ""
    return f"{schema}.{base['table_name']}" if schema else str(base["table_name"])


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def _select(node: dict[str, Any], taken: set[int], params: list[Any]) -> list[Reference]:
    """The tables one SELECT reads directly (its FROM, joins included; subqueries are
    SELECTs of their own), with its WHERE's bounds on each."""
    tables: dict[str, Reference] = {}  # by alias, else by name
    refs: list[Reference] = []
    for base in _from_tables(node.get("from_table")):
        taken.add(id(base))
        ref = Reference(_name(base))
        refs.append(ref)
        tables[(base.get("alias") or base["table_name"]).casefold()] = ref
    for conjunct in _conjuncts(node.get("where_clause")):
        for column, op, value in _bounds(conjunct, params):
            owner = _owner(column, tables, refs)
            if owner is not None:
                owner.columns.setdefault(column[-1].casefold(), Bounds()).narrow(op, value)
    return refs


def _from_tables(node: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(node, dict):
        return
    if node.get("type") == "BASE_TABLE":
        yield node
    elif node.get("type") == "JOIN":
        yield from _from_tables(node.get("left"))
        yield from _from_tables(node.get("right"))


def _conjuncts(node: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(node, dict):
        return
    if node.get("type") == "CONJUNCTION_AND":
        for child in node.get("children", []):
            yield from _conjuncts(child)
    else:
        yield node


def _owner(
    column: list[str], tables: dict[str, Reference], refs: list[Reference]
) -> Reference | None:
    if len(column) == 2:
        return tables.get(column[0].casefold())
    if len(column) == 1 and len(refs) == 1:
        return refs[0]
    return None  # unqualified among several tables, or schema.table.column: not taken


def _bounds(node: dict[str, Any], params: list[Any]) -> list[tuple[list[str], str, Any]]:
    """(column, op, constant) that `node` puts on a column, where it is that simple."""

    def _constant(node: Any) -> Any:
        return _value(node, params)

    kind = node.get("type", "")
    if kind in _COMPARISONS:
        left, right = node.get("left"), node.get("right")
        if _column(left) and _constant(right) is not None:
            return [(_column(left), _COMPARISONS[kind], _constant(right))]  # type: ignore[list-item]
        if _column(right) and _constant(left) is not None:
            return [(_column(right), _FLIPPED[_COMPARISONS[kind]], _constant(left))]  # type: ignore[list-item]
    if kind == "COMPARE_BETWEEN" and _column(node.get("input")):
        low, high = _constant(node.get("lower")), _constant(node.get("upper"))
        if low is not None and high is not None:
            column = _column(node.get("input"))
            assert column is not None
            return [(column, ">=", low), (column, "<=", high)]
    if kind == "COMPARE_IN":
        children = node.get("children", [])
        values = [_constant(c) for c in children[1:]]
        if children and _column(children[0]) and values and None not in values:
            column = _column(children[0])
            assert column is not None
            return (
                [(column, "=", v) for v in values[:1]]
                if len(values) == 1
                else [(column, "in", frozenset(values))]
            )
    return []


def _column(node: Any) -> list[str] | None:
    if isinstance(node, dict) and node.get("type") == "COLUMN_REF":
        return [str(n) for n in node.get("column_names", [])]
    return None


_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT",
                  "USMALLINT", "UINTEGER", "UBIGINT")  # fmt: skip
_TIME_TYPES = ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_S", "TIMESTAMP_MS",
               "TIMESTAMP_NS")  # fmt: skip


def _value(node: Any, params: list[Any]) -> Any:
    """A constant's value where it is plainly one: an integer literal, a string, a
    string cast to a date or timestamp (`TIMESTAMPTZ '2024-01-01'`), an integer or
    integer string cast to an integer type, a parameter bound to an integer or a string;
    else None (a decimal's serialized value is unscaled, a cast may round: neither is
    used)."""
    if not isinstance(node, dict):
        return None
    if node.get("type") == "VALUE_PARAMETER":
        identifier = str(node.get("identifier", ""))
        index = int(identifier) - 1 if identifier.isdigit() else -1
        value = params[index] if 0 <= index < len(params) else None
        return value if isinstance(value, int | str) and not isinstance(value, bool) else None
    if node.get("type") == "OPERATOR_CAST":
        child = node.get("child")
        kind = (node.get("cast_type") or {}).get("id")
        value = _value(child, params)
        if kind in _INTEGER_TYPES and isinstance(value, str) and value.lstrip("-").isdigit():
            return int(value)  # `'42'::bigint`, as postgres_fdw sends a parameter
        if kind in _INTEGER_TYPES and isinstance(value, int):
            return value
        return value if kind in _TIME_TYPES and isinstance(value, str) else None
    if node.get("type") == "VALUE_CONSTANT" and not node["value"].get("is_null"):
        kind = (node["value"].get("type") or {}).get("id")
        value = node["value"].get("value")
        if kind in _INTEGER_TYPES and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind == "VARCHAR" and isinstance(value, str):
            return value
    return None


def admits(refs: list[Reference], column: str, low: Any, high: Any, as_value: Any) -> bool:
    """Whether a file whose `column` lies in [low, high] (None: open) may hold a row some
    reference reads: any reference without bounds on it does; `as_value` turns a
    constant into the ends' kind (None when it cannot: that bound is not used)."""
    if not refs:  # read nowhere the statement says: nothing is known
        return True
    for ref in refs:
        bounds = ref.columns.get(column.casefold())
        if bounds is None:
            return True
        if _meets(bounds, low, high, as_value):
            return True
    return False


def integer_ranges(refs: list[Reference], most: int = 1000) -> dict[str, list[Any]]:
    """For each column every one of `refs` bounds, the integer ranges they keep, one per
    reference: [low, high, values] (None: open; values, where the reference sets it to
    one of at most `most`, else None) -- what `admits` asks of a file's integer key range,
    loosened (one set of values used where a reference has several), for the catalog to
    leave files out before they are read back."""
    if not refs:
        return {}
    out: dict[str, list[Any]] = {}
    for column in set.intersection(*(set(r.columns) for r in refs)):
        ranges = []
        for ref in refs:
            bounds = ref.columns[column]
            lows = [v for v in (as_integer(x, -1) for x in bounds.lows) if v is not None]
            highs = [v for v in (as_integer(x, 1) for x in bounds.highs) if v is not None]
            sets = [[as_integer(v, 0) for v in values] for values in bounds.sets]
            usable = [v for v in sets if len(v) <= most and None not in v]
            ranges.append([max(lows, default=None), min(highs, default=None),
                           min(usable, key=len) if usable else None])  # fmt: skip
        out[column] = ranges
    return out


def _meets(bounds: Bounds, low: Any, high: Any, as_value: Any) -> bool:
    lows = [v for v in (as_value(x, -1) for x in bounds.lows) if v is not None]
    highs = [v for v in (as_value(x, 1) for x in bounds.highs) if v is not None]
    if lows and high is not None and high < max(lows):
        return False
    if highs and low is not None and low > min(highs):
        return False
    for values in bounds.sets:
        ends = [(as_value(v, -1), as_value(v, 1)) for v in values]
        if any(None in end for end in ends):
            continue  # a value not of the ends' kind: this set is not used
        if not any(
            (low is None or up >= low) and (high is None or down <= high) for down, up in ends
        ):
            return False
    return True


def as_integer(value: Any, _side: int) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)  # a string compared with an integer column: DuckDB casts it
    return None


def as_instant(value: Any, side: int) -> dt.datetime | None:
    """A cutoff constant as a UTC instant, a day's margin toward `side` (-1: earlier,
    1: later)."""
    when = as_instant_taken(value, side)
    return None if when is None else when + side * MARGIN


def as_instant_taken(value: Any, _side: int) -> dt.datetime | None:
    """A cutoff constant as a UTC instant, as if written in UTC where it names no zone
    (the instant as_instant loosens by a day: the zone a reader takes it in is not
    known here)."""
    if value is None:
        return None
    try:
        when = dt.datetime.fromisoformat(str(value))
    except ValueError:  # not a date (or beyond Python's years): not used
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)
