"""`archiver serve` with the clients users have (psql, psycopg, asyncpg) and with the
input they should never send: writes, a wrong password, no TLS where it is required, a
malformed start-up packet, oversized and random messages, too many connections, an idle
client, a long statement. After each, the server still serves, and its log holds no
traceback."""

from __future__ import annotations

import asyncio
import gc
import random
import re
import socket
import struct
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
import pytest

from archiver.testing.reference import seed_orders
from tests.support import assert_refused, run_cli, wait_until
from tests.support.harness import Harness
from tests.support.serve import PASSWORD, Served, attach, serve_env, serving

ROWS = 6_000
BEFORE = "2024-12-29"


def archived(h: Harness) -> tuple[int, Any]:
    """(rows, sum of total) of the orders an archive before BEFORE holds."""
    row = h.sql(
        "SELECT count(*), sum(total) FROM untouched WHERE created_at < $1::text::timestamptz",
        BEFORE,
    )[0]
    return int(row[0]), row[1]


def seeded(h: Harness) -> None:
    seed_orders(h.url, ROWS)
    h.sql("CREATE TABLE untouched AS SELECT * FROM orders")
    h.archive("--table", "orders", "--before", BEFORE, "--chunk-rows", "1000")


def still_serving(served: Served) -> None:
    done = served.psql("SELECT 1")
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
    assert "Traceback" not in served.log.read_text()


def test_clients_read_the_archive_and_writes_are_refused(h: Harness) -> None:
    seeded(h)
    rows, total = archived(h)
    with serving(h) as served:
        # psql, simple protocol
        done = served.psql("SELECT count(*), sum(total) FROM orders", "SHOW server_version")
        assert done.returncode == 0, done.stderr
        said = done.stdout.splitlines()
        assert said[0] == f"{rows}|{total}" and re.fullmatch(
            r"15\.\d+ \(archiver serve\)", said[1]
        ), said

        # every write, and every way out of the archive, refused with PostgreSQL's SQLSTATE;
        # the same connection goes on
        for statement, state in (
            ("DELETE FROM orders", "25006"),
            ("INSERT INTO orders (id) VALUES (1)", "25006"),
            ("CREATE TABLE x AS SELECT 1", "25006"),
            ("COPY (SELECT 1) TO '/tmp/serve-copy'", "25006"),
            ("ATTACH '/tmp/x.db' AS x", "42501"),
            ("INSTALL httpfs", "42501"),
            ("LOAD 'httpfs'", "42501"),
            ("PRAGMA version", "42501"),
            ("SET threads = 1", "42501"),
            ("SET enable_external_access = true", "42501"),
            ("SELECT * FROM orders, read_csv('/etc/passwd')", "42501"),
            ("SELECT * FROM orders, read_text('/etc/hostname')", "42501"),
            ("SELECT nonsense FROM", "42601"),
            ("SELECT * FROM no_such_table", "42P01"),
        ):
            with psycopg.connect(served.dsn(), autocommit=True) as conn:
                with pytest.raises(psycopg.Error) as refused:
                    conn.execute(statement)
                assert refused.value.sqlstate == state, (statement, refused.value)
                assert len(str(refused.value).strip().splitlines()) == 1, str(refused.value)
                assert conn.execute("SELECT count(*) FROM orders").fetchone() == (rows,)
        assert not Path("/tmp/serve-copy").exists()
        # naming no archived table, a statement is PostgreSQL's (the definitions
        # database's, as a role that reads nothing else): DuckDB's functions are not there
        with psycopg.connect(served.dsn(), autocommit=True) as conn:
            for statement, state in (
                ("SELECT * FROM read_csv('/etc/passwd')", "42883"),
                ("SELECT pg_read_file('/etc/passwd')", "42501"),
                ("SELECT * FROM pg_catalog.pg_authid", "42501"),
                ("SELECT lo_import('/etc/passwd')", "42501"),
                ("SELECT 1 INTO scratch", "25006"),
            ):
                with pytest.raises(psycopg.Error) as refused:
                    conn.execute(statement)
                assert refused.value.sqlstate == state, (statement, refused.value)

        # a statement DuckDB cannot parse to JSON (its PIVOT) reads the tables as views
        with psycopg.connect(served.dsn(), autocommit=True) as conn:
            pivot = conn.execute(
                "PIVOT (SELECT status FROM orders) ON status IN ('paid', 'new') USING count(*)"
            ).fetchall()
        want = h.sql(
            "SELECT count(*) FILTER (WHERE status = 'paid'), count(*) FILTER (WHERE status = 'new') "
            "FROM untouched WHERE created_at < $1::text::timestamptz",
            BEFORE,
        )[0]
        assert pivot == [tuple(want)], pivot

        # psycopg: parameters (extended protocol), a transaction, a server-side cursor
        with psycopg.connect(served.dsn()) as conn:
            got = conn.execute(
                "SELECT id, total, status FROM orders WHERE id = %s", [ROWS - 1]
            ).fetchone()
            want = h.sql("SELECT id, total, status::text FROM untouched WHERE id = $1", ROWS - 1)
            assert got == tuple(want[0])
            with conn.cursor(name="big") as cur:
                cur.itersize = 500
                cur.execute("SELECT id FROM orders WHERE id > %s ORDER BY id", [100])
                ids = [r[0] for r in cur]
            assert ids == sorted(
                r[0]
                for r in h.sql(
                    "SELECT id FROM untouched WHERE created_at < $1::text::timestamptz AND id > 100",
                    BEFORE,
                )
            )
            # an error inside a transaction: aborted until ROLLBACK, then usable
            with pytest.raises(psycopg.Error):
                conn.execute("SELECT nope FROM orders")
            with pytest.raises(psycopg.errors.InFailedSqlTransaction):
                conn.execute("SELECT 1")
            conn.rollback()
            assert conn.execute("SELECT count(*) FROM orders").fetchone() == (rows,)

        # asyncpg: binary results, a prepared statement, a cursor read in portions
        async def read() -> tuple[int, list[int]]:
            conn = await asyncpg.connect(
                host="127.0.0.1", port=served.port, user="archiver", password=PASSWORD,
                database="archive", ssl=False,
            )  # fmt: skip
            try:
                count = await conn.fetchval("SELECT count(*) FROM orders")
                async with conn.transaction():
                    ids = [
                        r["id"]
                        async for r in conn.cursor(
                            "SELECT id FROM orders WHERE id <= $1::bigint ORDER BY id",
                            ROWS,
                            prefetch=37,
                        )
                    ]
                return count, ids
            finally:
                await conn.close()

        count, ids = asyncio.run(read())
        assert count == rows and len(ids) == rows and ids == sorted(ids)
        still_serving(served)


def test_bad_input_gets_an_error_and_the_server_serves_on(h: Harness) -> None:
    seeded(h)
    with serving(h, ARCHIVER_SERVE_MAX_CONNECTIONS="4") as served:
        # a wrong password, an unknown user
        wrong = served.psql("SELECT 1", password="not-the-password")
        assert wrong.returncode != 0
        assert 'password authentication failed for user "archiver"' in wrong.stderr
        other = served.psql("SELECT 1", user="postgres")
        assert other.returncode != 0 and "password authentication failed" in other.stderr
        assert PASSWORD not in served.log.read_text()
        still_serving(served)

        # malformed start-up packets and protocol messages: an error, the connection closed
        for packet in (
            b"\x00\x00\x00\x03",  # a length below the minimum
            struct.pack("!i", 1 << 30),  # a length over the limit
            struct.pack("!ii", 8, 1234),  # an unknown protocol
            struct.pack("!ii", 12, 196608) + b"user",  # parameters not terminated
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            assert _answer(served.port, packet) in (b"", b"E"), packet
            still_serving(served)
        # after a good start-up: truncated, oversized and random messages
        for body in (
            b"Q" + struct.pack("!i", 2),  # a length below 4
            b"Q" + struct.pack("!i", (1 << 20) + 100) + b"x" * 100,  # over the limit
            b"P" + struct.pack("!i", 6) + b"\x00\x00",  # a Parse cut short
            b"B" + struct.pack("!i", 9) + b"\x00\x00\xff\xff\x00",  # a Bind past its end
            b"Q" + struct.pack("!i", 8) + b"\xff\xfe\x00\x00",  # not UTF-8
            b"d" + struct.pack("!i", 4),  # CopyData outside a COPY
        ):
            answer = _after_login(served.port, body)
            assert answer.startswith(b"E"), (body, answer)
            still_serving(served)
        rng = random.Random(7)
        for _ in range(150):
            kind = rng.choice(b"PBDECSHQXFfdc")
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
            length = len(body) + 4 if rng.random() < 0.7 else rng.randrange(-5, 200)
            _after_login(served.port, bytes([kind]) + struct.pack("!i", length) + body, wait=0.05)
        still_serving(served)

        # at most four connections: a fifth is refused (53300) until one goes
        conns = [psycopg.connect(served.dsn()) for _ in range(4)]
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(served.dsn())
        conns.pop().close()
        conn = wait_until(lambda: _connected(served), timeout=30, what="a connection once one went")
        with conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        for conn in conns:
            conn.close()
        # a client that vanishes in the middle of a cursor leaves nothing behind
        for _ in range(3):
            gone = wait_until(lambda: _connected(served), timeout=30, what="a free connection")
            cur = gone.cursor(name="half")
            cur.execute("SELECT * FROM orders")
            assert cur.fetchmany(10)
            gone.pgconn.finish()  # the socket closed under the open cursor
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                del cur, gone
                gc.collect()
        time.sleep(0.5)
        still_serving(served)


def test_serve_stops_cleanly_while_clients_leave(h: Harness) -> None:
    """SIGTERM as clients disconnect (postgres_fdw's connection goes when its backend
    exits, just after the application's client closed): connections closing their
    sessions are cancelled too, and serve still stops with exit 0 and no traceback
    (serving checks it)."""
    seeded(h)

    async def read_and_leave(url: str) -> None:
        apps = [await asyncpg.connect(url) for _ in range(8)]
        every = "SELECT count(*) FROM archive.orders_all"
        assert set(await asyncio.gather(*(a.fetchval(every) for a in apps))) == {ROWS}
        await asyncio.gather(*(a.close() for a in apps))

    for _ in range(3):
        with serving(h) as served:
            attach(h, served, "orders")
            conns = [psycopg.connect(served.dsn(), autocommit=True) for _ in range(4)]
            for conn in conns:
                assert conn.execute("SELECT count(*) FROM orders").fetchone()
            asyncio.run(read_and_leave(h.url))
        for conn in conns:  # told serve is stopping (57P01), or the socket closed
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
            conn.close()


def test_timeouts_end_an_idle_client_and_a_long_statement(h: Harness) -> None:
    seeded(h)
    with serving(
        h, ARCHIVER_SERVE_IDLE_TIMEOUT="1", ARCHIVER_SERVE_STATEMENT_TIMEOUT="1"
    ) as served:
        with psycopg.connect(served.dsn(), autocommit=True) as conn:
            started = time.monotonic()
            with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
                conn.execute("SELECT sum(a.id * b.id * c.id) FROM orders a, orders b, orders c")
            assert time.monotonic() - started < 10
            started = time.monotonic()  # a statement the catalogs' PostgreSQL runs, too
            with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
                conn.execute("SELECT pg_sleep(30)")
            assert time.monotonic() - started < 10
            assert conn.execute("SELECT 1").fetchone() == (1,)
            time.sleep(2.5)
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
        still_serving(served)


def test_tls_when_configured_is_required(h: Harness, tmp_path: Path) -> None:
    cert, key = tmp_path / "serve.crt", tmp_path / "serve.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    seeded(h)
    rows, _ = archived(h)
    with serving(h, ARCHIVER_SERVE_TLS_CERT=str(cert), ARCHIVER_SERVE_TLS_KEY=str(key)) as served:
        done = served.psql("SELECT count(*) FROM orders", sslmode="require")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(rows)
        plain = served.psql("SELECT 1", sslmode="disable")
        assert plain.returncode != 0 and "requires TLS" in plain.stderr
        with psycopg.connect(served.dsn(sslmode="require")) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT count(*) FROM orders").fetchone() == (rows,)


def test_serve_refuses_to_start_unsafe(h: Harness, tmp_path: Path) -> None:
    no_password = {k: v for k, v in serve_env(h).items() if k != "ARCHIVER_SERVE_PASSWORD"}
    nobody = run_cli({**no_password, "ARCHIVER_SERVE_ROLES": "false"}, "serve")
    assert_refused(nobody, "nobody could sign in", code=1)
    env = serve_env(h)
    wide = run_cli(env, "serve", "--bind", "0.0.0.0:6999")
    assert_refused(wide, "refusing to listen on 0.0.0.0", "without TLS", code=1)
    half = run_cli({**env, "ARCHIVER_SERVE_TLS_CERT": str(tmp_path / "x.crt")}, "serve")
    assert_refused(half, "go together", code=1)
    bad = run_cli(env, "serve", "--bind", "localhost")
    assert_refused(bad, "expected HOST:PORT", code=1)


def _connected(served: Served) -> psycopg.Connection[Any] | None:
    """A new connection, or None while serve refuses it as one too many."""
    try:
        return psycopg.connect(served.dsn())
    except psycopg.OperationalError as exc:
        if "too many clients" not in str(exc):
            raise
        return None


def _answer(port: int, packet: bytes) -> bytes:
    """The first byte the server answers `packet` with (b"": it closed the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(packet)
        try:
            return s.recv(1)
        except (ConnectionResetError, TimeoutError):
            return b""


def _after_login(port: int, message: bytes, wait: float = 5.0) -> bytes:
    """What the server answers `message` with after a good start-up (SCRAM done with
    scramp's client), up to `wait` seconds."""
    from scramp import ScramClient

    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        params = b"user\x00archiver\x00database\x00archive\x00\x00"
        s.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        _read_until(s, b"R")  # AuthenticationSASL
        client = ScramClient(["SCRAM-SHA-256"], "archiver", PASSWORD)
        first = client.get_client_first().encode()
        body = b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first)) + first
        s.sendall(b"p" + struct.pack("!i", len(body) + 4) + body)
        client.set_server_first(_read_until(s, b"R")[4:].decode())
        final = client.get_client_final().encode()
        s.sendall(b"p" + struct.pack("!i", len(final) + 4) + final)
        while _read_message(s)[0] != b"Z":
            pass
        s.sendall(message)
        s.settimeout(wait)
        try:
            return s.recv(1)
        except (TimeoutError, ConnectionResetError):
            return b""


def _read_message(s: socket.socket) -> tuple[bytes, bytes]:
    head = _exactly(s, 5)
    (length,) = struct.unpack("!i", head[1:])
    return head[:1], _exactly(s, length - 4)


def _read_until(s: socket.socket, kind: bytes) -> bytes:
    while True:
        got, body = _read_message(s)
        if got == kind:
            return body
        assert got != b"E", body


def _exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "closed"
        data += chunk
    return data
