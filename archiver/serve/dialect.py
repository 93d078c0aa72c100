"""PostgreSQL's SQL as clients and postgres_fdw write it, in the words DuckDB reads: an
array literal (`'{a,b}'::text[]`, how postgres_fdw sends `x IN ('a', 'b')`) becomes a
list; a cast to a user's type -- an enum, a domain, written schema-qualified
(`'paid'::public.order_status`) -- is dropped, leaving DuckDB to type the literal as
what it is compared with (archiver keeps such values as their base type's or as their
text); a cast to one of PostgreSQL's own types DuckDB has no name for is to VARCHAR.
Text outside those casts is left as it is, string literals and quoted names included."""

from __future__ import annotations

import re

from archiver.serve.binary import Unsupported, parse_array

_NAME = r'(?:"(?:[^"]|"")+"|[A-Za-z_][\w$]*)'
_TYPE = (
    rf"(?P<type>{_NAME}(?:\.{_NAME})?"
    r"(?:\s+with\s+time\s+zone|\s+without\s+time\s+zone|\s+precision|\s+varying)?"
    r"(?:\s*\(\s*\d+\s*(?:,\s*\d+\s*)?\))?)"
    r"(?P<array>(?:\s*\[\s*\])*)"
)
_TOKEN = re.compile(
    rf"(?P<literal>[Ee]?'(?:[^'\\]|''|\\.)*')(?:\s*::\s*{_TYPE})?"
    rf"|::\s*{_TYPE.replace('?P<type>', '?P<type2>').replace('?P<array>', '?P<array2>')}",
    re.S,
)
# PostgreSQL's names of types DuckDB has none of, read as their text
_AS_TEXT = frozenset(("bpchar", "name", '"char"', "citext", "xml", "inet", "cidr", "macaddr",
                      "money", "bit", "varbit", "tsvector", "regclass", "regtype", "oid"))  # fmt: skip


_ANY = re.compile(
    r"(?P<op>\b(?:ANY|ALL|SOME)\s*\(\s*)(?P<lit>[Ee]?'\{(?:[^'\\]|''|\\.)*\}')(?=\s*\))", re.I
)


def in_duckdb(sql: str) -> str:
    """`sql` with PostgreSQL's array literals and casts DuckDB cannot read rewritten."""
    return _TOKEN.sub(_rewrite, _ANY.sub(_any, sql))


def _any(m: re.Match[str]) -> str:
    """`= ANY ('{5,6}')`, an array literal left uncast (postgres_fdw does where the
    column's type says it): a list of its elements as written."""
    items = _elements(m.group("lit"))
    if items is None:
        return m.group(0)
    return m.group("op") + "[" + ", ".join(_untyped(v) for v in items) + "]"


def _rewrite(m: re.Match[str]) -> str:
    literal = m.group("literal")
    if literal is not None:
        kind, array = m.group("type"), m.group("array")
        if kind is None:
            return literal
        name = _duckdb_type(kind)
        if array and array.count("[") == 1:
            items = _elements(literal)
            if items is not None and name is None:  # a user's type: each value as written
                return "[" + ", ".join(_untyped(v) for v in items) + "]"
            if items is not None:
                listed = ", ".join("NULL" if v is None else _quoted(v) for v in items)
                return f"CAST([{listed}] AS {name}[])"
        if name is None:  # a user's type: the literal alone, DuckDB types it as compared
            return literal
        return f"{literal}::{name}{_brackets(array)}"
    name = _duckdb_type(m.group("type2"))
    return f"::{name or 'VARCHAR'}{_brackets(m.group('array2'))}"


def _brackets(array: str | None) -> str:
    return "[]" * (array or "").count("[")


def _duckdb_type(kind: str) -> str | None:
    """A type as DuckDB names it: PostgreSQL's own (pg_catalog's, qualified or not) as
    written where DuckDB knows it, VARCHAR for one it lacks; None for a user's type
    (written schema-qualified: an enum, a domain), whose values archiver keeps as
    their base type's or as text."""
    name = re.sub(r"\s+", " ", kind.strip())
    schema, dot, bare = name.partition(".")
    if dot:
        if schema.strip('"').lower() != "pg_catalog":
            return None
        name = bare
    if name.strip('"').lower().split("(")[0].strip() in _AS_TEXT:
        return "VARCHAR"
    return name


def _elements(literal: str) -> list[str | None] | None:
    """The elements of an array literal ('…', or E'…' with backslash escapes)."""
    if literal[0] in "Ee":
        text = re.sub(r"\\(.)", r"\1", literal[2:-1].replace("''", "'"))
    else:
        text = literal[1:-1].replace("''", "'")
    if not text.startswith("{"):
        return None
    try:
        return parse_array(text)
    except (Unsupported, IndexError):
        return None


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _untyped(value: str | None) -> str:
    """An element of a user type's array: a number bare (a domain over an integer), any
    other value quoted."""
    if value is None:
        return "NULL"
    return value if re.fullmatch(r"-?\d+(\.\d+)?", value) else _quoted(value)


def list_literals(sql: str, columns: set[str]) -> str:
    """`sql` with an array literal compared with a list column of `columns` (`tags =
    '{a,b}'`: postgres_fdw leaves the cast off where the column's type says it) written
    as a list, which DuckDB compares with a list."""
    if not columns:
        return sql
    names = "|".join(re.escape(c) for c in sorted(columns, key=len, reverse=True))
    column = rf'(?:{_NAME}\.)?(?:"(?:{names})"|\b(?:{names})\b)'
    literal = r"[Ee]?'\{(?:[^'\\]|''|\\.)*\}'"
    pattern = re.compile(
        rf"(?P<left>{column}\s*(?:=|<>|!=|@>|<@|&&)\s*)(?P<lit>{literal})"
        rf"|(?P<lit2>{literal})(?P<right>\s*(?:=|<>|!=|@>|<@|&&)\s*{column})"
    )

    def listed(m: re.Match[str]) -> str:
        text = m.group("lit") or m.group("lit2")
        items = _elements(text)
        if items is None:
            return m.group(0)
        value = "[" + ", ".join("NULL" if v is None else _quoted(v) for v in items) + "]"
        if m.group("lit") is not None:
            return m.group("left") + value
        return value + m.group("right")

    return pattern.sub(listed, sql)
