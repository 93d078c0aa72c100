"""Archived values as PostgreSQL's text: what its output function prints for the
original type, which its input function reads back exactly (a PostgreSQL-only value
from the column's `__pg_text` companion, as archived)."""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa

from archiver.pgtypes.arrow import INTERVAL_STRUCT, civil
from archiver.serve.types import Column

_DAY_US = 86_400_000_000
_FEW = 64
_INFINITY_US = (2**63 - 1, -(2**63))
INET_OID = 869  # DuckDB's ±infinity timestamps, as Arrow holds them


def date_text(days: int) -> str:
    """PostgreSQL's ISO text of a date (days since 1970), BC years as it prints them."""
    year, month, day = civil(days)
    bc = year <= 0
    return f"{1 - year if bc else year:04d}-{month:02d}-{day:02d}" + (" BC" if bc else "")


def clock(micros: int) -> str:
    seconds, us = divmod(micros, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{us:06d}".rstrip("0") if us else "")


class Zone:
    """A session's TimeZone, as PostgreSQL names it (`Europe/Paris`, `UTC`, a fixed
    offset such as `<+05:30>-05:30`): the offset from UTC at each instant."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fixed: int | None = None
        self._zone: zoneinfo.ZoneInfo | None = None
        if name.upper() in ("UTC", "GMT", "Z", "ZULU", "UCT", "ETC/UTC", "ETC/GMT"):
            self.fixed = 0
            return
        posix = _POSIX.fullmatch(name)
        if posix is not None:  # a fixed offset, POSIX's sign: west of Greenwich is positive
            sign, hours, minutes, seconds = posix.groups()
            west = int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
            self.fixed = west if sign == "-" else -west
            return
        try:
            self._zone = zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"time zone {name!r}: archiver serve writes times in zones of the tz database "
                "and fixed offsets only"
            ) from None

    def offset(self, micros: int) -> int:
        """Seconds east of UTC at `micros` (µs since 1970)."""
        if self.fixed is not None:
            return self.fixed
        assert self._zone is not None
        seconds = min(max(micros // 1_000_000, _FIRST_SECOND), _LAST_SECOND)
        when = dt.datetime.fromtimestamp(seconds, dt.UTC).astimezone(self._zone)
        delta = when.utcoffset()
        return 0 if delta is None else int(delta.total_seconds())


UTC = Zone("UTC")
_POSIX = re.compile(r"(?:<[^>]*>|[A-Za-z]{3,})?([+-]?)(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?")
_FIRST_SECOND = -62135596800 + 86400  # 0001-01-02: what datetime holds, any zone
_LAST_SECOND = 253402214400 - 86400  # 9999-12-30


def timestamp_text(micros: int, zone: Zone | None) -> str:
    """PostgreSQL's ISO text of a timestamp (µs since 1970; with a `zone`, its time
    there and the offset, as PostgreSQL writes timestamptz in the session's TimeZone)."""
    if micros in _INFINITY_US:
        return "infinity" if micros > 0 else "-infinity"
    offset = 0 if zone is None else zone.offset(micros)
    days, rest = divmod(micros + offset * 1_000_000, _DAY_US)
    year, month, day = civil(days)
    bc = year <= 0
    text = f"{1 - year if bc else year:04d}-{month:02d}-{day:02d} {clock(rest)}"
    return text + ("" if zone is None else offset_text(offset)) + (" BC" if bc else "")


def offset_text(offset: int) -> str:
    """An offset as PostgreSQL writes it: `+00`, `+05:30`, `-03`, `+00:53:28`."""
    sign = "-" if offset < 0 else "+"
    minutes, seconds = divmod(abs(offset), 60)
    hours, minutes = divmod(minutes, 60)
    text = f"{sign}{hours:02d}"
    if minutes or seconds:
        text += f":{minutes:02d}"
    if seconds:
        text += f":{seconds:02d}"
    return text


def date_days(text: str) -> int:
    """Days since 1970 of a date's ISO text (BC years as PostgreSQL prints them)."""
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


def clock_micros(text: str) -> int:
    hours, minutes, seconds = text.split(":")
    whole, _, frac = seconds.partition(".")
    return ((int(hours) * 60 + int(minutes)) * 60 + int(whole)) * 1_000_000 + int(
        (frac + "000000")[:6]
    )


def timestamp_micros(text: str) -> int:
    """µs since 1970 of a timestamp's text (with time zone: at its offset)."""
    bc = text.endswith(" BC")
    day, _, clock_text = text.removesuffix(" BC").partition(" ")
    m = _OFFSET.fullmatch(clock_text)
    if m is None:
        raise ValueError(f"timestamp {text!r}")
    offset = 0
    zone = m.group(2)
    if zone:
        parts = zone[1:].split(":")
        offset = sum(int(p) * unit for p, unit in zip(parts, (3600, 60, 1), strict=False))
        offset = -offset if zone[0] == "-" else offset
    return (
        date_days(day + (" BC" if bc else "")) * _DAY_US
        + clock_micros(m.group(1))
        - offset * 1_000_000
    )


_OFFSET = re.compile(r"(\d+:\d+:\d+(?:\.\d+)?)([+-]\d+(?::\d+){0,2})?")


def rezoned(text: str, zone: Zone) -> str:
    """Each timestamp with its offset in `text` (a value's, or an array's, as archived:
    in UTC) written again in `zone`."""
    return _TIMESTAMP.sub(lambda m: timestamp_text(timestamp_micros(m.group(0)), zone), text)


_TIMESTAMP = re.compile(r"\d{4,}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?[+-]\d\d(?::\d\d){0,2}(?: BC)?")


def interval_text(months: int, days: int, micros: int) -> str:
    """PostgreSQL's text of an interval in its default style (`postgres`)."""
    parts = []
    years, mons = int(months / 12), months - int(months / 12) * 12  # truncated, as PostgreSQL
    for value, unit in ((years, "year"), (mons, "mon"), (days, "day")):
        if value:
            parts.append(f"{value} {unit}{'' if abs(value) == 1 else 's'}")
    if micros or not parts:
        sign = "-" if micros < 0 else ""
        parts.append(sign + clock(abs(micros)))
    return " ".join(parts)


def float_text(value: float, single: bool, extra_digits: int = 1) -> str:
    """PostgreSQL's text of a float4 or float8: with extra_float_digits above 0 (its
    default), the fewest digits that read back the same value, in exponent form below
    1e-4 and from 1e15 (float4: 1e6); else rounded to 15 (float4: 6) digits plus
    extra_float_digits, as C's %g writes them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if extra_digits <= 0:
        return f"{value:.{max((6 if single else 15) + extra_digits, 1)}g}"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    shortest = repr(value)
    if single:
        for width in range(1, 10):
            shortest = f"{value:.{width}g}"
            if struct.unpack("f", struct.pack("f", float(shortest)))[0] == value:
                break
    sign, digits, exponent = Decimal(shortest).normalize().as_tuple()
    assert isinstance(exponent, int)
    places = "".join(map(str, digits))
    magnitude = len(places) + exponent - 1  # the exponent in scientific notation
    head = "-" if sign else ""
    if magnitude < -4 or magnitude >= (6 if single else 15):
        mantissa = places[0] + ("." + places[1:] if len(places) > 1 else "")
        return f"{head}{mantissa}e{'-' if magnitude < 0 else '+'}{abs(magnitude):02d}"
    return head + format(Decimal(places).scaleb(exponent), "f")


def numeric_text(value: Decimal, trim: bool) -> str:
    if trim:
        value = value.normalize()
    text = format(value, "f")
    return "0" if text in ("-0", "0") and trim else text


def bytea_text(value: bytes, escape: bool = False) -> str:
    """bytea as PostgreSQL writes it: hex (its default), or with bytea_output = escape
    printable ASCII as itself, a backslash doubled, any other byte in octal."""
    if not escape:
        return "\\x" + value.hex()
    return "".join("\\\\" if b == 92 else chr(b) if 32 <= b < 127 else f"\\{b:03o}" for b in value)


@dataclass(frozen=True)
class Money:
    """How money is written, as lc_monetary has it: read off PostgreSQL's own text of a
    positive and a negative amount (`$1,234,567.89`, `-$1,234,567.89`)."""

    positive: tuple[str, str]  # what comes before and after the number
    negative: tuple[str, str]
    group: str
    point: str
    digits: int

    @classmethod
    def of(cls, positive: str, negative: str) -> Money:
        """From PostgreSQL's text of 1234567.891 and of -1234567.891 as money."""

        def split(text: str) -> tuple[str, str, str]:
            first = next(i for i, c in enumerate(text) if c.isdigit())
            last = max(i for i, c in enumerate(text) if c.isdigit())
            return text[:first], text[first : last + 1], text[last + 1 :]

        before, body, after = split(positive)
        negative_before, _, negative_after = split(negative)
        group = body[1] if not body[1].isdigit() else ""
        rest = body[1 + len(group) * 2 + 6 :] if group else body[7:]
        point = rest[:1] if rest and not rest[0].isdigit() else ""
        return cls(
            (before, after), (negative_before, negative_after), group, point, len(rest) - len(point)
        )

    def text(self, amount: str) -> str:
        """The money text of a numeric's text (as money is archived: exact)."""
        value = Decimal(amount)
        whole, _, fraction = f"{abs(value):.{self.digits}f}".partition(".")
        grouped = f"{int(whole):,}".replace(",", self.group)
        number = grouped + (self.point + fraction if self.digits else "")
        before, after = self.negative if value < 0 else self.positive
        return before + number + after


C_MONEY = Money(("$", ""), ("-$", ""), ",", ".", 2)  # lc_monetary C, en_US


@dataclass(frozen=True)
class Style:
    """How a session writes values: its TimeZone, extra_float_digits, bytea_output,
    and money as the server's lc_monetary writes it."""

    zone: Zone
    float_digits: int = 1
    bytea_escape: bool = False
    money: Money = C_MONEY


_NEEDS_QUOTES = re.compile(r'[\s{}",\\]')


def inet_text(text: str) -> str:
    """PostgreSQL's text of an inet from its `::text` (as archived), which always writes
    the mask: inet's output function leaves out a mask of the whole address."""
    address, _, bits = text.partition("/")
    return address if bits == ("128" if ":" in address else "32") else text


def array_text(values: Iterable[str | None]) -> str:
    """PostgreSQL's text of a one-dimensional array of element texts."""
    out = []
    for v in values:
        if v is None:
            out.append("NULL")
        elif v == "" or v.upper() == "NULL" or _NEEDS_QUOTES.search(v):
            out.append('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            out.append(v)
    return "{" + ",".join(out) + "}"


def _texts(array: pa.Array, kind: str, trim: bool, style: Style) -> list[str | None]:
    """Each value of `array` as PostgreSQL's text of `kind`."""
    t = array.type
    if kind == "money":  # archived as its exact numeric's text
        return [None if v is None else style.money.text(str(v)) for v in array.to_pylist()]
    if pa.types.is_string(t) or pa.types.is_large_string(t):  # archived as that text
        return array.to_pylist()  # type: ignore[no-any-return]
    if kind.endswith("[]") and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        element = kind[:-2]
        flat = _texts(array.flatten(), element, trim, style)
        offsets = array.offsets.to_pylist()
        valid = array.is_valid().to_pylist()
        return [
            array_text(flat[offsets[i] - offsets[0] : offsets[i + 1] - offsets[0]])
            if valid[i]
            else None
            for i in range(len(array))
        ]
    if pa.types.is_timestamp(t):
        raw = array.cast(pa.timestamp("us", t.tz)).view(pa.int64()).to_pylist()
        at = style.zone if t.tz is not None else None
        return [None if v is None else timestamp_text(v, at) for v in raw]
    if pa.types.is_date32(t):
        return [None if v is None else date_text(v) for v in array.view(pa.int32()).to_pylist()]
    if pa.types.is_time(t):
        raw = array.cast(pa.time64("us")).view(pa.int64()).to_pylist()
        return [None if v is None else clock(v) for v in raw]
    if t == pa.month_day_nano_interval():
        return [
            None if v is None else interval_text(v.months, v.days, v.nanoseconds // 1000)
            for v in array.to_pylist()
        ]
    if t == INTERVAL_STRUCT:
        return [
            None if v is None else interval_text(v["months"], v["days"], v["microseconds"])
            for v in array.to_pylist()
        ]
    if pa.types.is_boolean(t):
        return [None if v is None else ("t" if v else "f") for v in array.to_pylist()]
    if pa.types.is_floating(t):
        single = pa.types.is_float32(t) or kind == "real"
        digits = style.float_digits
        return [None if v is None else float_text(v, single, digits) for v in array.to_pylist()]
    if pa.types.is_decimal(t):
        return [None if v is None else numeric_text(v, trim) for v in array.to_pylist()]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        escape = style.bytea_escape
        return [None if v is None else bytea_text(v, escape) for v in array.to_pylist()]
    if pa.types.is_integer(t):
        if len(array) < _FEW:  # Arrow's cast costs more than Python's str for a few values
            return [None if v is None else str(v) for v in array.to_pylist()]
        return array.cast(pa.string()).to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_struct(t) or pa.types.is_map(t):
        import json

        return [None if v is None else json.dumps(v, default=str) for v in array.to_pylist()]
    return [None if v is None else str(v) for v in array.to_pylist()]


def text_values(
    array: pa.Array, column: Column, companion: pa.Array | None, style: Style
) -> list[bytes | None]:
    """Every value of one result column as PostgreSQL's text (UTF-8) in the session's
    `style`, a PostgreSQL-only value from its companion column where that has one."""
    texts = _texts(array, column.kind, column.trim_scale, style)
    if column.oid == INET_OID:
        texts = [None if v is None else inet_text(v) for v in texts]
    if companion is not None:
        zoned = column.kind.startswith("timestamp with time zone") and style.zone.name != "UTC"
        for i, special in enumerate(companion.to_pylist()):
            if special is not None:
                texts[i] = rezoned(special, style.zone) if zoned else special
    return [None if v is None else v.encode() for v in texts]
