"""PostgreSQL's frontend/backend protocol (version 3), the bytes alone: reading a
client's messages from a stream, each checked against its declared length and a
maximum, and building the server's. No I/O beyond the stream, no SQL: what a message
means is archiver.serve.session's."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

PROTOCOL_3 = 196608  # 3.0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_STARTUP = 10_000  # PostgreSQL's own limit on a start-up packet


class ProtocolError(Exception):
    """A message that breaks the protocol: answered with an error, then the connection
    is closed (SQLSTATE 08P01)."""


class SqlError(Exception):
    """An error the client is told of as PostgreSQL tells it (an ErrorResponse): its
    SQLSTATE and message, and PostgreSQL's detail, hint and position where it has them;
    the connection goes on."""

    def __init__(
        self,
        sqlstate: str,
        message: str,
        detail: str | None = None,
        hint: str | None = None,
        position: str | None = None,
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint
        self.position = position


@dataclass(frozen=True)
class Message:
    kind: bytes  # one byte: b"Q", b"P", …
    body: bytes


async def read_startup(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """A start-up-phase packet: (its code, the rest): protocol 3's parameters, or an
    SSL, GSSAPI or cancel request."""
    head = await reader.readexactly(4)
    (length,) = struct.unpack("!i", head)
    if not 8 <= length <= MAX_STARTUP:
        raise ProtocolError(f"invalid start-up packet length {length}")
    body = await reader.readexactly(length - 4)
    (code,) = struct.unpack("!i", body[:4])
    return code, body[4:]


def startup_parameters(body: bytes) -> dict[str, str]:
    """The name/value pairs of a protocol 3 start-up packet."""
    if not body.endswith(b"\x00"):
        raise ProtocolError("start-up packet not terminated")
    parts = body[:-1].split(b"\x00")
    if len(parts) % 2:
        parts = parts[:-1] if parts[-1] == b"" else parts
    if len(parts) % 2:
        raise ProtocolError("start-up packet has a name without a value")
    try:
        return {
            parts[i].decode(): parts[i + 1].decode() for i in range(0, len(parts), 2) if parts[i]
        }
    except UnicodeDecodeError:
        raise ProtocolError("start-up packet is not UTF-8") from None


async def read_message(reader: asyncio.StreamReader, maximum: int) -> Message:
    """One typed message; its length checked (at least 4, at most `maximum`)."""
    head = await reader.readexactly(5)
    kind = head[:1]
    (length,) = struct.unpack("!i", head[1:])
    if length < 4:
        raise ProtocolError(f"invalid message length {length}")
    if length - 4 > maximum:
        raise ProtocolError(f"message of {length} bytes is over the limit of {maximum}")
    return Message(kind, await reader.readexactly(length - 4))


class Reader:
    """Fields of one message body, in order; running past its end is a ProtocolError."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self._at = 0

    def string(self) -> str:
        end = self._body.find(b"\x00", self._at)
        if end < 0:
            raise ProtocolError("a string field is not terminated")
        try:
            text = self._body[self._at : end].decode()
        except UnicodeDecodeError:
            raise ProtocolError("a string field is not UTF-8") from None
        self._at = end + 1
        return text

    def int16(self) -> int:
        return int(self._unpack("!h", 2))

    def int32(self) -> int:
        return int(self._unpack("!i", 4))

    def byte(self) -> bytes:
        return self.take(1)

    def take(self, n: int) -> bytes:
        if n < 0 or self._at + n > len(self._body):
            raise ProtocolError("a message is shorter than its fields")
        data = self._body[self._at : self._at + n]
        self._at += n
        return data

    def _unpack(self, fmt: str, n: int) -> int:
        return int(struct.unpack(fmt, self.take(n))[0])

    def end(self) -> None:
        if self._at != len(self._body):
            raise ProtocolError("a message is longer than its fields")


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _cstr(text: str) -> bytes:
    return text.encode() + b"\x00"


def authentication(code: int, data: bytes = b"") -> bytes:
    return _message(b"R", struct.pack("!i", code) + data)


def parameter_status(name: str, value: str) -> bytes:
    return _message(b"S", _cstr(name) + _cstr(value))


def backend_key(pid: int, secret: int) -> bytes:
    return _message(b"K", struct.pack("!ii", pid, secret))


def ready(status: bytes) -> bytes:
    """ReadyForQuery: b"I" idle, b"T" in a transaction, b"E" in a failed one."""
    return _message(b"Z", status)


def error(sqlstate: str, text: str, severity: str = "ERROR", detail: str | None = None,
          hint: str | None = None, position: str | None = None) -> bytes:  # fmt: skip
    fields = b"S" + _cstr(severity) + b"V" + _cstr(severity) + b"C" + _cstr(sqlstate)
    fields += b"M" + _cstr(text)
    for code, value in ((b"D", detail), (b"H", hint), (b"P", position)):
        if value:
            fields += code + _cstr(value)
    return _message(b"E", fields + b"\x00")


def command_complete(tag: str) -> bytes:
    return _message(b"C", _cstr(tag))


class Described(Protocol):
    """A result column as RowDescription tells it."""

    @property
    def name(self) -> str: ...
    @property
    def table(self) -> int: ...
    @property
    def attnum(self) -> int: ...
    @property
    def oid(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def typmod(self) -> int: ...


def row_description(columns: Sequence[Described], formats: Sequence[int]) -> bytes:
    """Each column (its name, relation and column number, type OID, typlen, typmod) and
    the format each is sent in."""
    body = [struct.pack("!h", len(columns))]
    for c, fmt in zip(columns, formats, strict=True):
        body.append(
            _cstr(c.name) + struct.pack("!IhIhih", c.table, c.attnum, c.oid, c.size, c.typmod, fmt)
        )
    return _message(b"T", b"".join(body))


def data_row(values: Iterable[bytes | None]) -> bytes:
    parts = []
    n = 0
    for v in values:
        n += 1
        parts.append(struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v)
    return _message(b"D", struct.pack("!h", n) + b"".join(parts))


def parameter_description(oids: Sequence[int]) -> bytes:
    return _message(b"t", struct.pack(f"!h{len(oids)}i", len(oids), *oids))


NO_DATA = _message(b"n", b"")
PARSE_COMPLETE = _message(b"1", b"")
BIND_COMPLETE = _message(b"2", b"")
CLOSE_COMPLETE = _message(b"3", b"")
PORTAL_SUSPENDED = _message(b"s", b"")
EMPTY_QUERY = _message(b"I", b"")
