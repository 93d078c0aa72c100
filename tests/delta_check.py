"""A table's Delta table as other readers see it: delta-rs (`delta`), DuckDB's delta
scan (`duck`, `uri`), and the catalog's published files as its log names them."""

from __future__ import annotations

import glob
import os
import site
from typing import Any

import duckdb
from deltalake import DeltaTable

from tests.harness import Harness


def options(h: Harness) -> dict[str, str]:
    return h.azurite.delta_options


def uri(h: Harness, table: str) -> str:
    return f"az://{h.container}/archive/{table}"


def delta(h: Harness, table: str = "public.orders") -> DeltaTable:
    return DeltaTable(uri(h, table), storage_options=options(h))


def duck(h: Harness) -> Any:
    """DuckDB with its delta and azure extensions, from their wheels."""
    con = duckdb.connect(
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    )
    root = site.getsitepackages()[0]
    for name in ("delta", "azure"):
        con.execute(f"LOAD '{glob.glob(f'{root}/duckdb_extension_{name}/extensions/*/*')[0]}'")
    os.environ["AZURITE_BLOB_STORAGE_URL"] = f"http://127.0.0.1:{h.azurite.port}"
    con.execute(f"CREATE SECRET (TYPE azure, CONNECTION_STRING '{h.azurite.connection_string}')")
    return con


def catalogued(h: Harness, table: str = "public.orders") -> list[str]:
    """The table's published files as the Delta log names them (relative paths)."""
    rows = h.sql(
        "SELECT path FROM archive_files WHERE source_table = $1 AND delta ORDER BY path", table
    )
    return [r["path"].split(f"/{table}/", 1)[1] for r in rows]
