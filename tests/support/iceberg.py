"""A table's Iceberg table as engines find it: pyiceberg's SqlCatalog on the catalog
database under the catalog's name (`catalog`, `table`), and DuckDB's iceberg scan of its
current metadata file (`duck_rows`)."""

from __future__ import annotations

import glob
import os
import site
from typing import Any

import duckdb
import pyarrow as pa

from tests.support.harness import Harness


def catalog(h: Harness) -> Any:
    """The catalog an engine's JDBC catalog or pyiceberg's SqlCatalog opens."""
    from pyiceberg.catalog.sql import SqlCatalog

    rest = h.url.split("://", 1)[1]
    return SqlCatalog(
        "archive",
        uri=f"postgresql+psycopg://{rest}",
        init_catalog_tables="false",
        **{
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            "adls.connection-string": h.azurite.connection_string,
            "adls.account-name": "devstoreaccount1",
        },
    )


def table(h: Harness, name: str = "public.orders") -> Any:
    """The table as the catalog has it now (its files read without the catalog's pool,
    closed here)."""
    schema, _, rel = name.partition(".")
    found = catalog(h)
    try:
        return found.load_table((schema, rel))
    finally:
        found.engine.dispose()


def namespaces(h: Harness) -> list[str]:
    found = catalog(h)
    try:
        return [n for (n,) in found.list_namespaces()]
    finally:
        found.engine.dispose()


def rows(h: Harness, name: str = "public.orders", snapshot_id: int | None = None) -> pa.Table:
    return table(h, name).scan(snapshot_id=snapshot_id).to_arrow()


def duck(h: Harness) -> Any:
    """DuckDB with its iceberg, avro and azure extensions, from their wheels."""
    con = duckdb.connect(
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    )
    load_extensions(con, "avro", "iceberg", "azure")
    os.environ["AZURITE_BLOB_STORAGE_URL"] = f"http://127.0.0.1:{h.azurite.port}"
    con.execute(f"CREATE SECRET (TYPE azure, CONNECTION_STRING '{h.azurite.connection_string}')")
    return con


def load_extensions(con: Any, *names: str) -> None:
    """DuckDB's extensions `names`, from their wheels (never downloaded)."""
    root = site.getsitepackages()[0]
    for name in names:
        con.execute(f"LOAD '{glob.glob(f'{root}/duckdb_extension_{name}/extensions/*/*')[0]}'")
