"""Settings, read once from the environment, cast explicitly; a bad value names its key."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
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
    scheduler_grace: float = 3600.0  # seconds a missed policy slot is still enqueued

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
            scheduler_grace=_number(env, "ARCHIVER_SCHEDULER_GRACE", float, 3600.0, minimum=1.0),
        )


# Every setting a config file's [settings] table may hold: the environment variable's name,
# lower-cased, without its ARCHIVER_ prefix (AZURE_* keep theirs).
SETTING_VARIABLES = (
    "ARCHIVER_DATABASE_URL",
    "ARCHIVER_SOURCE_URL",
    "ARCHIVER_STORAGE_URL",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_URL",
    "ARCHIVER_POLL_INTERVAL",
    "ARCHIVER_LEASE_SECONDS",
    "ARCHIVER_HEARTBEAT_SECONDS",
    "ARCHIVER_SHUTDOWN_DEADLINE",
    "ARCHIVER_RETENTION_DAYS",
    "ARCHIVER_UPLOAD_CONCURRENCY",
    "ARCHIVER_RETRY_BASE_SECONDS",
    "ARCHIVER_RETRY_MAX_SECONDS",
    "ARCHIVER_LOG_FORMAT",
    "ARCHIVER_SCHEDULER_GRACE",
)
FILE_KEYS = {v.lower().removeprefix("archiver_"): v for v in SETTING_VARIABLES}


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
