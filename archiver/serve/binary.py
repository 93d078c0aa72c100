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

from archiver.serve.text import clock, date_text, interval_text, timestamp_text
from archiver.serve.types import _ARRAY_ELEMENT, _BY_OID, TYPES, Column

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970
_PG_EPOCH_DAYS = 10_957
_DAY_US = 86_400_000_000


class Unsupported(Exception):
    """A value binary form cannot carry (a PostgreSQL-only value kept as text)."""


def _numeric_binary(value: Decimal) -> bytes:
    if value.is_nan():
        return struct.pack("!hhHH", 0, 0, 0xC000, 0)
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


def _scalar_binary(kind: str, text: str) -> bytes:
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
        return struct.pack("!i", _days(text) - _PG_EPOCH_DAYS)
    if kind in ("timestamp without time zone", "timestamp with time zone"):
        if text in ("infinity", "-infinity"):
            return struct.pack("!q", 2**63 - 1 if text == "infinity" else -(2**63))
        return struct.pack("!q", _micros(text) - _PG_EPOCH_US)
    if kind == "time without time zone":
        return struct.pack("!q", _clock_micros(text))
    if kind == "interval":
        months, days, micros = _interval_parts(text)
        return struct.pack("!qii", micros, days, months)
    return text.encode()


def _days(text: str) -> int:
    bc = text.endswith(" BC")
    year, month, day = (int(p) for p in text.removesuffix(" BC").split("-"))
    year = 1 - year if bc else year
    # days since 1970 of a proleptic Gregorian date, any year (H. Hinnant)
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _clock_micros(text: str) -> int:
    hours, minutes, seconds = text.split(":")
    whole, _, frac = seconds.partition(".")
    return ((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1_000_000 + int(
        (frac + "000000")[:6]
    )


def _micros(text: str) -> int:
    bc = text.endswith(" BC")
    body = text.removesuffix(" BC").removesuffix("+00")
    day, time_part = body.split(" ")
    return _days(day + (" BC" if bc else "")) * _DAY_US + _clock_micros(time_part)


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
        micros = _clock_micros(time_part.lstrip("-"))
        micros = -micros if negative else micros
    return months, days, micros


def binary_value(column: Column, text: bytes) -> bytes:
    """A value's binary form (from its text): what a client that asked for binary reads."""
    value = text.decode()
    kind = column.kind
    if not kind.endswith("[]"):
        if kind in ("numeric",) and value in ("Infinity", "-Infinity"):
            raise Unsupported(f"numeric {value} has no binary form before PostgreSQL 14")
        return _scalar_binary(kind, value)
    element = TYPES[kind[:-2]]
    items = parse_array(value)
    out = [struct.pack("!iii", 1, int(None in items), element.oid)]
    out.append(struct.pack("!ii", len(items), 1))
    for item in items:
        if item is None:
            out.append(struct.pack("!i", -1))
        else:
            data = _scalar_binary(element.name, item)
            out.append(struct.pack("!i", len(data)) + data)
    if not items:
        return struct.pack("!iii", 0, 0, element.oid)
    return b"".join(out)


def parse_array(text: str) -> list[str | None]:
    """The elements of a one-dimensional array's text (array_text's inverse)."""
    if not text.startswith("{") or text.startswith("{{") or not text.endswith("}"):
        raise Unsupported(f"array {text[:40]!r} is not one-dimensional from 1: text only")
    try:
        return _elements(text)
    except IndexError:
        raise Unsupported(f"array {text[:40]!r} is malformed") from None


def _elements(text: str) -> list[str | None]:
    items: list[str | None] = []
    i, body = 0, text[1:-1]
    while i < len(body):
        if body[i] == '"':
            j, chars = i + 1, []
            while body[j] != '"':
                if body[j] == "\\":
                    j += 1
                chars.append(body[j])
                j += 1
            items.append("".join(chars))
            i = j + 2
        else:
            j = body.find(",", i)
            j = len(body) if j < 0 else j
            item = body[i:j]
            items.append(None if item == "NULL" else item)
            i = j + 1
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
        return timestamp_text(micros + _PG_EPOCH_US, kind.endswith("with time zone"))
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
