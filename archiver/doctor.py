"""`archiver doctor`: the checks a fresh deployment fails on, one line each. Every check
runs even when an earlier one failed (unless it needs what failed), so one run lists
everything to fix."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.metadata
import platform
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from archiver import db
from archiver.config import ConfigFile
from archiver.context import Context
from archiver.driver_check import driver_round_trip
from archiver.errors import ArchiverError, ConfigError, first_line
from archiver.grants import QUEUE_TABLES
from archiver.ident import TableName
from archiver.model import Mode
from archiver.operations.enqueue import checked_policies
from archiver.operations.inspect import aggregate_children
from archiver.storage.seam import put_file
from archiver.store import archive_files, publications
from archiver.text import counted, period, size

MAX_CLOCK_SKEW = 5.0  # seconds; leases use the database's clock, schedules the worker's


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


class Failed(ArchiverError):
    """A check's finding; its message is the line printed."""


async def _check(name: str, probe: Callable[[], Awaitable[str]]) -> Check:
    try:
        return Check(name, True, await probe())
    except Failed as exc:
        return Check(name, False, str(exc))
    except (ArchiverError, asyncpg.PostgresError, *db.CONNECTION_ERRORS) as exc:
        return Check(name, False, first_line(exc))


async def run_checks(ctx: Context, config: ConfigFile | None) -> list[Check]:
    """Every check, in the order a fresh deployment meets them."""

    checks = [await _check("queue database", lambda: _reachable(ctx, ctx.settings.database_url))]
    if not checks[0].ok:
        return checks
    checks.append(await _check("schema", lambda: _schema_current(ctx)))
    checks.append(await _check("queue privileges", lambda: _queue_privileges(ctx)))
    if not ctx.settings.same_database:
        checks.append(
            await _check(
                "source database", lambda: _reachable(ctx, ctx.settings.effective_source_url)
            )
        )
    checks.append(await _check("bulk driver", lambda: asyncio.to_thread(_bulk_driver, ctx)))
    checks.append(await _check("clock", lambda: _clock_skew(ctx)))
    policies: list[tuple[str, Mode]] = []

    async def valid_policies() -> str:
        if config is None:
            return "no config file (--config or ARCHIVER_CONFIG): nothing scheduled"
        checked = await checked_policies(ctx, config)
        aggregates = [table for policy, table in checked if policy.with_children]
        children = await aggregate_children(ctx, aggregates)
        for policy, table in checked:
            policies.append((table, policy.mode))
            policies.extend((child, policy.mode) for child in children.get(table, []))
        return f"{len(checked)} valid in {config.path}"

    checks.append(await _check("policies", valid_policies))
    for table, mode in policies:
        checks.append(await _check(f"privileges on {table}", _privileges_check(ctx, table, mode)))
    checks.append(await _check("storage", lambda: asyncio.to_thread(_storage_writable, ctx)))
    if checks[-1].ok:
        checks += await asyncio.to_thread(_storage_features, ctx)
    if checks[1].ok:  # the catalog's tables are there
        checks.append(await _check("readers' retention", lambda: _reader_retention(ctx)))
    if ctx.settings.iceberg:
        checks.append(await _check("iceberg", lambda: asyncio.to_thread(_iceberg, ctx)))
    if ctx.settings.serve_iceberg_rest:
        checks.append(
            await _check("iceberg REST catalog", lambda: asyncio.to_thread(_rest_scope, ctx))
        )
    return checks


def _rest_scope(ctx: Context) -> str:
    """What a SAS serve's REST catalog vends opens (a fact, never a failure)."""
    location = ctx.settings.storage_location()
    where = f"serve answers it on {ctx.settings.serve_iceberg_rest}"
    if location.scheme != "az":
        return f"{where}; file storage: it vends no credentials (engines read the paths)"
    from archiver.serve.vending import SLOTS, Vending

    try:
        policy, others = Vending(ctx.settings, ctx.settings.database_url).in_force()
    except Exception as exc:  # the container's policies unreadable: nothing can be vended
        raise Failed(f"{where}; the container's stored access policies cannot be read, "
                     f"so it can vend no SAS: {first_line(exc)}") from None  # fmt: skip
    if others >= SLOTS:
        raise Failed(f"{where}; the container {location.container} holds {others} stored "
                     "access policies of others, Azure's limit: it can vend no SAS (each "
                     "names one of archiver's, to be revocable)")  # fmt: skip
    named = f"names {policy}" if policy else "will name archiver-read-1 (none made yet)"
    return (
        f"{where}; a SAS it vends opens the whole container {location.container} (a "
        "flat-namespace account's SAS cannot be narrower), so it vends one only to a person "
        "who may read every table archived there; each SAS "
        f"{named}, a stored access policy it replaces to void them all when one holder no "
        f"longer may ({others} of Azure's {SLOTS} policies there are others'; "
        "docs/iceberg-rest.md)"
    )


async def _reader_retention(ctx: Context) -> str:
    """How long what a change took out stays for readers, and what it holds now."""
    async with ctx.catalog() as conn:
        files, nbytes = await archive_files.kept_for_readers(
            conn, str(ctx.settings.storage_location())
        )
    return (
        f"{period(ctx.settings.reader_retention)} (ARCHIVER_READER_RETENTION): a restore's, "
        "compaction's, tier change's or purge's files stay readable that long after leaving "
        f"the Delta log; {counted(files, 'file')} ({size(nbytes)}) kept now"
    )


def _iceberg(ctx: Context) -> str:
    """The Iceberg catalog opens, and how far each table's Iceberg table is behind its
    Delta log (a lag is no failure: the next publication catches up)."""
    try:
        from archiver.iceberg.catalog import open_catalog
    except ImportError as exc:
        raise ConfigError(
            f"ARCHIVER_ICEBERG=true needs the iceberg extra (pip install 'archiver[iceberg]'): {exc}"
        ) from None
    catalog = ctx.iceberg(open_catalog)
    with ctx.bulk(ctx.settings.database_url) as conn:
        mirrors = publications.iceberg_mirrors(conn, str(ctx.storage().location))
    behind = [f"{m.table} {counted(m.lag, 'publication')} behind" for m in mirrors if m.lag]
    listed = sum(len(catalog.list_tables(ns)) for ns in catalog.list_namespaces())
    said = f"catalog {ctx.settings.iceberg_catalog}: {counted(listed, 'table')}"
    return (
        f"{said}; {', '.join(behind)} its Delta log" if behind else f"{said}, each at its Delta log"
    )


def _storage_features(ctx: Context) -> list[Check]:
    """What the container keeps and protects, and what that means for purge and erase
    (archiver.storage.features): facts, never failures."""
    checks = []
    for what, meaning in ctx.storage().features():
        name, _, found = what.partition(": ")
        checks.append(Check(f"storage {name}", True, f"{found}; {meaning}"))
    return checks


def _privileges_check(ctx: Context, table: str, mode: Mode) -> Callable[[], Awaitable[str]]:
    return lambda: _table_privileges(ctx, TableName.stored(table).quoted, mode)


async def _reachable(ctx: Context, url: str) -> str:
    async with ctx.connection(url) as conn:
        version = await conn.fetchval("SHOW server_version")
        user = await conn.fetchval("SELECT current_user")
    return f"PostgreSQL {version}, as {user}"


# Schemas holding archiver's tables (a migrate ran there) that the search_path leaves out.
_SCHEMAS_OFF_THE_PATH = """
SELECT string_agg(quote_ident(n.nspname), ', ' ORDER BY n.nspname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'archiver_migrations' AND c.relkind = 'r'
"""


async def _schema_current(ctx: Context) -> str:
    expected = [name for _, name, _ in db.migration_files()]
    async with ctx.catalog() as conn:
        if await conn.fetchval("SELECT to_regclass('archiver_migrations')") is None:
            elsewhere = await conn.fetchval(_SCHEMAS_OFF_THE_PATH)
            if elsewhere:
                raise Failed(
                    f"archiver's tables are in schema {elsewhere}, which is not on this "
                    f"role's search_path ({await conn.fetchval('SHOW search_path')}): add "
                    'it, e.g. ALTER ROLE … SET search_path = "$user", ' + elsewhere
                )
            raise Failed("no archiver schema: run `archiver migrate` as the schema's owner")
        applied = {r["name"] for r in await conn.fetch("SELECT name FROM archiver_migrations")}
    missing = [name for name in expected if name not in applied]
    if missing:
        raise Failed(f"not applied: {', '.join(missing)}; run `archiver migrate` as the owner")
    return f"current ({len(expected)} migrations)"


async def _queue_privileges(ctx: Context) -> str:
    missing = []
    async with ctx.catalog() as conn:
        for table, privileges, _ in QUEUE_TABLES:
            for privilege in privileges.split(", "):
                if not await conn.fetchval(
                    "SELECT has_table_privilege(to_regclass($1), $2)", table, privilege
                ):
                    missing.append(f"{privilege} on {table}")
    if missing:
        raise Failed(f"missing {', '.join(missing)} (see `archiver grants`)")
    return "every table the queue uses"


# Schemas without USAGE for the role that hold the (base) type of one of the table's key
# or foreign-key columns: archiver casts to such types and compares with their operators
# by schema (source.Column.op, references.ForeignKey.equals).
_TYPE_SCHEMAS_WITHOUT_USAGE = """
SELECT string_agg(DISTINCT quote_ident(n.nspname), ', ')
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
JOIN pg_namespace n ON n.oid = COALESCE(b.typnamespace, t.typnamespace)
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname <> 'pg_catalog' AND NOT has_schema_privilege(n.oid, 'USAGE')
  AND (EXISTS (SELECT FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisunique
                                        AND a.attnum = ANY (i.indkey::int2[]))
       OR EXISTS (SELECT FROM pg_constraint c WHERE c.contype = 'f'
                  AND ((c.conrelid = a.attrelid AND a.attnum = ANY (c.conkey))
                       OR (c.confrelid = a.attrelid AND a.attnum = ANY (c.confkey)))))
"""


async def _table_privileges(ctx: Context, table: str, mode: Mode) -> str:
    needed = ["SELECT"] + (["DELETE"] if mode == Mode.MOVE else [])
    async with ctx.source() as conn:
        missing = [
            p
            for p in needed
            if not await conn.fetchval("SELECT has_table_privilege($1::regclass, $2)", table, p)
        ]
        if mode == Mode.MOVE and not await conn.fetchval(
            "SELECT has_any_column_privilege($1::regclass, 'UPDATE')", table
        ):
            missing.append("UPDATE on its key (row locks)")
        schemas = await conn.fetchval(_TYPE_SCHEMAS_WITHOUT_USAGE, table)
        if schemas:
            missing.append(f"USAGE on schema {schemas} (its key's or foreign keys' types)")
    if missing:
        raise Failed(f"missing {', '.join(missing)} for {mode} (see `archiver grants`)")
    return f"enough to {mode}"


# adbc-driver-postgresql wheels whose Linux x86-64 library is compiled without optimisation
# (functions keep their stack frames; `__bswap_32` is a call): decoding rows costs ~3x the
# CPU of a Release build of the same source (docs/performance.md).
UNOPTIMISED_WHEELS = ((1, 9, 0), (1, 13, 0))


def _unoptimised_wheel(version: str) -> bool:
    released = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
    first, last = UNOPTIMISED_WHEELS
    on = (sys.platform, platform.machine()) == ("linux", "x86_64")
    return on and first <= released <= last


def _bulk_driver(ctx: Context) -> str:
    """The ADBC connection a worker reads rows on, through the library it will load, and
    a restore's round trip through it."""
    with ctx.bulk(ctx.settings.effective_source_url) as conn:
        changed = driver_round_trip(conn)
    if ctx.settings.adbc_driver:
        library, unoptimised = f"{ctx.settings.adbc_driver} (ARCHIVER_ADBC_DRIVER)", False
    else:
        version = importlib.metadata.version("adbc-driver-postgresql")
        library = f"adbc-driver-postgresql {version}, the wheel's library"
        unoptimised = _unoptimised_wheel(version)
    if changed:
        raise Failed(
            f"{library} does not write back what it reads, so a restore would change "
            f"values: {'; '.join(changed)}"
        )
    if changed is None:
        library += " (round trip not checked: no TEMPORARY privilege, which restore needs)"
    if unoptimised:
        library += (
            ", built without optimisation: a Release build decodes rows with a third of "
            "the CPU (docs/performance.md: ARCHIVER_ADBC_DRIVER)"
        )
    return library


async def _clock_skew(ctx: Context) -> str:
    async with ctx.catalog() as conn:
        before = time.time()
        server: dt.datetime = await conn.fetchval("SELECT clock_timestamp()")
        after = time.time()
    skew = server.timestamp() - (before + after) / 2
    if abs(skew) > MAX_CLOCK_SKEW:
        raise Failed(
            f"this machine's clock is {skew:+.1f} s off the database's (more than "
            f"{MAX_CLOCK_SKEW:g} s): policy slots would fire early or late; run NTP"
        )
    return f"{skew:+.3f} s from the database"


def _storage_writable(ctx: Context) -> str:
    storage = ctx.storage()
    storage.check()
    name = storage.object_name(f".archiver-doctor-{uuid.uuid4().hex[:12]}")
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe"
        probe.write_bytes(b"archiver doctor\n")
        put_file(storage, name, probe)
    storage.delete(name)
    auth = ""
    if storage.location.scheme == "az":
        auth = (
            ", auth: connection string"
            if ctx.settings.azure_connection_string
            else ", auth: DefaultAzureCredential"
        )
    return f"{storage.location} writable{auth}"
