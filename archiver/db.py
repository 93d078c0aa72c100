"""Connections to the queue's PostgreSQL (asyncpg: small, many, async queries), the named
queries every queue and catalog statement comes from, and migrations."""

from __future__ import annotations

import asyncio
import re
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


async def connect(url: str, *, timeout: float = 10.0) -> asyncpg.Connection:
    """One asyncpg connection; an unreachable server is a DatabaseUnavailable naming it."""
    try:
        return await asyncpg.connect(
            url, timeout=timeout, server_settings={"application_name": _application_name}
        )
    except (
        *CONNECTION_ERRORS,
        asyncpg.InvalidCatalogNameError,
        asyncpg.InvalidAuthorizationSpecificationError,
    ) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {redact(url)}: {exc}") from None


async def create_pool(
    url: str, *, size: int, timeout: float = 10.0, lazy: bool = False
) -> asyncpg.Pool:
    """A pool of up to `size` connections, one made now unless `lazy` (then none until
    the first is asked for: a server away at the start is no error yet)."""
    try:
        pool = await asyncpg.create_pool(
            url,
            min_size=0 if lazy else 1,
            max_size=size,
            timeout=timeout,
            command_timeout=300,
            server_settings={"application_name": _application_name},
        )
    except (
        *CONNECTION_ERRORS,
        asyncpg.InvalidCatalogNameError,
        asyncpg.InvalidAuthorizationSpecificationError,
    ) as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {redact(url)}: {exc}") from None
    assert pool is not None
    return pool


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
