"""A table's Delta table as other readers see it: delta-rs (`delta`), DuckDB's delta
scan (`duck`, `uri`), the catalog's published files as its log names them, and a
column-mapped table's metadata against the protocol's rules (`mapping_rules`)."""

from __future__ import annotations

import glob
import json
import os
import site
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from tests.support.harness import Harness


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


def mapping_rules(h: Harness, table: str, files: list[str]) -> dict[str, Any]:
    """Check the Delta table's column mapping against PROTOCOL.md (Column Mapping, Writer
    Requirements): mode name, a protocol that has it, every field (nested too) with a
    unique id no greater than maxColumnId and a physical name, each column found in the
    files under its physical name. Returns the schema's fields by name."""
    table_ = delta(h, table)
    config = table_.metadata().configuration
    assert config["delta.columnMapping.mode"] == "name"
    protocol = table_.protocol()
    if protocol.min_reader_version == 2:
        assert protocol.min_writer_version == 5
    else:
        assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
        readers, writers = protocol.reader_features or [], protocol.writer_features or []
        assert "columnMapping" in readers and set(readers) <= set(writers)
    fields = json.loads(table_.schema().to_json())["fields"]
    ids: list[int] = []

    def walk(fs: list[dict[str, Any]]) -> None:
        for f in fs:
            meta = f["metadata"]
            ids.append(meta["delta.columnMapping.id"])
            assert meta["delta.columnMapping.physicalName"]
            t = f["type"]
            if isinstance(t, dict) and t.get("type") == "struct":
                walk(t["fields"])

    walk(fields)
    assert len(ids) == len(set(ids)) and max(ids) <= int(config["delta.columnMapping.maxColumnId"])
    physical = {f["delta.columnMapping.physicalName"] for f in (x["metadata"] for x in fields)}
    in_files: set[str] = set()
    for path in files:
        in_files |= set(pq.read_schema(pa.BufferReader(h.blob(path))).names)
    assert physical <= in_files  # name mode reads each column under its physical name
    return {f["name"]: f for f in fields}
