"""Which PostgreSQL type each result column is said to be (its OID in
RowDescription): its *original* type where the statement returns a table column as
archived (`archiver.columns` in each file's metadata records it), else the type DuckDB
computed. A type is said by its OID only where it is built in and its binary form is
written (archiver.serve.binary); every other type (enums, composites, ranges, domains
over them, inet, bit strings, money…) is said to be `text`, its value PostgreSQL's own
text of the original type, as archived: a foreign table that declares the original type
reads it back exactly."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from archiver.pgtypes.arrow import INTERVAL_STRUCT


@dataclass(frozen=True)
class PgType:
    """A built-in type archiver serves by its OID: its name as format_type() prints it
    (without a modifier), its OID and its array's OID."""

    name: str
    oid: int
    array_oid: int
    size: int  # RowDescription's typlen


TYPES = {
    t.name: t
    for t in (
        PgType("boolean", 16, 1000, 1),
        PgType("bytea", 17, 1001, -1),
        PgType("bigint", 20, 1016, 8),
        PgType("smallint", 21, 1005, 2),
        PgType("integer", 23, 1007, 4),
        PgType("text", 25, 1009, -1),
        PgType("json", 114, 199, -1),
        PgType("real", 700, 1021, 4),
        PgType("double precision", 701, 1022, 8),
        PgType("character", 1042, 1014, -1),
        PgType("character varying", 1043, 1015, -1),
        PgType("date", 1082, 1182, 4),
        PgType("time without time zone", 1083, 1183, 8),
        PgType("timestamp without time zone", 1114, 1115, 8),
        PgType("timestamp with time zone", 1184, 1185, 8),
        PgType("interval", 1186, 1187, 16),
        PgType("numeric", 1700, 1231, -1),
        PgType("uuid", 2950, 2951, 16),
        PgType("jsonb", 3802, 3807, -1),
        PgType("oid", 26, 1028, 4),
        PgType("name", 19, 1003, 64),
        PgType('"char"', 18, 1002, 1),
    )
}
# The catalog's name (pg_type.typname) of each type served by OID.
TYPNAMES = {
    "boolean": "bool", "bytea": "bytea", "bigint": "int8", "smallint": "int2",
    "integer": "int4", "text": "text", "json": "json", "real": "float4",
    "double precision": "float8", "character": "bpchar", "character varying": "varchar",
    "date": "date", "time without time zone": "time", "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz", "interval": "interval", "numeric": "numeric",
    "uuid": "uuid", "jsonb": "jsonb", "oid": "oid", "name": "name", '"char"': "char",
}  # fmt: skip
TEXT = TYPES["text"]
_BY_OID = {t.oid: t for t in TYPES.values()}
_ARRAY_ELEMENT = {t.array_oid: t for t in TYPES.values()}
_MODIFIER = re.compile(r"\(\d+(?:,\d+)?\)")


@dataclass(frozen=True)
class Column:
    """One result column as the client is told of it: its name, the OID it is said to
    be, and how its values are written (`kind`: the type name the encoders know, with
    `[]` for a one-dimensional array)."""

    name: str
    oid: int
    size: int
    kind: str
    trim_scale: bool = False  # an unconstrained numeric archived as decimal(38,18)


def original(type_sql: str) -> tuple[str, bool] | None:
    """(kind, is an array) for a type archived by format_type() name, where it is built
    in and served by its OID; None: served as text."""
    name = _MODIFIER.sub("", type_sql)
    array = name.endswith("[]")
    base = name[:-2] if array else name
    if base not in TYPES or base.endswith("[]"):
        return None
    return base, array


def column_for(name: str, arrow: pa.DataType, type_sql: str | None) -> Column:
    """How result column `name` of Arrow type `arrow` is served: as its original type
    `type_sql` where one is known and the values are of its kind, else as the type the
    values are."""
    derived = _derived(arrow)
    if type_sql is not None:
        found = original(type_sql)
        if found is not None:
            base, array = found
            kind = base + ("[]" if array else "")
            # as archived, or archived as its text (wide numeric, time, uuid, json)
            if _family(kind) == _family(derived) or derived == "text":
                pg = TYPES[base]
                return Column(
                    name,
                    pg.array_oid if array else pg.oid,
                    -1 if array else pg.size,
                    kind,
                    trim_scale=type_sql == "numeric",
                )
        elif derived == "text":  # a type not built in, archived as its text
            return Column(name, TEXT.oid, -1, "text")
    if derived.endswith("[]"):
        element = TYPES[derived[:-2]]
        return Column(name, element.array_oid, -1, derived)
    pg = TYPES[derived]
    return Column(name, pg.oid, pg.size, derived)


_FAMILIES = {
    "smallint": "int",
    "integer": "int",
    "bigint": "int",
    "character": "text",
    "character varying": "text",
    "text": "text",
    "json": "text",
    "jsonb": "text",
    "uuid": "text",
    "time without time zone": "text",
}


def _family(kind: str) -> str:
    array = kind.endswith("[]")
    base = kind[:-2] if array else kind
    return _FAMILIES.get(base, base) + ("[]" if array else "")


def _derived(t: pa.DataType) -> str:
    """The PostgreSQL type of values of Arrow type `t` (a list: its element's array)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = _derived(t.value_type)
        return element + "[]" if not element.endswith("[]") else "text"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return "numeric"
    if pa.types.is_float32(t):
        return "real"
    if pa.types.is_floating(t):
        return "double precision"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytea"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz else "timestamp without time zone"
    if pa.types.is_time(t):
        return "time without time zone"
    if t == pa.month_day_nano_interval() or t == INTERVAL_STRUCT:
        return "interval"
    return "text"


def oid_of(type_name: str) -> int:
    """The OID of a built-in type name as a cast writes it (`bigint`, `int8`,
    `timestamptz`, `text[]`), 0 (unknown) for any other."""
    name = ALIASES.get(type_name.lower().strip(), type_name.lower().strip())
    array = name.endswith("[]")
    pg = TYPES.get(name[:-2] if array else name)
    if pg is None:
        return 0
    return pg.array_oid if array else pg.oid


ALIASES = {
    "int8": "bigint",
    "int4": "integer",
    "int": "integer",
    "int2": "smallint",
    "float8": "double precision",
    "float4": "real",
    "bool": "boolean",
    "varchar": "character varying",
    "timestamptz": "timestamp with time zone",
    "timestamp": "timestamp without time zone",
    "time": "time without time zone",
    "decimal": "numeric",
}


def introspected(oids: list[int | None]) -> list[list[bytes | None]]:
    """asyncpg's type introspection query answered for the types served by OID, rows as
    PostgreSQL's catalog would give them (each array, then its element): asyncpg reads
    arrays of built-in types only after it has looked them up."""
    rows: list[list[bytes | None]] = []

    def row(
        oid: int, name: str, elem: int, depth: int, elem_name: str | None
    ) -> list[bytes | None]:
        values = [str(oid), "pg_catalog", name, "b", None, str(elem), "," if elem else None,
                  None, None, None, str(depth), None, elem_name or "-", None]  # fmt: skip
        return [None if v is None else v.encode() for v in values]

    for oid in oids:
        element = _ARRAY_ELEMENT.get(oid or 0)
        if element is not None:
            rows.append(row(element.oid, TYPNAMES[element.name], 0, 1, None))
            rows.append(
                row(
                    element.array_oid,
                    "_" + TYPNAMES[element.name],
                    element.oid,
                    0,
                    TYPNAMES[element.name],
                )
            )
        elif oid in _BY_OID:
            pg = _BY_OID[oid]
            rows.append(row(pg.oid, TYPNAMES[pg.name], 0, 0, None))
    return rows


INTROSPECTION_COLUMNS = [
    Column("oid", 26, 4, "oid"), Column("ns", 19, 64, "name"), Column("name", 19, 64, "name"),
    Column("kind", 18, 1, '"char"'), Column("basetype", 26, 4, "oid"),
    Column("elemtype", 26, 4, "oid"), Column("elemdelim", 18, 1, '"char"'),
    Column("range_subtype", 26, 4, "oid"), Column("attrtypoids", 1028, -1, "oid[]"),
    Column("attrnames", 1009, -1, "text[]"), Column("depth", 23, 4, "integer"),
    Column("basetype_name", 25, -1, "text"), Column("elemtype_name", 25, -1, "text"),
    Column("range_subtype_name", 25, -1, "text"),
]  # fmt: skip
