"""The bench's other exporter, in a process of its own: DuckDB's postgres_scanner writing
the floor's rows into one zstd Parquet file, local or on Azure Blob Storage (its azure
extension, given AZURE_STORAGE_CONNECTION_STRING). Prints its seconds.

    python -m bench.duckdb_export postgresql://... /tmp/out.parquet '2025-01-01 00:00:00+00'
    python -m bench.duckdb_export postgresql://... az://container/out.parquet '…'
    python -m bench.duckdb_export postgresql://... /tmp/out.parquet '…' 'SELECT …'

A process of its own because DuckDB's buffers would raise the bench's peak RSS, and a
worker the bench starts afterwards reports at least that peak (see bench.run._run_workers).
"""

from __future__ import annotations

import os
import sys
import time
from importlib.resources import files

import duckdb  # the bench's and the tests' alone (the dev extra)

EXPORT = "COPY ({source}) TO '{target}' (FORMAT parquet, COMPRESSION zstd)"
TABLE = "SELECT * FROM pg.public.orders WHERE created_at < TIMESTAMPTZ '{cutoff}'"
# archiver's own copy statement, run by the scanner as one binary COPY on one connection
STATEMENT = "SELECT * FROM postgres_query('pg', '{statement}')"


def load(con: duckdb.DuckDBPyConnection, extension: str) -> None:
    """An extension from its PyPI wheel (duckdb-extension-<name>, one per DuckDB release);
    DuckDB checks its signature as it loads it and refuses an unsigned one."""
    version = con.sql("PRAGMA version").fetchone()[0]  # type: ignore[index]
    library = files(f"duckdb_extension_{extension}").joinpath(
        "extensions", version, f"{extension}.duckdb_extension"
    )
    con.execute(f"LOAD '{library}'")


def export_seconds(url: str, target: str, cutoff: str, statement: str = "") -> float:
    """A thread per core: DuckDB reads ctid ranges of 1,000 pages over as many connections
    sharing one exported snapshot, in no key order, with its own type mapping (enum and
    jsonb as text), and decodes and encodes in parallel. Timed from ATTACH (its
    connections and catalog reads, as a job's time includes its connection set-up) to the
    file written; loading the extensions, like a worker's imports, is not in it.
    `statement`: that SQL (archiver's exact-type select list, in key order) instead of
    the table, read through postgres_query, which DuckDB does not split."""
    con = duckdb.connect()
    try:
        load(con, "postgres_scanner")
        if target.startswith("az://"):
            load(con, "azure")
            con.execute(
                "CREATE SECRET (TYPE azure, CONNECTION_STRING $1)",
                [os.environ["AZURE_STORAGE_CONNECTION_STRING"]],
            )
        con.execute(f"SET threads = {os.cpu_count()}")
        started = time.perf_counter()
        con.execute(f"ATTACH '{url}' AS pg (TYPE postgres, READ_ONLY)")
        source = (
            STATEMENT.format(statement=statement.replace("'", "''"))
            if statement
            else TABLE.format(cutoff=cutoff)
        )
        con.execute(EXPORT.format(source=source, target=target))
        return time.perf_counter() - started
    finally:
        con.close()


if __name__ == "__main__":
    print(export_seconds(*sys.argv[1:5]))
