"""Every type archiver promises reads back exactly through `archiver serve`: as a
foreign table declared with the original types (postgres_fdw of the machine's
PostgreSQL), compared value by value with the original rows both ways, and as psycopg
and asyncpg read it (text and binary)."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import os
import struct
import subprocess
import uuid
from typing import Any

import asyncpg
import psycopg

from tests.support.alltypes import ALLTYPES_COLUMNS, difference, seed_alltypes
from tests.support.alltypes import ALLTYPES_ROWS as ROWS
from tests.support.harness import Harness
from tests.support.serve import attach, serving


def test_every_type_reads_back_exactly_through_the_foreign_table(h: Harness) -> None:
    seed_alltypes(h.url)
    total = ROWS + 4
    h.archive("--table", "alltypes", "--before", "2025-01-01", "--chunk-rows", "1000")
    assert h.value("SELECT count(*) FROM alltypes") == 0
    with serving(h) as served:
        attach(h, served, "alltypes")
        assert h.value("SELECT count(*) FROM archive.alltypes") == total
        # the comparison sees a difference (the live table is empty now)
        assert h.value(difference("snapshot", "alltypes")) == total
        assert h.value(difference("snapshot", "archive.alltypes")) == 0
        assert h.value(difference("archive.alltypes", "snapshot")) == 0
        # and every row once in the view, all of them archived
        assert h.value(difference("snapshot", "archive.alltypes_all")) == 0
        assert h.value(difference("archive.alltypes_all", "snapshot")) == 0
        # an enum and a domain compared in the remote query (cast to types serve lacks),
        # and IN lists (array literals)
        for where in (
            "c_enum = 'ok'",
            "c_enum IN ('ok', 'sad')",
            "c_domain IN (5, 6, 7)",
            "c_text_arr = ARRAY['a1', NULL, 'NULL', 'b,\"c}']",
            "c_uuid IS NOT NULL",
        ):
            mine = h.value(f"SELECT count(*) FROM archive.alltypes WHERE {where}")
            assert mine == h.value(f"SELECT count(*) FROM snapshot WHERE {where}"), where
            assert mine
        # the edge values by key, through a pushed-down lookup
        for key in (100001, 100002, 100003, 100004):
            same = h.value(
                "SELECT (SELECT row(a.*)::text FROM archive.alltypes a WHERE id = $1) = "
                "(SELECT row(s.*)::text FROM snapshot s WHERE id = $1)",
                key,
            )
            assert same, key

        # psycopg, text and binary: the values of the built-in types as Python has them
        # (the edge rows hold values Python has no type for: BC dates, 24:00:00)
        columns = (
            "c_int2, c_int4, c_int8, c_num, c_num_big, c_real, c_double, c_bool, c_text, "
            "c_varchar, c_char, c_bytea, c_ts, c_uuid, c_jsonb, c_int_arr, c_text_arr, "
            "c_date_arr, c_float_arr, c_uuid_arr"
        )
        names = [c.strip() for c in columns.split(",")]
        more = "c_date, c_tstz, c_interval, c_time"
        want = {
            r["id"]: r for r in h.sql(f"SELECT id, {columns}, {more} FROM snapshot WHERE id < 100")
        }
        for binary in (False, True):
            with psycopg.connect(served.dsn()) as conn, conn.cursor(binary=binary) as cur:
                cur.execute(f"SELECT id, {columns} FROM alltypes WHERE id < %s ORDER BY id", [100])
                got = cur.fetchall()
            assert len(got) == 99
            for row in got:
                original = want[row[0]]
                for name, value in zip(names, row[1:], strict=True):
                    assert _same(value, original[name]), (
                        binary,
                        row[0],
                        name,
                        value,
                        original[name],
                    )

        # asyncpg asks binary results of every type it has a codec for: each column of
        # the table, announced by its OID (an enum, a composite, a range, a domain as its
        # base type, inet, money, bit strings, point, multi-dimensional arrays), decoded
        # from serve's binary forms as from the source's own
        every = ", ".join(c for c in ALLTYPES_COLUMNS if c not in ("c_json", "c_xml"))

        async def read(url: str, table: str) -> Any:
            conn = await asyncpg.connect(url)
            try:
                return await conn.fetch(
                    f"SELECT {every}, c_json, c_xml FROM {table} "
                    "WHERE id BETWEEN $1::bigint AND $2::bigint ORDER BY id",
                    1,
                    99,
                )
            finally:
                await conn.close()

        rows = asyncio.run(
            read(served.dsn().replace(" ", "&").join(["postgresql://?", ""]), "alltypes")
        )
        originals = asyncio.run(read(h.url, "snapshot"))
        assert len(rows) == len(originals) == 99
        for row, original in zip(rows, originals, strict=True):
            for name in original.keys():  # noqa: SIM118 (a Record iterates its values)
                assert _same(row[name], original[name]), (
                    row["id"],
                    name,
                    row[name],
                    original[name],
                )

        # `*`, at any depth, is the table's own columns in its order, and carries its
        # PostgreSQL-only values (the edge rows' infinities, NaNs, arrays of more
        # dimensions) as psql shows the source's; _archiver_file and a companion are
        # read by name
        own = [
            r[0]
            for r in h.sql(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'snapshot'::regclass "
                "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
            )
        ]
        edges = "WHERE id > 100000 ORDER BY id"
        source = psql_rows(h.url, f"SELECT * FROM snapshot {edges}")
        for star in ("SELECT * FROM alltypes", "SELECT * FROM (SELECT a.* FROM alltypes a) s"):
            with psycopg.connect(served.dsn()) as conn:
                described = conn.execute(f"{star} LIMIT 0").description or []
            assert [d.name for d in described] == own, star
            mine = served.psql(f"{star} {edges}")
            assert mine.returncode == 0, mine.stderr
            assert mine.stdout == source, (star, mine.stdout, source)
        named = served.psql(
            "SELECT c_date, c_date__pg_text, _archiver_file > 0 FROM alltypes WHERE id = 100001"
        )
        assert named.stdout.strip() == "-infinity|-infinity|t", named  # c_date paired too


def psql_rows(url: str, sql: str) -> str:
    """psql's unaligned rows of `sql` on the source."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    args = ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", url, "-c", sql]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _same(got: object, want: object) -> bool:
    """One value as a client decoded it against the original as asyncpg reads it (a
    real as the same float4: psycopg reads its shortest text, asyncpg its double)."""
    if isinstance(want, float) and isinstance(got, float) and want == want:
        return got == want or struct.pack("f", got) == struct.pack("f", want)
    if isinstance(want, float) and isinstance(got, float) and want != want:
        return got != got
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(want, uuid.UUID):
        return str(got) == str(want)
    if isinstance(want, str) and isinstance(got, dict | list):
        import json

        return bool(got == json.loads(want))
    if isinstance(want, decimal.Decimal) and isinstance(got, decimal.Decimal):
        return got == want or (got.is_nan() and want.is_nan())
    if isinstance(want, dt.timedelta) and not isinstance(got, dt.timedelta):
        return False
    return bool(got == want)
