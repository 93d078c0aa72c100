"""archiver serve's parsers fuzzed with malformed input (each raises its own error, never
another), the SCRAM exchange against scramp's client, and the text forms PostgreSQL
prints, value by value. The same bytes reach a real server in tests/integration/test_serve.py."""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from decimal import Decimal

import pytest

from archiver.serve import binary, scram, statements, text, types, wire


def test_random_messages_raise_protocol_errors_only() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 30)))
        read = wire.Reader(body)
        try:
            for step in rng.choices(("string", "int16", "int32", "byte", "take", "end"), k=6):
                if step == "take":
                    read.take(rng.randrange(-2, 10))
                else:
                    getattr(read, step)()
        except wire.ProtocolError:
            pass
        with contextlib.suppress(wire.ProtocolError):
            wire.startup_parameters(body)


def test_framing_refuses_bad_lengths() -> None:
    async def read(data: bytes, startup: bool = False) -> object:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        if startup:
            return await wire.read_startup(reader)
        return await wire.read_message(reader, 100)

    for data in (b"Q\x00\x00\x00\x02", b"Q" + struct.pack("!i", 200) + b"x" * 200):
        with pytest.raises(wire.ProtocolError):
            asyncio.run(read(data))
    with pytest.raises(asyncio.IncompleteReadError):
        asyncio.run(read(b"Q\x00\x00\x00\x09abc"))  # truncated: the client went away
    for packet in (b"\x00\x00\x00\x03", struct.pack("!i", 1 << 20)):
        with pytest.raises(wire.ProtocolError):
            asyncio.run(read(packet, startup=True))


def test_statement_splitting_and_classifying_never_fail() -> None:
    rng = random.Random(5)
    alphabet = "SELECT ;'\"$-/*\nabc{}DECLARE FETCH BEGIN SET =x1"
    for _ in range(2000):
        sql = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        for part in statements.split(sql):
            statements.classify(part, frozenset({"pg_class"}))
    assert statements.split("SELECT ';'; SELECT $$;$$ -- ;\n") == [
        "SELECT ';'",
        "SELECT $$;$$ -- ;",
    ]


def test_binary_parameters_of_wrong_shape_raise_clear_errors() -> None:
    rng = random.Random(9)
    for oid in (16, 20, 21, 23, 700, 701, 1082, 1114, 1184, 1186, 1700, 2950, 1007, 1028):
        for _ in range(200):
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 24)))
            with contextlib.suppress(
                binary.Unsupported, ValueError, struct.error, UnicodeDecodeError
            ):
                binary.parameter(oid, data, True)


def test_scram_against_a_client() -> None:
    from scramp import ScramClient

    verifier = scram.Verifier.of("correct horse")
    for password, ok in (("correct horse", True), ("wrong", False)):
        client = ScramClient(["SCRAM-SHA-256"], "anyone", password)
        exchange = scram.Exchange(verifier)
        client.set_server_first(exchange.first(client.get_client_first()))
        if ok:
            client.set_server_final(exchange.final(client.get_client_final()))
        else:
            with pytest.raises(scram.ScramError, match="wrong password"):
                exchange.final(client.get_client_final())
    # libpq's first message names no user: PostgreSQL takes it from the start-up packet
    assert exchange.first("n,,n=,r=abcdef").startswith("r=abcdef")
    for bad in ("p=tls-server-end-point,,n=,r=x", "n,,n=", "garbage"):
        with pytest.raises(scram.ScramError):
            scram.Exchange(verifier).first(bad)


@pytest.mark.parametrize(
    ("value", "single", "printed"),
    [
        (0.1, False, "0.1"),
        (1e15, False, "1e+15"),
        (123456789012345.0, False, "123456789012345"),
        (1e-5, False, "1e-05"),
        (-0.0, False, "-0"),
        (float("nan"), False, "NaN"),
        (float("-inf"), False, "-Infinity"),
        (0.3333333432674408, True, "0.33333334"),
        (1e6, True, "1e+06"),
    ],
)
def test_floats_as_postgresql_prints_them(value: float, single: bool, printed: str) -> None:
    assert text.float_text(value, single) == printed


def test_other_text_forms() -> None:
    assert text.date_text(-2440588) == "4714-11-24 BC"
    assert text.date_text(0) == "1970-01-01"
    assert text.timestamp_text(1_500_000, text.UTC) == "1970-01-01 00:00:01.5+00"
    kolkata, paris = text.Zone("Asia/Kolkata"), text.Zone("Europe/Paris")
    assert text.timestamp_text(1_500_000, kolkata) == "1970-01-01 05:30:01.5+05:30"
    assert text.timestamp_text(0, paris) == "1970-01-01 01:00:00+01"
    assert (
        text.timestamp_text(-5_000_000_000_000_000, paris) == "1811-07-23 15:16:01+00:09:21"
    )  # as PostgreSQL writes it
    assert text.timestamp_text(1_500_000, text.Zone("<-05>+05")) == "1969-12-31 19:00:01.5-05"
    assert text.interval_text(14, -3, -3_723_000_001) == "1 year 2 mons -3 days -01:02:03.000001"
    assert text.interval_text(0, 0, 0) == "00:00:00"
    assert text.numeric_text(Decimal("12.500000000000000000"), True) == "12.5"
    assert text.numeric_text(Decimal("100.000"), True) == "100"
    assert text.numeric_text(Decimal("100.00"), False) == "100.00"
    assert text.array_text(["a", None, "NULL", "", 'b,"c}', "x y"]) == (
        '{a,NULL,"NULL","","b,\\"c}","x y"}'
    )
    assert binary.parse_array('{a,NULL,"NULL","","b,\\"c}","x y"}') == [
        "a", None, "NULL", "", 'b,"c}', "x y",
    ]  # fmt: skip
    column = types.Column("n", 1700, -1, "numeric")
    for value in ("0", "-12.50", "123456789.000001", "NaN", "1e-7"):
        back = binary._numeric_from_binary(binary.scalar_binary(column.kind, value))
        assert back.is_nan() if value == "NaN" else back == Decimal(value), (value, back)


def test_postgresql_array_literals_and_casts_in_duckdb_words() -> None:
    from archiver.serve.dialect import in_duckdb, list_literals

    assert in_duckdb("SELECT 1 WHERE c = ANY ('{a,\"b c\",NULL}'::text[])") == (
        "SELECT 1 WHERE c = ANY (CAST(['a', 'b c', NULL] AS text[]))"
    )
    assert in_duckdb("SELECT 1 WHERE d = ANY ('{5,6}') AND s = 'paid'::public.order_status") == (
        "SELECT 1 WHERE d = ANY ([5, 6]) AND s = 'paid'"
    )
    assert in_duckdb("SELECT 'x::text[]', c::pg_catalog.bpchar, E'a\\'b'::text") == (
        "SELECT 'x::text[]', c::VARCHAR, E'a\\'b'::text"
    )
    assert list_literals(
        'SELECT 1 WHERE (tags = E\'{"a\\\\"b"}\') AND j = \'{"k": 1}\'', {"tags"}
    ) == ("SELECT 1 WHERE (tags = ['a\"b']) AND j = '{\"k\": 1}'")
