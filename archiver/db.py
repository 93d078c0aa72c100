"""Connections to the queue's PostgreSQL (asyncpg: small, many, async queries), the named
queries every queue and catalog statement comes from, and migrations."""

from __future__ import annotations

import asyncio
import re
import socket
from functools import cache
from importlib import resources

import asyncpg

from archiver.errors import ConfigError, DatabaseUnavailable, redact

# The top-level sql/ directory, installed as the package `archiver.migrations` (see
# pyproject.toml), so a wheel is a complete product.
MIGRATIONS_PACKAGE = "archiver.migrations"
_MIGRATION_LOCK = 0x61726368  # "arch": one migrate at a time, across processes
_MIGRATION_FILE = re.compile(r"(\d{3})_[\w-]+\.sql")


@cache
def _queries() -> dict[str, str]:
    found: dict[str, str] = {}
    for sql in resources.files("archiver.store").iterdir():
        if not sql.name.endswith(".sql"):
            continue
        parts = re.split(r"^-- name: (\w+)\s*$", sql.read_text(), flags=re.M)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"two queries named {name} in archiver/store")
            found[name] = body.strip()
    return found


def query(name: str) -> str:
    """A named query of archiver/store's .sql files (every query on archiver's own
    tables, each file owned by its store module: archiver.store)."""
    return _queries()[name]


# Errors meaning "the server is not there (right now)", as opposed to a bad query.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.CannotConnectNowError,
    asyncpg.InterfaceError,
    asyncpg.AdminShutdownError,
    asyncpg.ConnectionFailureError,
    # A pooled connection whose backend was terminated mid-operation can be left in a
    # corrupted protocol state ("cannot switch to state 12; another operation (2) is in
    # progress": asyncpg issue #1069, seen here after pg_terminate_backend).
    asyncpg.InternalClientError,
)


_application_name = "archiver"  # shows in pg_stat_activity (one-shot commands: interrupt)


def application_name() -> str:
    """The name this process's connections show in pg_stat_activity."""
    return _application_name


def set_application_name(name: str) -> None:
    global _application_name
    _application_name = name


# A flow that died without a word (a NAT or a load balancer forgot it) is noticed by
# the kernel: probes after 30 idle seconds, every 10, 3 unanswered ones end it; data sent
# and not acknowledged for 60 s ends it too (TCP_USER_TIMEOUT). libpq sessions (ADBC,
# psycopg) get the same from bulk.libpq_url.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT, USER_TIMEOUT_MS = 30, 10, 3, 60_000
# What a statement on a service's pooled session waits for its answer at most, unless
# the pool or the call says less (the console's pages: web.app.PAGE_SECONDS).
COMMAND_TIMEOUT = 300.0
# What a stop waits for a session's goodbye: past it, the socket is closed unsaid.
CLOSE_TIMEOUT = 2.0


def keep_alive(conn: asyncpg.Connection) -> None:
    """TCP keepalive and TCP_USER_TIMEOUT on an asyncpg session's socket (asyncpg has no
    setting for them: MagicStack/asyncpg#606; a Unix socket has none)."""
    transport = getattr(conn, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ("TCP_USER_TIMEOUT", USER_TIMEOUT_MS),
    ):
        if hasattr(socket, option):  # Linux names them all; macOS some
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


async def close_bounded(conn: asyncpg.Connection) -> None:
    """Close a session, saying goodbye for at most CLOSE_TIMEOUT seconds (a dead flow
    never answers it)."""
    try:
        await conn.close(timeout=CLOSE_TIMEOUT)
    except Exception:
        conn.terminate()


async def connect(url: str, *, timeout: float = 10.0) -> asyncpg.Connection:
    """One asyncpg connection; an unreachable server is a DatabaseUnavailable naming it."""
    try:
        conn = await asyncpg.connect(
            url,
            timeout=timeout,
            server_settings={"application_name": _application_name},
        )
        keep_alive(conn)
        return conn
    except (
        *CONNECTION_ERRORS,
        asyncpg.InvalidCatalogNameError,
        asyncpg.InvalidAuthorizationSpecificationError,
    ) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {redact(url)}: {exc}") from None


async def create_pool(
    url: str,
    *,
    size: int,
    timeout: float = 10.0,
    lazy: bool = False,
    command_timeout: float = COMMAND_TIMEOUT,
) -> asyncpg.Pool:
    """A pool of up to `size` connections, one made now unless `lazy` (then none until
    the first is asked for: a server away at the start is no error yet)."""
    try:
        pool = await asyncpg.create_pool(
            url,
            min_size=0 if lazy else 1,
            max_size=size,
            timeout=timeout,
            command_timeout=command_timeout,
            server_settings={"application_name": _application_name},
            init=_init_session,
            reset=_reset_session,
        )
    except (
        *CONNECTION_ERRORS,
        asyncpg.InvalidCatalogNameError,
        asyncpg.InvalidAuthorizationSpecificationError,
    ) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {redact(url)}: {exc}") from None
    assert pool is not None
    return pool


async def _init_session(conn: asyncpg.Connection) -> None:
    keep_alive(conn)


# What asyncpg's pool runs on a session given back (its own reset, which waits for the
# answer as long as it takes: a session on a dead flow would never come back).
_RESET = "SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL"
RESET_TIMEOUT = 10.0


async def _reset_session(conn: asyncpg.Connection) -> None:
    """A session given back to the pool, reset; no answer within RESET_TIMEOUT and the
    pool closes it (the next ask gets a new one)."""
    await conn.execute(_RESET, timeout=RESET_TIMEOUT)


async def close_pool(pool: asyncpg.Pool) -> None:
    """Close a pool, waiting for its sessions' goodbyes at most CLOSE_TIMEOUT seconds."""
    try:
        await asyncio.wait_for(pool.close(), CLOSE_TIMEOUT)
    except Exception:  # TimeoutError among them
        pool.terminate()


def migration_files() -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of every migration shipped with the package, in order."""
    files = []
    for entry in resources.files(MIGRATIONS_PACKAGE).iterdir():
        match = _MIGRATION_FILE.fullmatch(entry.name)
        if match:
            files.append((int(match.group(1)), entry.name, entry.read_text()))
    return sorted(files)


async def migrate(url: str) -> list[str]:
    """Apply the migrations in sql/ not yet applied; returns their file names.

    Safe to run twice, or twice at once: an advisory lock serialises migrators and the
    applied versions are recorded in the same transaction as the change.
    """
    files = migration_files()
    if not files:
        raise ConfigError(
            f"no migrations found in the installed package ({MIGRATIONS_PACKAGE}); "
            "reinstall archiver from a complete wheel"
        )
    conn = await connect(url)
    applied: list[str] = []
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            await conn.execute(
                """CREATE TABLE IF NOT EXISTS archiver_migrations (
                       version integer PRIMARY KEY,
                       name text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
            )
            done = {
                r["version"] for r in await conn.fetch("SELECT version FROM archiver_migrations")
            }
            for version, name, text in files:
                if version in done:
                    continue
                await conn.execute(text)
                await conn.execute(
                    "INSERT INTO archiver_migrations (version, name) VALUES ($1, $2)",
                    version,
                    name,
                )
                applied.append(name)
    finally:
        await conn.close()
    return applied
