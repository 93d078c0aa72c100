"""Settings, read once from the environment, cast explicitly; a bad value names its key."""

from __future__ import annotations

import ctypes
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from archiver.errors import ConfigError, InputError, redact
from archiver.limits import size_bytes

N = TypeVar("N", int, float)


@dataclass(frozen=True)
class StorageLocation:
    """Where Parquet files go: `az://container/prefix` or `file:///dir`."""

    scheme: str  # "az" or "file"
    container: str  # Azure container, or the local directory
    prefix: str

    @classmethod
    def parse(cls, url: str, key: str = "ARCHIVER_STORAGE_URL") -> StorageLocation:
        parts = urlsplit(url)
        if parts.scheme == "az":
            if not re.fullmatch(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]", parts.netloc):
                raise ConfigError(
                    f"{key}: {parts.netloc!r} is not a valid Azure container name "
                    "(3-63 lowercase letters, digits and single hyphens)"
                )
            return cls("az", parts.netloc, parts.path.strip("/"))
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise ConfigError(f"{key}: expected file:///absolute/dir, got {url!r}")
            return cls("file", parts.path.rstrip("/") or "/", "")
        raise ConfigError(
            f"{key}: expected az://<container>/<prefix> or file:///<dir>, got {url!r}"
        )

    def __str__(self) -> str:
        if self.scheme == "az":
            return f"az://{self.container}/{self.prefix}".rstrip("/")
        return f"file://{self.container}"

    def reader_uri(self, name: str) -> str:
        """Where DuckDB reads stored object `name` (a catalogued file's path)."""
        if self.scheme == "az":
            return f"az://{self.container}/{name}"
        return f"{self.container.rstrip('/')}/{name}"


@dataclass(frozen=True)
class Spec:
    """How one setting is read: its variable, how its text is checked and cast, its
    default as docs/configuration.md shows it, and what it means."""

    variable: str
    meaning: str
    shown_default: str
    cast: Callable[[str, str], Any]  # (variable, text) -> value, or ConfigError
    in_file: bool = True  # a config file's [settings] may set it
    alias: str | None = None  # a second variable read when the first is unset


# Azure's access tiers: new files are written in one of the first three; Archive is
# offline (a file reaches it only through `archiver tier`, once verified)
WRITTEN_TIERS = ("Hot", "Cool", "Cold")
ARCHIVE_TIER = "Archive"


def _setting(
    default: Any,
    variable: str,
    meaning: str,
    cast: Callable[[str, str], Any],
    *,
    shown: str | None = None,
    in_file: bool = True,
    alias: str | None = None,
) -> Any:
    spec = Spec(
        variable,
        meaning,
        shown
        if shown is not None
        else f"{default:g}"
        if isinstance(default, float)
        else str(default),
        cast,
        in_file,
        alias,
    )
    return field(default=default, metadata={"spec": spec})


def _text(_variable: str, raw: str) -> str:
    return raw


def _flag(variable: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{variable}: expected true or false, got {raw!r}")


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(variable: str, raw: str) -> tuple[IPNetwork, ...]:
    """`10.0.0.7, 10.1.0.0/16, ::1`: addresses or networks."""
    out = []
    for part in filter(None, (p.strip() for p in raw.split(","))):
        try:
            out.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(f"{variable}: {part!r} is not an IP address or network") from None
    return tuple(out)


def _header_name(variable: str, raw: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", raw):
        raise ConfigError(f"{variable}: expected an HTTP header name, got {raw[:70]!r}")
    return raw.lower()


def sub_path(variable: str, raw: str) -> str:
    path = raw.rstrip("/")
    dots = {".", ".."} & set(path.split("/"))
    if path and (dots or not re.fullmatch(r"(/[A-Za-z0-9._~-]+)+", path)):
        raise ConfigError(f"{variable}: expected a path such as /archiver, got {raw[:70]!r}")
    return path


def _size(variable: str, raw: str) -> int:
    """A size in bytes: a number, or as PostgreSQL writes one (`128MB`)."""
    if raw.strip().isdigit():
        return int(raw)
    try:
        return size_bytes(raw, variable)
    except InputError as exc:
        raise ConfigError(str(exc)) from None


def _postgres_url(variable: str, raw: str) -> str:
    if urlsplit(raw).scheme not in ("postgres", "postgresql"):
        raise ConfigError(f"{variable}: expected a postgresql:// URL, got {redact(raw)!r}")
    return raw


def check_adbc_driver(variable: str, raw: str) -> str:
    """A shared library the ADBC driver manager can load: it exports AdbcDriverInit."""
    path = Path(raw)
    if not path.is_absolute() or not path.is_file():
        raise ConfigError(f"{variable}: expected the absolute path of a file, got {raw!r}")
    try:
        library = ctypes.CDLL(raw)
    except OSError as exc:
        raise ConfigError(f"{variable}: cannot load {raw!r}: {exc}") from None
    if not hasattr(library, "AdbcDriverInit"):
        raise ConfigError(f"{variable}: {raw!r} is not an ADBC driver (no AdbcDriverInit)")
    return raw


def _number(cast: type[N], minimum: N, maximum: N | None = None) -> Callable[[str, str], N]:
    def parse(variable: str, raw: str) -> N:
        try:
            value = cast(raw)
        except ValueError:
            raise ConfigError(f"{variable}: expected a {cast.__name__}, got {raw!r}") from None
        if value < minimum:
            raise ConfigError(f"{variable}: must be at least {minimum}, got {raw!r}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{variable}: must be at most {maximum}, got {raw!r}")
        return value

    return parse


def _choice(*choices: str) -> Callable[[str, str], str]:
    def parse(variable: str, raw: str) -> str:
        if raw not in choices:
            raise ConfigError(f"{variable}: expected one of {', '.join(choices)}, got {raw!r}")
        return raw

    return parse


def _catalog_name(variable: str, raw: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", raw):
        raise ConfigError(f"{variable}: expected a name of letters, digits and _, got {raw[:70]!r}")
    return raw


def connection_string_parts(text: str) -> dict[str, str]:
    """An Azure connection string's `Key=value;` parts (AccountKey values hold `=`)."""
    return dict(item.split("=", 1) for item in text.split(";") if "=" in item)


REQUIRED = ""  # the default of a setting that must be given


@dataclass(frozen=True)
class Settings:
    """Everything archiver reads from its environment, validated. Each setting is declared
    here once; parsing, config-file keys, error messages and the table in docs/configuration.md derive from it."""

    database_url: str = _setting(
        REQUIRED,
        "ARCHIVER_DATABASE_URL",
        "queue database, `postgresql://…`",
        _postgres_url,
        shown="required",
        alias="DATABASE_URL",
    )
    source_url: str | None = _setting(
        None,
        "ARCHIVER_SOURCE_URL",
        "the application's database",
        _postgres_url,
        shown="the queue database",
    )
    storage_url: str | None = _setting(
        None,
        "ARCHIVER_STORAGE_URL",
        "`az://<container>/<prefix>` or `file:///<dir>` (archiver makes the container, or the last directory of the path: its parent must exist)",
        _text,
        shown="required for enqueue/worker",
    )
    azure_connection_string: str | None = _setting(
        None, "AZURE_STORAGE_CONNECTION_STRING", "Azure connection string", _text, shown="—"
    )
    azure_account_url: str | None = _setting(
        None,
        "AZURE_STORAGE_ACCOUNT_URL",
        "account URL, authenticated with `DefaultAzureCredential` (managed identity, `az login`, environment credentials)",
        _text,
        shown="—",
    )
    poll_interval: float = _setting(
        2.0,
        "ARCHIVER_POLL_INTERVAL",
        "seconds between polls when no NOTIFY arrives",
        _number(float, 0.05),
    )
    lease_seconds: float = _setting(
        60.0,
        "ARCHIVER_LEASE_SECONDS",
        "a running job whose heartbeat is older is requeued",
        _number(float, 1.0),
    )
    heartbeat_seconds: float = _setting(
        0.0,
        "ARCHIVER_HEARTBEAT_SECONDS",
        "how often a worker renews its leases",
        _number(float, 0.05),
        shown="min(5, lease/4)",
    )
    shutdown_deadline: float = _setting(
        30.0,
        "ARCHIVER_SHUTDOWN_DEADLINE",
        "seconds a stopping worker lets its chunk finish",
        _number(float, 0.0),
    )
    retention_days: float = _setting(
        30.0,
        "ARCHIVER_RETENTION_DAYS",
        "finished jobs, and finished compactions in the ledger, older than this are pruned (files stay catalogued; restores, erasures and purges stay in the ledger)",
        _number(float, 0.0),
    )
    upload_concurrency: int = _setting(
        4,
        "ARCHIVER_UPLOAD_CONCURRENCY",
        "Azure blocks in flight per file, each 8 MB of memory while the file is written",
        _number(int, 1),
    )
    copy_connections: int = _setting(
        1,
        "ARCHIVER_COPY_CONNECTIONS",
        "connections a copy job reads on; 2 reads two chunks at a time side by side on one snapshot: faster where the worker has cores to spare, more peak memory (see [Performance](performance.md))",
        _number(int, 1, 2),
    )
    backlog_connections: int = _setting(
        2,
        "ARCHIVER_BACKLOG_CONNECTIONS",
        "connections a job taking most of its table reads on (the backlog plan: the table by ranges of pages, a file each, decoded and encoded on a core each; see [Performance](performance.md#the-backlog-plan)); below 2, every job reads chunks in key order",
        _number(int, 1, 16),
    )
    backlog_min_rows: int = _setting(
        100_000,
        "ARCHIVER_BACKLOG_MIN_ROWS",
        "the fewest rows older than the cutoff (the planner's estimate) a job takes the backlog plan for, when they are at least half its table",
        _number(int, 1),
    )
    delta: bool = _setting(
        True,
        "ARCHIVER_DELTA",
        "publish the files of each move as a Delta Lake table at their table's folder (`<prefix>/<schema>.<table>/_delta_log/`), which Fabric, Databricks, Synapse, Spark and DuckDB read; `false` keeps plain Parquet files (`enqueue --no-delta` for one job; see [Delta Lake](delta.md))",
        _flag,
        shown="true",
    )
    iceberg: bool = _setting(
        False,
        "ARCHIVER_ICEBERG",
        "also publish each Delta table as an Iceberg (v2) table from the same files, its metadata beside `_delta_log/` and its catalog in the queue database (the JDBC catalog's tables), for Snowflake, Trino, Spark, Flink, pyiceberg and DuckDB; needs `ARCHIVER_DELTA` and the `iceberg` extra (see [Iceberg](iceberg.md))",
        _flag,
        shown="false",
    )
    reader_retention: float = _setting(
        604800.0,
        "ARCHIVER_READER_RETENTION",
        "seconds a file a compaction, restore, tier change or purge took out of a table stays readable where it is after the publication that removed it from the Delta log, and how long an older Iceberg snapshot is kept: time travel within it, and a read planned before the change, find every file (Delta's `deletedFileRetentionDuration`, 7 days, by default; an erasure's files and the history before it go at once; see [Lifecycle](lifecycle.md#readers-retention))",
        _number(float, 0.0),
        alias="ARCHIVER_ICEBERG_SNAPSHOT_RETENTION",
    )
    iceberg_catalog: str = _setting(
        "archive",
        "ARCHIVER_ICEBERG_CATALOG",
        "the Iceberg catalog's name: the `catalog_name` of its rows in `iceberg_tables`, the name an engine's JDBC catalog is given",
        _catalog_name,
    )
    publish_wait: float = _setting(
        120.0,
        "ARCHIVER_PUBLISH_WAIT",
        "seconds a command that changed the archive (restore, erase, purge, rehydrate) waits for a table's publisher lock while a worker publishes it, before it leaves its publication to the workers and says so (see [Delta Lake](delta.md))",
        _number(float, 0.0),
    )
    access_tier: str | None = _setting(
        None,
        "ARCHIVER_ACCESS_TIER",
        "the Azure access tier new files are written in: `Hot`, `Cool` or `Cold` (a policy's `tier` and `enqueue --tier` choose per job); `Archive` only through `archiver tier`, for files already verified (see [Lifecycle](lifecycle.md))",
        _choice(*WRITTEN_TIERS),
        shown="the account's default",
    )
    blob_tags: bool = _setting(
        True,
        "ARCHIVER_BLOB_TAGS",
        "write blob index tags on every file (table, job, cutoff range) for lifecycle rules and find-by-tags; `false` on accounts with a hierarchical namespace (ADLS Gen2), which have no index tags",
        _flag,
        shown="true",
    )
    encryption_scope: str | None = _setting(
        None,
        "ARCHIVER_ENCRYPTION_SCOPE",
        "the Azure encryption scope every file and every Delta commit archiver writes is written with (customer-managed keys; set the container's default scope to it too, for what delta-rs writes); readers need no key, the account decrypts",
        _text,
        shown="the account's default",
    )
    adbc_driver: str | None = _setting(
        None,
        "ARCHIVER_ADBC_DRIVER",
        "the ADBC PostgreSQL driver library (`libadbc_driver_postgresql.so`) to load instead of the one in the adbc-driver-postgresql wheel; the wheels 1.9.0-1.13.0 for Linux x86-64 are built without compiler optimisation: a Release build of the same source decodes rows with a third of the CPU (see [Performance](performance.md))",
        check_adbc_driver,
        shown="the wheel's",
    )
    orphan_grace: float = _setting(
        86400.0,
        "ARCHIVER_ORPHAN_GRACE",
        "seconds an archived file in no catalog row, whose job or operation is over, is kept before the workers' orphan sweep deletes it; the sweep runs once per this period on each storage (see [Lifecycle](lifecycle.md))",
        _number(float, 0.0),
    )
    compact: bool = _setting(
        True,
        "ARCHIVER_COMPACT",
        "the workers merge each table's small archived files into files of ARCHIVER_COMPACT_TARGET, once every ARCHIVER_COMPACT_EVERY seconds (a policy's `compact = false` leaves its table; see [Lifecycle](lifecycle.md))",
        _flag,
        shown="true",
    )
    compact_target: int = _setting(
        128 * 1024 * 1024,
        "ARCHIVER_COMPACT_TARGET",
        "the size compaction merges small files into (`128MB`, `1GB`; a policy's `compact_target` for its table)",
        _size,
        shown="128MB",
    )
    compact_period: str = _setting(
        "auto",
        "ARCHIVER_COMPACT_PERIOD",
        "a merged file's rows lie within one calendar `month` or `year`, or `none`: any span; `auto`: a month where the table's policy has `retain` (purge then still drops whole files), else none (a policy's `compact_period` for its table)",
        _choice("auto", "month", "year", "none"),
    )
    compact_every: float = _setting(
        3600.0,
        "ARCHIVER_COMPACT_EVERY",
        "seconds between the workers' looks for tables to compact, on each storage",
        _number(float, 1.0),
    )
    retry_base_seconds: float = _setting(
        5.0,
        "ARCHIVER_RETRY_BASE_SECONDS",
        "backoff before the first retry; doubles per attempt, full jitter",
        _number(float, 0.0),
    )
    retry_max_seconds: float = _setting(
        600.0, "ARCHIVER_RETRY_MAX_SECONDS", "the longest backoff", _number(float, 0.0)
    )
    lock_timeout: float = _setting(
        5.0,
        "ARCHIVER_LOCK_TIMEOUT",
        "seconds a chunk statement waits for a table lock an application holds before it rolls back and retries later (lock_timeout)",
        _number(float, 0.01),
    )
    row_lock_wait: float = _setting(
        0.1,
        "ARCHIVER_ROW_LOCK_WAIT",
        "seconds a move chunk's DELETE waits for a row an application holds locked (at most ARCHIVER_LOCK_TIMEOUT; keep it well under the server's deadlock_timeout); then the chunk is taken again skipping locked rows (FOR UPDATE SKIP LOCKED), for the rest of the attempt. 0: always skip them (move jobs ~10% slower on the reference table)",
        _number(float, 0.0),
    )
    lock_retries: int = _setting(
        10,
        "ARCHIVER_LOCK_RETRIES",
        "chunk retries after a lock timeout, with backoff up to 30 s, before the attempt fails; they spend no attempt",
        _number(int, 0),
    )
    statement_timeout: float = _setting(
        1800.0,
        "ARCHIVER_STATEMENT_TIMEOUT",
        "seconds a chunk statement may run, streaming included (statement_timeout; 0: none)",
        _number(float, 0.0),
    )
    log_format: str = _setting(
        "text", "ARCHIVER_LOG_FORMAT", "`text` or `json`", _choice("text", "json")
    )
    scheduler_grace: float = _setting(
        3600.0,
        "ARCHIVER_SCHEDULER_GRACE",
        "seconds a missed policy slot is still enqueued when a scheduler starts; must be shorter than the retention",
        _number(float, 1.0),
    )
    console_bind: str = _setting(
        "127.0.0.1:8080",
        "ARCHIVER_CONSOLE_BIND",
        "where `archiver console` listens (HOST:PORT); beyond loopback never with ARCHIVER_CONSOLE_PUBLIC_READ",
        _text,
    )
    console_admin_token: str | None = _setting(
        None,
        "ARCHIVER_CONSOLE_ADMIN_TOKEN",
        "the console's admin credential: actions need a login with it; without it the console is read-only (a secret: never logged or shown)",
        _text,
        shown="—",
    )
    console_viewer_token: str | None = _setting(
        None,
        "ARCHIVER_CONSOLE_VIEWER_TOKEN",
        "a credential that lets its holder read the console, not act (a secret: never logged or shown)",
        _text,
        shown="—",
    )
    console_proxy_header: str | None = _setting(
        None,
        "ARCHIVER_CONSOLE_PROXY_HEADER",
        "the header in which an authenticating reverse proxy names its user (`X-Forwarded-User`, oauth2-proxy's `X-Auth-Request-User`, App Service's `X-MS-CLIENT-PRINCIPAL-NAME`); believed only from ARCHIVER_CONSOLE_PROXY_ADDRESSES",
        _header_name,
    )
    console_proxy_addresses: tuple[IPNetwork, ...] = _setting(
        (),
        "ARCHIVER_CONSOLE_PROXY_ADDRESSES",
        "the reverse proxies' addresses or networks, comma-separated: their identity header, X-Forwarded-For and X-Forwarded-Proto are believed, nobody else's",
        _networks,
        shown="none",
    )
    console_public_read: bool = _setting(
        False,
        "ARCHIVER_CONSOLE_PUBLIC_READ",
        "`true`: whoever reaches the console reads it without a credential (loopback only)",
        _flag,
    )
    console_root_path: str = _setting(
        "",
        "ARCHIVER_CONSOLE_ROOT_PATH",
        "the sub-path a reverse proxy serves the console under (`/archiver`), which the proxy strips",
        sub_path,
        shown="none",
    )
    serve_bind: str = _setting(
        "127.0.0.1:6432",
        "ARCHIVER_SERVE_BIND",
        "where `archiver serve` listens (HOST:PORT); beyond loopback only with TLS or ARCHIVER_SERVE_ALLOW_PLAINTEXT",
        _text,
    )
    serve_iceberg_rest: str | None = _setting(
        None,
        "ARCHIVER_SERVE_ICEBERG_REST",
        "where `archiver serve` also answers the Iceberg REST catalog's read side (HOST:PORT; unset: it does not): people sign in with their role and password by OAuth2 client credentials, list and load the tables their grants let them read whole, and get a read-only SAS (see [Iceberg REST catalog](iceberg-rest.md)); TLS and loopback as for ARCHIVER_SERVE_BIND",
        _text,
        shown="none",
    )
    serve_user: str = _setting(
        "archiver",
        "ARCHIVER_SERVE_USER",
        "the one configured user of `archiver serve`, who reads every archived table (any database name is accepted); a role of that name signs in as this user",
        _text,
    )
    serve_password: str | None = _setting(
        None,
        "ARCHIVER_SERVE_PASSWORD",
        "that user's password, checked by SCRAM-SHA-256; unset, that user does not sign in (a secret: never logged or shown)",
        _text,
        shown="—",
    )
    serve_roles: bool = _setting(
        True,
        "ARCHIVER_SERVE_ROLES",
        "`true`: people sign in to `archiver serve` as the catalog server's login roles, with their own passwords, and read what the live tables' grants let them (docs/access.md); `false`: the configured user alone",
        _flag,
    )
    audit_parameters: bool = _setting(
        False,
        "ARCHIVER_AUDIT_PARAMETERS",
        "`true`: the read audit (archive_reads) records each statement's parameter values too; they can hold what the statement looks for (a customer's e-mail, say)",
        _flag,
    )
    serve_tls_cert: str | None = _setting(
        None,
        "ARCHIVER_SERVE_TLS_CERT",
        "a PEM certificate (chain) file: with ARCHIVER_SERVE_TLS_KEY, serve speaks TLS and refuses clients that do not",
        _text,
        shown="none",
    )
    serve_tls_key: str | None = _setting(
        None,
        "ARCHIVER_SERVE_TLS_KEY",
        "the certificate's PEM private key file",
        _text,
        shown="none",
    )
    serve_allow_plaintext: bool = _setting(
        False,
        "ARCHIVER_SERVE_ALLOW_PLAINTEXT",
        "`true`: serve may listen beyond loopback without TLS (a private network's own encryption, say)",
        _flag,
    )
    serve_max_connections: int = _setting(
        64,
        "ARCHIVER_SERVE_MAX_CONNECTIONS",
        "connections `archiver serve` holds at once; one more is refused (SQLSTATE 53300)",
        _number(int, 1),
    )
    serve_idle_timeout: float = _setting(
        3600.0,
        "ARCHIVER_SERVE_IDLE_TIMEOUT",
        "seconds a client may send nothing before serve closes its connection (0: never)",
        _number(float, 0.0),
    )
    serve_statement_timeout: float = _setting(
        300.0,
        "ARCHIVER_SERVE_STATEMENT_TIMEOUT",
        "seconds one statement may run in serve before it is cancelled (SQLSTATE 57014; 0: never)",
        _number(float, 0.0),
    )
    serve_memory_limit: int = _setting(
        512 * 1024**2,
        "ARCHIVER_SERVE_MEMORY_LIMIT",
        "memory the statements `archiver serve` runs and the file blocks it keeps may hold together (DuckDB's memory_limit; `512MB`, `2GB`)",
        _size,
        shown="512MB",
    )
    serve_threads: int = _setting(
        2,
        "ARCHIVER_SERVE_THREADS",
        "DuckDB threads one statement of `archiver serve` may use",
        _number(int, 1),
    )
    serve_definitions_database: str | None = _setting(
        None,
        "ARCHIVER_SERVE_DEFINITIONS_DATABASE",
        "the database on the queue database's server where serve declares the archived tables for PostgreSQL's catalogs (made by serve where missing)",
        _text,
        shown="<queue database>_archive",
    )
    serve_definitions_role: str | None = _setting(
        None,
        "ARCHIVER_SERVE_DEFINITIONS_ROLE",
        "the login role that owns that database and nothing else; serve answers statements of PostgreSQL's catalogs as it (made by serve where missing)",
        _text,
        shown="<queue database>_archive",
    )
    serve_definitions_password: str | None = _setting(
        None,
        "ARCHIVER_SERVE_DEFINITIONS_PASSWORD",
        "that role's password, where an administrator made the role; unset, serve sets a new random one at each start (a secret: never logged or shown)",
        _text,
        shown="—",
    )
    failpoints: str = _setting(
        "",
        "ARCHIVER_FAILPOINTS",
        "testing only: stop a worker at a named point (archiver/failpoints.py)",
        _text,
        shown="—",
        in_file=False,
    )

    @property
    def same_database(self) -> bool:
        """True when catalog writes can share the source transaction."""
        return self.source_url is None or self.source_url == self.database_url

    @property
    def effective_source_url(self) -> str:
        return self.source_url or self.database_url

    def storage_location(self) -> StorageLocation:
        """ARCHIVER_STORAGE_URL parsed and checked with the settings it needs."""
        if not self.storage_url:
            raise ConfigError(
                "ARCHIVER_STORAGE_URL is not set (az://<container>/<prefix> or file:///<dir>)"
            )
        location = StorageLocation.parse(self.storage_url)
        if location.scheme != "az" and (self.access_tier or self.encryption_scope):
            raise ConfigError(
                "ARCHIVER_ACCESS_TIER and ARCHIVER_ENCRYPTION_SCOPE need Azure storage "
                f"(az://), ARCHIVER_STORAGE_URL is {location.scheme}://"
            )
        if location.scheme == "az" and not (self.azure_connection_string or self.azure_account_url):
            raise ConfigError(
                "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_URL must be set "
                "for an az:// ARCHIVER_STORAGE_URL"
            )
        return location

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, spec in SPECS.items():
            raw = env.get(spec.variable) or (env.get(spec.alias) if spec.alias else None)
            if raw:
                values[name] = spec.cast(spec.variable, raw)
        if "database_url" not in values:
            raise ConfigError("ARCHIVER_DATABASE_URL (or DATABASE_URL) is not set")
        if "heartbeat_seconds" not in values:
            lease = values.get("lease_seconds", cls.lease_seconds)
            values["heartbeat_seconds"] = min(5.0, lease / 4)
        if values.get("iceberg") and not values.get("delta", cls.delta):
            raise ConfigError(
                "ARCHIVER_ICEBERG=true needs ARCHIVER_DELTA=true: the Iceberg table mirrors "
                "the Delta table's files"
            )
        return cls(**values)


SPECS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in fields(Settings)}
# A config file's [settings] keys: the variable's name, lower-cased, without its
# ARCHIVER_ prefix (AZURE_* keep theirs).
FILE_KEYS = {
    s.variable.lower().removeprefix("archiver_"): s.variable for s in SPECS.values() if s.in_file
}
CONFIG_VARIABLE = "ARCHIVER_CONFIG"  # the config file, when --config is not given


def markdown_table() -> str:
    """docs/configuration.md's table of settings, as the declarations above say it."""
    lines = ["| variable | meaning | default |", "|---|---|---|"]
    for spec in SPECS.values():
        name = f"`{spec.variable}`" + (f" (or `{spec.alias}`)" if spec.alias else "")
        lines.append(f"| {name} | {spec.meaning} | {spec.shown_default} |")
    lines.append(
        f"| `{CONFIG_VARIABLE}` | the config file (same as `archiver --config FILE`) | — |"
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class ConfigFile:
    """An archiver.toml: `[settings]` (same keys as the environment) and `[[policy]]`."""

    path: Path
    settings: dict[str, str] = field(default_factory=dict)  # by environment variable name
    policies: tuple[dict[str, Any], ...] = ()

    @classmethod
    def read(cls, path: str) -> ConfigFile:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: invalid TOML: {exc}") from None
        for key in data:
            if key not in ("settings", "policy"):
                raise ConfigError(
                    f"config file {path}: unknown key {key!r} (expected [settings], [[policy]])"
                )
        raw = data.get("settings", {})
        if not isinstance(raw, dict):
            raise ConfigError(f"config file {path}: settings must be a table ([settings])")
        settings = {}
        for key, value in raw.items():
            if key not in FILE_KEYS:
                raise ConfigError(
                    f"config file {path}: [settings] has unknown key {key!r} "
                    f"(known: {', '.join(sorted(FILE_KEYS))})"
                )
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise ConfigError(
                    f"config file {path}: [settings] {key}: expected a string or number"
                )
            settings[FILE_KEYS[key]] = str(value)
        policies = data.get("policy", [])
        if not isinstance(policies, list) or not all(isinstance(p, dict) for p in policies):
            raise ConfigError(f"config file {path}: policies must be [[policy]] tables")
        return cls(Path(path), settings, tuple(policies))

    def settings_over(self, env: Mapping[str, str]) -> Settings:
        """Settings from this file, each overridden by the environment when set there."""
        merged = dict(self.settings)
        if env.get("DATABASE_URL"):  # the environment's alias beats the file too
            merged.pop("ARCHIVER_DATABASE_URL", None)
        merged.update({k: v for k, v in env.items() if v != ""})
        try:
            return Settings.from_env(merged)
        except ConfigError as exc:
            for variable in self.settings:
                if str(exc).startswith(f"{variable}:") and not env.get(variable):
                    lower = variable.lower().removeprefix("archiver_")
                    raise ConfigError(
                        f"config file {self.path}: [settings] {lower}: {str(exc).split(': ', 1)[1]}"
                    ) from None
            raise
