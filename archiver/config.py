"""Settings, read once from the environment, cast explicitly; a bad value names its key."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from archiver.errors import ConfigError

T = TypeVar("T", int, float)


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


@dataclass(frozen=True)
class Settings:
    """Everything archiver reads from its environment, validated."""

    database_url: str
    source_url: str | None  # None: the application tables live in the queue database
    storage_url: str | None
    azure_connection_string: str | None
    azure_account_url: str | None
    poll_interval: float  # seconds between polls when no NOTIFY arrives
    lease_seconds: float  # a running job whose heartbeat is older is rescued
    heartbeat_seconds: float
    shutdown_deadline: float  # seconds a stopping worker gives its chunk in progress
    retention_days: float  # finished jobs older than this are pruned
    upload_concurrency: int
    retry_base_seconds: float  # first retry's backoff; doubles each attempt, with jitter
    retry_max_seconds: float
    log_format: str  # "text" or "json"
    failpoints: str  # testing only: see archiver/failpoints.py

    @property
    def same_database(self) -> bool:
        """True when catalog writes can share the source transaction."""
        return self.source_url is None or self.source_url == self.database_url

    @property
    def effective_source_url(self) -> str:
        return self.source_url or self.database_url

    def storage_location(self) -> StorageLocation:
        if not self.storage_url:
            raise ConfigError(
                "ARCHIVER_STORAGE_URL is not set (az://<container>/<prefix> or file:///<dir>)"
            )
        location = StorageLocation.parse(self.storage_url)
        if location.scheme == "az" and not (self.azure_connection_string or self.azure_account_url):
            raise ConfigError(
                "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_URL must be set "
                "for an az:// ARCHIVER_STORAGE_URL"
            )
        return location

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        database_url = env.get("ARCHIVER_DATABASE_URL") or env.get("DATABASE_URL")
        if not database_url:
            raise ConfigError("ARCHIVER_DATABASE_URL (or DATABASE_URL) is not set")
        _check_postgres_url("ARCHIVER_DATABASE_URL", database_url)
        source_url = env.get("ARCHIVER_SOURCE_URL") or None
        if source_url:
            _check_postgres_url("ARCHIVER_SOURCE_URL", source_url)
        lease = _number(env, "ARCHIVER_LEASE_SECONDS", float, 60.0, minimum=1.0)
        return cls(
            database_url=database_url,
            source_url=source_url,
            storage_url=env.get("ARCHIVER_STORAGE_URL") or None,
            azure_connection_string=env.get("AZURE_STORAGE_CONNECTION_STRING") or None,
            azure_account_url=env.get("AZURE_STORAGE_ACCOUNT_URL") or None,
            poll_interval=_number(env, "ARCHIVER_POLL_INTERVAL", float, 2.0, minimum=0.05),
            lease_seconds=lease,
            heartbeat_seconds=_number(
                env, "ARCHIVER_HEARTBEAT_SECONDS", float, min(5.0, lease / 4), minimum=0.05
            ),
            shutdown_deadline=_number(env, "ARCHIVER_SHUTDOWN_DEADLINE", float, 30.0, minimum=0.0),
            retention_days=_number(env, "ARCHIVER_RETENTION_DAYS", float, 30.0, minimum=0.0),
            upload_concurrency=_number(env, "ARCHIVER_UPLOAD_CONCURRENCY", int, 4, minimum=1),
            retry_base_seconds=_number(env, "ARCHIVER_RETRY_BASE_SECONDS", float, 5.0, minimum=0.0),
            retry_max_seconds=_number(env, "ARCHIVER_RETRY_MAX_SECONDS", float, 600.0, minimum=0.0),
            failpoints=env.get("ARCHIVER_FAILPOINTS", ""),
            log_format=_choice(env, "ARCHIVER_LOG_FORMAT", ("text", "json"), "text"),
        )


def _check_postgres_url(key: str, url: str) -> None:
    if urlsplit(url).scheme not in ("postgres", "postgresql"):
        raise ConfigError(f"{key}: expected a postgresql:// URL, got {redact(url)!r}")


def _number(env: Mapping[str, str], key: str, cast: type[T], default: T, minimum: T) -> T:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        raise ConfigError(f"{key}: expected a {cast.__name__}, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{key}: must be at least {minimum}, got {raw!r}")
    return value


def _choice(env: Mapping[str, str], key: str, choices: tuple[str, ...], default: str) -> str:
    value = env.get(key) or default
    if value not in choices:
        raise ConfigError(f"{key}: expected one of {', '.join(choices)}, got {value!r}")
    return value


_SECRET_PATTERNS = (
    (re.compile(r"(://[^:/@\s]+:)[^@\s]+@"), r"\1***@"),  # user:password@ in URLs
    (re.compile(r"((?:AccountKey|SharedAccessSignature|password)=)[^;\s&]+", re.I), r"\1***"),
    (re.compile(r"([?&](?:sig|password)=)[^&\s]+", re.I), r"\1***"),
)


def redact(text: str) -> str:
    """Hide passwords, account keys and SAS signatures in anything headed for a log or error."""
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text
