"""The types of the definitions database, by OID, as its pg_type has them, and the
binary form of each type a column is announced as, written from the value's PostgreSQL
text: enums, composites (record_send), ranges and multiranges, domains (their base
type's), arrays of any dimension, and the built-in scalars the types tests hold (inet,
cidr, macaddr, money, bit strings, point, timetz, xml beside the numbers, times and
texts of archiver.serve.binary). A type whose binary form serve does not write (a
tsvector, an extension's own) is announced as text (`sendable`)."""

from __future__ import annotations

import ipaddress
import re
import struct
from dataclasses import dataclass
from typing import Any

from archiver.serve.binary import Unsupported, scalar_binary
from archiver.serve.compound import (
    RANGE_SPECIAL,
    parse_array,
    parse_record,
    quoted,
    split_multirange,
)
from archiver.serve.text import Zone, array_text, rezoned
from archiver.serve.types import Announced

# typsend -> archiver.serve.binary's name of the same form
_SCALARS = {
    "boolsend": "boolean",
    "int2send": "smallint",
    "int4send": "integer",
    "int8send": "bigint",
    "oidsend": "oid",
    "float4send": "real",
    "float8send": "double precision",
    "numeric_send": "numeric",
    "byteasend": "bytea",
    "uuid_send": "uuid",
    "jsonb_send": "jsonb",
    "date_send": "date",
    "timestamp_send": "timestamp without time zone",
    "timestamptz_send": "timestamp with time zone",
    "time_send": "time without time zone",
    "interval_send": "interval",
}
# typsend of types whose binary form is their text's bytes
_AS_TEXT = frozenset(
    (
        "textsend",
        "varcharsend",
        "bpcharsend",
        "namesend",
        "json_send",
        "xml_send",
        "enum_send",
        "citextsend",
        "unknownsend",
    )
)
_OWN = frozenset(
    (
        "charsend",
        "inet_send",
        "cidr_send",
        "macaddr_send",
        "macaddr8_send",
        "cash_send",
        "bit_send",
        "varbit_send",
        "point_send",
        "timetz_send",
    )
)

TYPES = """
SELECT t.oid, t.typname, t.typtype, t.typsend::text, t.typelem, t.typbasetype, t.typlen,
       t.typcategory, t.typdelim, r.rngsubtype, m.rngtypid,
       ARRAY(SELECT a.atttypid FROM pg_attribute a WHERE a.attrelid = t.typrelid
             AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum)
FROM pg_type t
LEFT JOIN pg_range r ON r.rngtypid = t.oid
LEFT JOIN pg_range m ON m.rngmultitypid = t.oid
WHERE t.typtype IN ('b', 'e', 'c', 'r', 'm', 'd')
"""


@dataclass(frozen=True)
class PgType:
    oid: int
    name: str
    kind: str  # typtype: b base, e enum, c composite, r range, m multirange, d domain
    send: str
    element: int  # an array's element type (0: not an array)
    base: int  # a domain's
    size: int
    delimiter: str
    subtype: int  # a range's
    range: int  # a multirange's range type
    attributes: tuple[int, ...]  # a composite's attribute types


class Registry:
    """The types by OID, read off the definitions database, and the type of each
    archived type's text (`archived`: format_type at archive time -> (OID, typmod) of
    the column declared for it)."""

    def __init__(
        self, rows: list[tuple[Any, ...]], archived: dict[str, tuple[int, int]] | None = None
    ) -> None:
        self.archived = archived or {}
        self.types: dict[int, PgType] = {}
        for r in rows:
            self.types[int(r[0])] = PgType(
                int(r[0]),
                str(r[1]),
                str(r[2]),
                str(r[3]),
                int(r[4] or 0) if str(r[7]) == "A" else 0,
                int(r[5] or 0),
                int(r[6]),
                str(r[8] or ","),
                int(r[9] or 0),
                int(r[10] or 0),
                tuple(int(a) for a in (r[11] or ())),
            )

    def announce(self, type_sql: str) -> Announced | None:
        """How a column archived as `type_sql` is announced, where serve writes its
        binary form (None: as text)."""
        found = self.archived.get(type_sql)
        if found is None:
            return None
        oid = self.announced(found[0])
        if not self.sendable(oid):
            return None
        typmod = found[1] if oid == found[0] else -1
        return Announced(oid, typmod, self.types[oid].size, self.zoned(oid))

    def zoned(self, oid: int, depth: int = 0) -> bool:
        """Whether values of type `oid` hold a timestamp with time zone (written in the
        session's TimeZone)."""
        t = self.types.get(oid)
        if t is None or depth > 32:
            return False
        if t.send == "timestamptz_send":
            return True
        inner = (t.element, t.base, t.subtype, t.range, *t.attributes)
        return any(self.zoned(i, depth + 1) for i in inner if i)

    def rezone(self, oid: int, text: str, zone: Zone) -> str:
        """A value of type `oid` as archived (its timestamps with time zone in UTC) with
        each of them written in `zone`, quoted as PostgreSQL's output functions quote."""
        t = self.types[oid]
        if t.send == "timestamptz_send":
            return rezoned(text, zone)
        if t.kind == "d":
            return self.rezone(t.base, text, zone)
        if t.element:
            dims, items = parse_array(text, self.types[t.element].delimiter)
            if len(dims) != 1 or dims[0][1] != 1:
                return rezoned(text, zone)  # every timestamp in it is one of the elements
            return array_text(None if v is None else self.rezone(t.element, v, zone) for v in items)
        if t.kind == "c":
            fields = parse_record(text)
            written = [
                "" if v is None else quoted(self.rezone(a, v, zone))
                for a, v in zip(t.attributes, fields, strict=True)
            ]
            return "(" + ",".join(written) + ")"
        if t.kind == "r":
            body = text.strip()
            if body.lower() == "empty":
                return body
            lower, upper = parse_record("(" + body[1:-1] + ")")
            bounds = [
                "" if v is None else quoted(self.rezone(t.subtype, v, zone), RANGE_SPECIAL)
                for v in (lower, upper)
            ]
            return f"{body[0]}{bounds[0]},{bounds[1]}{body[-1]}"
        if t.kind == "m":
            return (
                "{" + ",".join(self.rezone(t.range, r, zone) for r in split_multirange(text)) + "}"
            )
        return text

    def column_binary(self, kind: str, oid: int, text: str) -> bytes:
        """A result value's binary form: by archiver.serve.binary's `kind` of a built-in
        scalar, by the type `oid` otherwise (arrays of any dimension, user types)."""
        if kind and kind != "money" and not kind.endswith("[]"):
            return scalar_binary(kind, text)
        return self.binary(oid, text)

    def announced(self, oid: int) -> int:
        """The OID RowDescription says for a column of type `oid` (a domain: its base
        type's, as PostgreSQL says it)."""
        seen = 0
        while oid in self.types and self.types[oid].kind == "d" and seen < 32:
            oid, seen = self.types[oid].base, seen + 1
        return oid

    def sendable(self, oid: int, depth: int = 0) -> bool:
        """Whether serve writes the binary form of type `oid`."""
        t = self.types.get(oid)
        if t is None or depth > 32:
            return False
        if t.element:
            return self.sendable(t.element, depth + 1)
        if t.kind == "d":
            return self.sendable(t.base, depth + 1)
        if t.kind == "c":
            return all(self.sendable(a, depth + 1) for a in t.attributes)
        if t.kind == "r":
            return self.sendable(t.subtype, depth + 1)
        if t.kind == "m":
            return self.sendable(t.range, depth + 1)
        return t.send in _SCALARS or t.send in _AS_TEXT or t.send in _OWN

    def binary(self, oid: int, text: str) -> bytes:
        """The binary form of a value of type `oid`, from PostgreSQL's text of it."""
        t = self.types[oid]
        if t.element:
            return self._array(t, text)
        if t.kind == "d":
            return self.binary(t.base, text)
        if t.kind == "c":
            return self._record(t, text)
        if t.kind == "r":
            return self._range(t, text)
        if t.kind == "m":
            ranges = split_multirange(text)
            return struct.pack("!i", len(ranges)) + b"".join(
                _sized(self._range(self.types[t.range], r)) for r in ranges
            )
        if t.send in _SCALARS:
            return scalar_binary(_SCALARS[t.send], text)
        if t.send in _AS_TEXT:
            return text.encode()
        return _own(t.send, text)

    def _array(self, t: PgType, text: str) -> bytes:
        element = self.types[t.element]
        dims, items = parse_array(text, element.delimiter)
        body = [struct.pack("!iii", len(dims), int(None in items), t.element)]
        body += [struct.pack("!ii", n, low) for n, low in dims]
        for item in items:
            body.append(
                struct.pack("!i", -1) if item is None else _sized(self.binary(t.element, item))
            )
        return b"".join(body)

    def _record(self, t: PgType, text: str) -> bytes:
        values = parse_record(text)
        if len(values) != len(t.attributes):
            raise Unsupported(
                f"a value of {t.name} has {len(values)} fields, the type {len(t.attributes)}"
            )
        body = [struct.pack("!i", len(values))]
        for oid, value in zip(t.attributes, values, strict=True):
            body.append(struct.pack("!I", self.announced(oid)))
            body.append(struct.pack("!i", -1) if value is None else _sized(self.binary(oid, value)))
        return b"".join(body)

    def _range(self, t: PgType, text: str) -> bytes:
        text = text.strip()
        if text.lower() == "empty":
            return b"\x01"
        lower_inc, upper_inc = text[0] == "[", text[-1] == "]"
        lower, upper = parse_record("(" + text[1:-1] + ")")
        flags = (0x02 if lower_inc else 0) | (0x04 if upper_inc else 0)
        flags |= 0x08 if lower is None else 0
        flags |= 0x10 if upper is None else 0
        body = bytes([flags])
        if lower is not None:
            body += _sized(self.binary(t.subtype, lower))
        if upper is not None:
            body += _sized(self.binary(t.subtype, upper))
        return body


def _sized(data: bytes) -> bytes:
    return struct.pack("!i", len(data)) + data


def _own(send: str, text: str) -> bytes:
    """The built-in scalars whose binary form archiver.serve.binary does not write."""
    if send == "charsend":
        return text.encode()[:1]
    if send == "inet_send":
        interface = ipaddress.ip_interface(text)
        return _address(interface.ip, interface.network.prefixlen, cidr=False)
    if send == "cidr_send":
        network = ipaddress.ip_network(text)
        return _address(network.network_address, network.prefixlen, cidr=True)
    if send in ("macaddr_send", "macaddr8_send"):
        return bytes.fromhex(re.sub(r"[^0-9a-fA-F]", "", text))
    if send == "cash_send":  # in the locale's smallest unit: every digit money's text shows
        negative = "-" in text or text.startswith("(")
        units = int(re.sub(r"\D", "", text) or 0)
        return struct.pack("!q", -units if negative else units)
    if send in ("bit_send", "varbit_send"):
        bits = text.strip()
        padded = bits + "0" * (-len(bits) % 8)
        data = bytes(int(padded[i : i + 8], 2) for i in range(0, len(padded), 8))
        return struct.pack("!i", len(bits)) + data
    if send == "point_send":
        x, y = (float(v) for v in text.strip("()").split(","))
        return struct.pack("!dd", x, y)
    if send == "timetz_send":
        m = re.fullmatch(
            r"(\d+):(\d+):(\d+)(?:\.(\d+))?([+-])(\d+)(?::(\d+))?(?::(\d+))?", text.strip()
        )
        if m is None:
            raise Unsupported(f"time with time zone {text!r}")
        hours, minutes, seconds, frac, sign, zh, zm, zs = m.groups()
        micros = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000 + int(
            ((frac or "") + "000000")[:6]
        )
        offset = int(zh) * 3600 + int(zm or 0) * 60 + int(zs or 0)
        return struct.pack("!qi", micros, -offset if sign == "+" else offset)
    raise Unsupported(f"no binary form of {send}")


def _address(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, bits: int, cidr: bool
) -> bytes:
    packed = address.packed
    family = 2 if address.version == 4 else 3  # PGSQL_AF_INET, PGSQL_AF_INET6
    return struct.pack("!BBBB", family, bits, int(cidr), len(packed)) + packed
