"""Where an archived table's Iceberg table is and how pyiceberg reaches it: the SQL
catalog in the queue database (the Iceberg JDBC catalog's tables, sql/020_iceberg.sql,
made by the migration, never by pyiceberg), the table's location (its folder, beside
`_delta_log/`) and its files' URIs in the form engines read on Azure
(`abfss://<container>@<account>.dfs.core.windows.net/<path>`, through adlfs), or their
absolute paths on file storage. The credentials it is given never reach a log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from pyiceberg.catalog.sql import SqlCatalog

from archiver.config import Settings, StorageLocation, connection_string_parts
from archiver.errors import ConfigError
from archiver.storage.seam import join_name


def identifier(table: str) -> tuple[str, str]:
    """(namespace, name) of a table archiver names `schema.table`: the namespace is the
    PostgreSQL schema (`public.orders` in the catalog as namespace `public`, `orders`)."""
    schema, _, name = table.partition(".")
    return schema, name


def _account(settings: Settings) -> str:
    if settings.azure_connection_string:
        return connection_string_parts(settings.azure_connection_string).get("AccountName", "")
    return (urlsplit(settings.azure_account_url or "").hostname or "").split(".")[0]


def file_uri(settings: Settings, location: StorageLocation, name: str) -> str:
    """The URI an Iceberg table names stored object `name` by."""
    if location.scheme == "file":
        return f"{location.container.rstrip('/')}/{name}"
    return f"abfss://{location.container}@{_account(settings)}.dfs.core.windows.net/{name}"


def table_location(settings: Settings, location: StorageLocation, table: str) -> str:
    """The table's folder (its metadata goes under `metadata/` there)."""
    return file_uri(settings, location, join_name(location.prefix, table))


def object_name(location: StorageLocation, uri: str) -> str:
    """The stored object's name of a URI `file_uri` made (its part after the container,
    as it is: a table's name may hold `#` or `?`)."""
    if location.scheme == "file":
        return uri.removeprefix(location.container.rstrip("/") + "/")
    return uri.split("://", 1)[-1].split("/", 1)[-1]


def data_files(tbl: Any) -> Iterator[Any]:
    """The data files of the table's current snapshot, one per manifest entry, read from
    its manifests: every one, an empty file's too (a scan's plan leaves out files of no
    rows)."""
    snapshot = tbl.current_snapshot()
    for manifest in snapshot.manifests(tbl.io) if snapshot is not None else []:
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            yield entry.data_file


def live_files(tbl: Any) -> dict[str, Any]:
    """`data_files` by URI."""
    return {data_file.file_path: data_file for data_file in data_files(tbl)}


def io_properties(settings: Settings, location: StorageLocation) -> dict[str, str]:
    """pyiceberg's FileIO for the storage: adlfs with the connection string's account key
    or SAS (Azurite's BlobEndpoint honoured); on file storage, its own."""
    if location.scheme == "file":
        return {}
    parts = connection_string_parts(settings.azure_connection_string or "")
    if not ("AccountKey" in parts or "SharedAccessSignature" in parts):
        raise ConfigError(
            "ARCHIVER_ICEBERG: Iceberg publishing needs AZURE_STORAGE_CONNECTION_STRING with "
            "an AccountKey or a SharedAccessSignature (not yet a token credential)"
        )
    return {
        "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
        "adls.connection-string": settings.azure_connection_string or "",
        "adls.account-name": parts.get("AccountName", ""),
    }


def sqlalchemy_url(database_url: str) -> str:
    """The queue database's URL for SQLAlchemy on psycopg 3 (libpq's URI, its query
    parameters kept)."""
    scheme, rest = database_url.split("://", 1)
    if scheme not in ("postgres", "postgresql"):
        raise ConfigError(
            f"ARCHIVER_DATABASE_URL: expected a postgresql:// URL for Iceberg, got {scheme}://"
        )
    return f"postgresql+psycopg://{rest}"


def open_catalog(settings: Settings) -> Any:
    """The process's SQL catalog (its SQLAlchemy pool: the context keeps one and closes it)."""
    location = settings.storage_location()
    return SqlCatalog(
        settings.iceberg_catalog,
        uri=sqlalchemy_url(settings.database_url),
        init_catalog_tables="false",
        pool_pre_ping="true",
        **io_properties(settings, location),
    )
