"""Checks shared by the integration tests: what is in the table, what is in the files."""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from azure.storage.blob import BlobServiceClient

from archiver.files.names import is_format_object
from tests.support import sql


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """Python values from asyncpg and from pyarrow side by side: JSON text parsed, uuids as
    their text (as the files hold them: Delta's string), archiver's __pg_text companion
    columns (values the standard type cannot hold) left out."""
    out = {
        k: str(v) if isinstance(v, uuid.UUID) else v
        for k, v in row.items()
        if not k.endswith("__pg_text")
    }
    for key in ("details",):
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key])
    return out


def rows_in_db(url: str, query: str) -> dict[int, dict[str, Any]]:
    return {r["id"]: normalize(dict(r)) for r in sql(url, query)}


def blob_names(connection_string: str, container: str, *, delta_log: bool = False) -> list[str]:
    """The container's blobs: archived files (and strays); with `delta_log`, the table
    formats' objects instead (the Delta logs', the Iceberg tables' metadata)."""
    service = BlobServiceClient.from_connection_string(connection_string)
    names = (b.name for b in service.get_container_client(container).list_blobs())
    return sorted(n for n in names if _format_object(n) == delta_log)


def _format_object(name: str) -> bool:
    """archive/<schema.table>/_delta_log/... or .../metadata/...: a table format's."""
    return is_format_object(name.split("/", 2)[-1])


def rows_in_blobs(connection_string: str, container: str, names: list[str]) -> list[dict[str, Any]]:
    """Every row of the named Parquet blobs, read back with pyarrow."""
    service = BlobServiceClient.from_connection_string(connection_string)
    client = service.get_container_client(container)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            local = Path(tmp) / "f.parquet"
            local.write_bytes(client.get_blob_client(name).download_blob().readall())
            rows.extend(normalize(r) for r in pq.read_table(local).to_pylist())
    return rows


def catalog_paths(url: str, table: str | None = None, *, retired: bool = False) -> list[str]:
    """Paths of the catalogued files, of one table (schema.table) or of all; with
    `retired`, also of files whose rows left the archive (about to be deleted)."""
    rows = sql(
        url,
        "SELECT path FROM archive_files WHERE ($1::text IS NULL OR source_table = $1) "
        "AND ($2 OR state <> 'retired') ORDER BY job_id, part",
        table,
        retired,
    )
    return [r["path"] for r in rows]


def icu_rewrites(
    url: str, connection_string: str, container: str
) -> list[tuple[Any, list[str], Any]]:
    """Each rewritten file of `codes`: its catalog row, its codes, and their smallest and
    largest under the ICU collation (what its catalogued key ends must be)."""
    found = []
    for f in sql(
        url, "SELECT path, min_key, max_key FROM archive_files WHERE path LIKE '%/rewrite-%'"
    ):
        codes = [r["code"] for r in rows_in_blobs(connection_string, container, [f["path"]])]
        ends = sql(
            url,
            'SELECT min(c COLLATE "und-x-icu") AS lo, max(c COLLATE "und-x-icu") AS hi '
            "FROM unnest($1::text[]) c",
            codes,
        )[0]
        found.append((f, codes, ends))
    return found
