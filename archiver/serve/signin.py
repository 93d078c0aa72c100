"""People sign in to serve as the login roles of the catalog's server, with their own
passwords, as PgBouncer's `auth_query` does it: a SECURITY DEFINER function that only
archiver's role may run returns a role's SCRAM verifier (never a password: PostgreSQL
stores none), serve runs SCRAM-SHA-256 with the client against it, and the client's
proof yields the client's key, with which serve opens the person's own session on the
definitions database (libpq's `scram_client_key`, SCRAM pass-through): every catalog
statement and every privilege check then runs as that person, and PostgreSQL refuses
what it would refuse them (CONNECT not granted among them).

The function lives in the queue database, schema `archiver_auth` (AUTH_SQL). Serve
makes it where archiver's role is a superuser; elsewhere an administrator runs AUTH_SQL
once (docs/access.md), and until then serve signs in its one configured user only."""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import threading
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq.abc import PGconn

from archiver.config import Settings
from archiver.errors import first_line
from archiver.ident import quote_ident
from archiver.serve import wire
from archiver.serve.audit import Read, ReadAudit
from archiver.serve.reader import Place
from archiver.serve.scram import Exchange, ScramError, Verifier
from archiver.serve.watchdog import WATCHDOG

log = logging.getLogger(__name__)

SCRAM = "SCRAM-SHA-256"

FUNCTION = "archiver_auth.role_secret(text)"
CONNECT_SECONDS = 5  # a sign-in's sessions: within serve's AUTH_SECONDS for the whole start-up

# {role}: archiver's own role, the only one that may run the function
AUTH_SQL = """\
CREATE SCHEMA IF NOT EXISTS archiver_auth;
REVOKE ALL ON SCHEMA archiver_auth FROM PUBLIC;
CREATE OR REPLACE FUNCTION archiver_auth.role_secret(role_name text)
  RETURNS TABLE (secret text, can_login boolean, valid_until timestamptz)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
  AS $$ SELECT rolpassword, rolcanlogin, rolvaliduntil FROM pg_catalog.pg_authid
        WHERE rolname = role_name $$;
REVOKE ALL ON FUNCTION archiver_auth.role_secret(text) FROM PUBLIC;
GRANT USAGE ON SCHEMA archiver_auth TO {role};
GRANT EXECUTE ON FUNCTION archiver_auth.role_secret(text) TO {role};
"""


class SignInRefused(Exception):
    """A person who proved their password may still not sign in: `sqlstate` and the line
    PostgreSQL would say."""

    def __init__(self, sqlstate: str, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.detail = detail


@dataclass(frozen=True)
class Role:
    """What the function says of a role: a verifier to check the password against (a
    mock one where the role cannot sign in by password: absent, no SCRAM secret,
    expired), and whether it may log in at all (asked after the password, as PostgreSQL
    asks it)."""

    verifier: Verifier
    can_login: bool


class SignIn:
    """The catalog server's roles, looked up through the auth function, and their own
    sessions on the definitions database."""

    def __init__(self, place: Place, settings: Settings, audit: ReadAudit) -> None:
        self.place = place
        self.audit = audit
        self.configured_user = settings.serve_user
        self.configured = Verifier.of(settings.serve_password) if settings.serve_password else None
        self.enabled = False
        self._mock_key = secrets.token_bytes(32)
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """The auth function found, or made where archiver's role may; otherwise one
        line saying what an administrator runs, and only the configured user signs in."""
        try:
            with psycopg.connect(self.place.admin, autocommit=True) as conn:
                found = conn.execute("SELECT to_regprocedure(%s) IS NOT NULL", [FUNCTION])
                if not found.fetchone()[0]:  # type: ignore[index]
                    me = conn.execute("SELECT current_user, rolsuper FROM pg_roles "
                                      "WHERE rolname = current_user").fetchone()  # fmt: skip
                    assert me is not None
                    if not me[1]:
                        log.warning(
                            "serve: people cannot sign in as their own roles until an "
                            "administrator runs the auth function's SQL in the catalog "
                            "database (archiver serve --auth-sql prints it); meanwhile "
                            "only the configured user signs in"
                        )
                        return
                    conn.execute(auth_sql(str(me[0])))
        except psycopg.Error as exc:
            log.warning("serve: the auth function could not be checked: %s", first_line(exc))
            return
        self.enabled = True

    def role(self, name: str) -> Role:
        """The role `name` as the auth function gives it (a mock where it cannot sign
        in by password: the caller cannot tell which)."""
        mock = Role(Verifier.mock(self._mock_key, name), False)
        if not self.enabled or not name:
            return mock
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(
                        self.place.admin, autocommit=True, connect_timeout=CONNECT_SECONDS
                    )
                fd = self._conn.pgconn.socket
                with WATCHDOG.watch(fd, CONNECT_SECONDS, "the auth function"):
                    row = self._conn.execute(
                        "SELECT secret, can_login, valid_until FROM archiver_auth.role_secret(%s)",
                        [name],
                    ).fetchone()
            except psycopg.Error as exc:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                log.warning("serve: the auth function failed: %s", first_line(exc))
                return mock
        if row is None:
            return mock
        secret, can_login, valid_until = row
        verifier = Verifier.parse(secret)
        if verifier is None or (valid_until is not None and valid_until <= datetime.now(UTC)):
            return mock  # PostgreSQL says no more of an expired password either
        return Role(verifier, bool(can_login))

    async def authenticate(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        user: str,
        params: dict[str, str],
        peer: str | None,
        executor: Executor,
    ) -> PGconn | bool | None:
        """SCRAM-SHA-256 against the configured user's password, or the role's own: True
        for the configured user, a person's own session on the definitions database for
        a role, None when refused (the client told as PostgreSQL tells it: the same line
        whether the role exists or not; the refusal in the read audit)."""
        loop = asyncio.get_running_loop()
        configured = self.configured is not None and secrets.compare_digest(
            user.encode(), self.configured_user.encode()
        )
        if configured:
            assert self.configured is not None
            role = Role(self.configured, True)
        else:
            role = await loop.run_in_executor(executor, self.role, user)
        refused = Read(user, None, peer, params.get("application_name"), None)
        exchanged = await password_exchange(reader, writer, user, role.verifier)
        if exchanged is None:
            self.audit.finish(refused, "28P01")
            return None
        exchange, final = exchanged
        if not configured:
            try:
                if not role.can_login:
                    raise SignInRefused("28000", f'role "{user}" is not permitted to log in')
                database = params.get("database") or user
                conn = await loop.run_in_executor(
                    executor, self.session_of, user, role.verifier, exchange.client_key, database
                )
            except SignInRefused as exc:
                writer.write(wire.error(exc.sqlstate, str(exc), "FATAL", detail=exc.detail))
                self.audit.finish(refused, exc.sqlstate)
                log.warning("serve: %s refused: %s", user, exc)
                return None
        writer.write(wire.authentication(12, final.encode()))
        writer.write(wire.authentication(0))
        return True if configured else conn

    def session_of(self, name: str, verifier: Verifier, client_key: bytes, database: str) -> PGconn:
        """The person's own session on the definitions database, signed in with their
        client key (SCRAM pass-through): PostgreSQL's refusal where it refuses them."""

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        options = conninfo_to_dict(self.place.conninfo())
        options.update(
            user=name,
            connect_timeout=CONNECT_SECONDS,
            scram_client_key=b64(client_key),
            scram_server_key=b64(verifier.server_key),
        )
        options.pop("password", None)
        conn = pq.PGconn.connect(
            make_conninfo("", **{k: str(v) for k, v in options.items()}).encode()
        )
        if conn.status == pq.ConnStatus.OK:
            return conn
        said = conn.get_error_message()
        message = (said.decode(errors="replace") if isinstance(said, bytes) else said).strip()
        conn.finish()
        if "CONNECT privilege" in message or "permission denied for database" in message:
            raise SignInRefused(
                "42501",
                f'permission denied for database "{database}"',
                "User does not have CONNECT privilege.",
            )
        log.warning("serve: %s could not open a session on the definitions database: %s",
                    name, message.splitlines()[-1] if message else "")  # fmt: skip
        raise SignInRefused("28000", f'role "{name}" could not sign in: ask an administrator')

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def auth_sql(role: str) -> str:
    """AUTH_SQL for archiver's role `role`, its name quoted."""
    return AUTH_SQL.format(role=quote_ident(role))


async def password_exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, user: str, verifier: Verifier
) -> tuple[Exchange, str] | None:
    """SCRAM-SHA-256 with the client against `verifier`: the exchange (its client key
    recovered) and the server's final message, or None when the client was refused
    (told as PostgreSQL tells it: the same line whatever was wrong)."""
    writer.write(wire.authentication(10, SCRAM.encode() + b"\x00\x00"))
    await writer.drain()
    failed = wire.error("28P01", f'password authentication failed for user "{user}"', "FATAL")
    message = await wire.read_message(reader, 8192)
    if message.kind != b"p":
        raise wire.ProtocolError("expected a password message")
    read = wire.Reader(message.body)
    mechanism = read.string()
    size = read.int32()
    first = read.take(size) if size >= 0 else b""
    if mechanism != SCRAM:
        writer.write(wire.error("28000", f"unsupported SASL mechanism {mechanism!r}", "FATAL"))
        return None
    exchange = Exchange(verifier)
    try:
        writer.write(wire.authentication(11, exchange.first(first.decode()).encode()))
        await writer.drain()
        message = await wire.read_message(reader, 8192)
        if message.kind != b"p":
            raise wire.ProtocolError("expected a SASL response")
        final = exchange.final(message.body.decode())
    except (ScramError, UnicodeDecodeError) as exc:
        writer.write(failed)
        log.warning("serve: password authentication failed for user %r: %s", user, exc)
        return None
    return exchange, final
