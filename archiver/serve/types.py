"""Which PostgreSQL type each result column is said to be (its OID and typmod in
RowDescription): its *original* type where the statement returns a table column as
archived (`archiver.columns` in each file's metadata records it) -- the OID the
definitions database has for it, so a driver that looks it up finds it (an enum, a
composite, a range, an array of any of them; a domain as its base type, as PostgreSQL
says it) -- else the type DuckDB computed. Values are PostgreSQL's own text of the
original type, as archived (a foreign table that declares it reads it back exactly),
and its binary form where a client asks (archiver.serve.registry); a type whose binary
form serve does not write is said to be `text`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

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
class Announced:
    """How a column of an archived type is announced: RowDescription's OID, typmod, size."""

    oid: int
    typmod: int
    size: int
    zoned: bool = False  # its values hold timestamps with time zone


class Announces(Protocol):
    """What tells how a column archived as a type is announced (archiver.serve.registry)."""

    def announce(self, type_sql: str) -> Announced | None: ...


@dataclass(frozen=True)
class Column:
    """One result column as the client is told of it: its name, the OID it is said to
    be, and how its values are written (`kind`: the type name the encoders know, with
    `[]` for a one-dimensional array)."""

    name: str
    oid: int
    size: int
    kind: str  # "": by its OID alone (archiver.serve.registry)
    trim_scale: bool = False  # an unconstrained numeric archived as decimal(38,18)
    typmod: int = -1
    table: int = 0  # the relation and column it is, where it is one (PostgreSQL's answers)
    attnum: int = 0
    zoned: bool = False  # a type of its own whose values hold timestamps with time zone


def original(type_sql: str) -> tuple[str, bool] | None:
    """(kind, is an array) for a type archived by format_type() name, where it is built
    in and served by its OID; None: served as text."""
    name = _MODIFIER.sub("", type_sql)
    array = name.endswith("[]")
    base = name[:-2] if array else name
    if base not in TYPES or base.endswith("[]"):
        return None
    return base, array


def column_for(name: str, arrow: pa.DataType, type_sql: str | None, registry: Announces) -> Column:
    """How result column `name` of Arrow type `arrow` is served: as its original type
    `type_sql` where one is known and the values are of its kind, else as the type the
    values are."""
    derived = _derived(arrow)
    if type_sql is not None:
        found = original(type_sql)
        announced = registry.announce(type_sql)
        typmod = announced.typmod if announced is not None else -1
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
                    typmod=typmod,
                )
        elif derived == "text":  # a type not built in, archived as its text
            if announced is not None and type_sql == "money":  # as its exact numeric
                return Column(name, announced.oid, announced.size, "money")
            if announced is not None:
                return Column(
                    name, announced.oid, announced.size, "", typmod=typmod, zoned=announced.zoned
                )
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
