"""Values in PostgreSQL's binary forms, for clients that ask for them (asyncpg, psycopg's
binary cursors): a result value from its text (archiver.serve.text), a Bind parameter
into the value DuckDB is given."""

from __future__ import annotations

import math
import re
import struct
import uuid
from decimal import Decimal
from typing import Any

from archiver.serve import compound
from archiver.serve.text import (
    UTC,
    clock,
    clock_micros,
    date_days,
    date_text,
    interval_text,
    timestamp_micros,
    timestamp_text,
)
from archiver.serve.types import _ARRAY_ELEMENT, _BY_OID

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970
_PG_EPOCH_DAYS = 10_957
_DAY_US = 86_400_000_000


class Unsupported(Exception):
    """A value binary form cannot carry (a PostgreSQL-only value kept as text)."""


def _numeric_binary(value: Decimal) -> bytes:
    if value.is_nan():
        return struct.pack("!hhHH", 0, 0, 0xC000, 0)
    if value.is_infinite():  # PostgreSQL 14's NUMERIC_PINF and NUMERIC_NINF
        return struct.pack("!hhHH", 0, 0, 0xF000 if value < 0 else 0xD000, 0)
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    dscale = max(0, -exponent)
    text = "".join(map(str, digits))
    if exponent < 0:
        text = text.rjust(-exponent, "0")  # 1E-7: seven places after the point
    integer = text[: len(text) + exponent] if exponent < 0 else text + "0" * exponent
    fraction = text[len(text) + exponent :] if exponent < 0 else ""
    integer = integer.lstrip("0")
    integer = "0" * (-len(integer) % 4) + integer
    fraction = fraction + "0" * (-len(fraction) % 4)
    groups = [int(integer[i : i + 4]) for i in range(0, len(integer), 4)]
    groups += [int(fraction[i : i + 4]) for i in range(0, len(fraction), 4)]
    weight = len(integer) // 4 - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    head = struct.pack("!hhHH", len(groups), weight, 0x4000 if sign else 0, dscale)
    return head + struct.pack(f"!{len(groups)}h", *groups)


def scalar_binary(kind: str, text: str) -> bytes:
    """One value's binary form, from its PostgreSQL text (what text_values gives)."""
    if kind == "boolean":
        return b"\x01" if text == "t" else b"\x00"
    if kind in ("smallint", "integer", "bigint", "oid"):
        return struct.pack(
            {"smallint": "!h", "integer": "!i", "bigint": "!q", "oid": "!I"}[kind], int(text)
        )
    if kind in ("real", "double precision"):
        value = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(text)
        return struct.pack(
            "!f" if kind == "real" else "!d", float(text) if value is None else value
        )
    if kind == "numeric":
        return _numeric_binary(Decimal(text))
    if kind == "bytea":
        return bytes.fromhex(text[2:])
    if kind == "uuid":
        return bytes.fromhex(text.replace("-", ""))
    if kind == "jsonb":
        return b"\x01" + text.encode()
    if kind == "date":
        if text in ("infinity", "-infinity"):
            return struct.pack("!i", 2**31 - 1 if text == "infinity" else -(2**31))
        return struct.pack("!i", date_days(text) - _PG_EPOCH_DAYS)
    if kind in ("timestamp without time zone", "timestamp with time zone"):
        if text in ("infinity", "-infinity"):
            return struct.pack("!q", 2**63 - 1 if text == "infinity" else -(2**63))
        return struct.pack("!q", timestamp_micros(text) - _PG_EPOCH_US)
    if kind == "time without time zone":
        return struct.pack("!q", clock_micros(text))
    if kind == "interval":
        months, days, micros = _interval_parts(text)
        return struct.pack("!qii", micros, days, months)
    return text.encode()


_INTERVAL_UNIT = re.compile(r"(-?\d+) (year|mon|day)s?")


def _interval_parts(text: str) -> tuple[int, int, int]:
    months = days = micros = 0
    for value, unit in _INTERVAL_UNIT.findall(text):
        if unit == "year":
            months += 12 * int(value)
        elif unit == "mon":
            months += int(value)
        else:
            days += int(value)
    time_part = text.rsplit(" ", 1)[-1]
    if ":" in time_part:
        negative = time_part.startswith("-")
        micros = clock_micros(time_part.lstrip("-"))
        micros = -micros if negative else micros
    return months, days, micros


def parse_array(text: str) -> list[str | None]:
    """The elements of a one-dimensional array's text (array_text's inverse)."""
    if not text.startswith("{") or not text.endswith("}"):
        raise Unsupported(f"array {text[:40]!r} is not one-dimensional from 1: text only")
    try:
        dims, items = compound.parse_array(text)
    except (IndexError, ValueError):
        raise Unsupported(f"array {text[:40]!r} is malformed") from None
    if len(dims) > 1:
        raise Unsupported(f"array {text[:40]!r} is not one-dimensional from 1: text only")
    return items


def parameter(oid: int, data: bytes | None, binary: bool) -> Any:
    """A Bind parameter as the value DuckDB is given: its text as a string (DuckDB casts
    it where the statement says), or, in binary, the value its type's binary form holds."""
    if data is None:
        return None
    if not binary:
        text = data.decode()
        if oid in _ARRAY_ELEMENT and text.startswith("{"):  # `$1::text[]` given '{a,b}'
            return parse_array(text)
        return text
    pg = _BY_OID.get(oid)
    if pg is None:
        element = _ARRAY_ELEMENT.get(oid)
        if element is not None and element.name in ("oid", "integer", "bigint", "smallint"):
            return _binary_integers(data, signed=element.name != "oid")
        if element is not None:
            raise Unsupported(f"a binary array parameter (type {oid}): send it as text")
        return data.decode()
    kind = pg.name
    if kind == "oid":
        return int.from_bytes(data, "big", signed=False)
    if kind == "boolean":
        return data != b"\x00"
    if kind in ("smallint", "integer", "bigint"):
        return int.from_bytes(data, "big", signed=True)
    if kind in ("real", "double precision"):
        return struct.unpack("!f" if kind == "real" else "!d", data)[0]
    if kind == "bytea":
        return bytes(data)
    if kind == "uuid":
        return str(uuid.UUID(bytes=bytes(data)))
    if kind == "jsonb":
        return data[1:].decode()
    if kind == "date":
        (days,) = struct.unpack("!i", data)
        return date_text(days + _PG_EPOCH_DAYS)
    if kind in ("timestamp without time zone", "timestamp with time zone"):
        (micros,) = struct.unpack("!q", data)
        return timestamp_text(
            micros + _PG_EPOCH_US, UTC if kind.endswith("with time zone") else None
        )
    if kind == "numeric":
        return _numeric_from_binary(data)
    if kind == "time without time zone":
        (micros,) = struct.unpack("!q", data)
        return clock(micros)
    if kind == "interval":
        micros, days, months = struct.unpack("!qii", data)
        return interval_text(months, days, micros)
    return data.decode()


def _binary_integers(data: bytes, signed: bool) -> list[int | None]:
    """A one-dimensional array of integers (or OIDs) in binary form."""
    ndim, _, _ = struct.unpack("!iii", data[:12])
    if ndim == 0:
        return []
    if ndim != 1:
        raise Unsupported("a binary array parameter of more than one dimension")
    count, _ = struct.unpack("!ii", data[12:20])
    out: list[int | None] = []
    at = 20
    for _ in range(count):
        (size,) = struct.unpack("!i", data[at : at + 4])
        at += 4
        if size < 0:
            out.append(None)
            continue
        out.append(int.from_bytes(data[at : at + size], "big", signed=signed))
        at += size
    return out


def _numeric_from_binary(data: bytes) -> Decimal:
    ndigits, weight, sign, dscale = struct.unpack("!hhHH", data[:8])
    if sign == 0xC000:
        return Decimal("NaN")
    digits = struct.unpack(f"!{ndigits}h", data[8 : 8 + 2 * ndigits])
    value = Decimal(0)
    for i, d in enumerate(digits):
        value += Decimal(d).scaleb(4 * (weight - i))
    value = value.quantize(Decimal(1).scaleb(-dscale)) if dscale else value.quantize(Decimal(1))
    return -value if sign == 0x4000 else value
