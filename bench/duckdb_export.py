"""The bench's other exporter, in a process of its own: DuckDB's postgres_scanner writing
the floor's rows into one zstd Parquet file. Prints its seconds.

    python -m bench.duckdb_export postgresql://... /tmp/out.parquet '2025-01-01 00:00:00+00'

A process of its own because DuckDB's buffers would raise the bench's peak RSS, and a
worker the bench starts afterwards reports at least that peak (see bench.run._run_workers).
"""

from __future__ import annotations

import os
import sys
import time
from importlib.resources import files

import duckdb  # the bench's and the tests' alone (the dev extra)

EXPORT = (
    "COPY (SELECT * FROM pg.public.orders WHERE created_at < TIMESTAMPTZ '{cutoff}') "
    "TO '{path}' (FORMAT parquet, COMPRESSION zstd)"
)


def export_seconds(url: str, path: str, cutoff: str) -> float:
    """A thread per core: DuckDB reads ctid ranges of 1,000 pages over as many connections
    sharing one exported snapshot, in no key order, with its own type mapping (enum and
    jsonb as text), and decodes and encodes in parallel. Timed from ATTACH (its
    connections and catalog reads, as a job's time includes its connection set-up) to the
    file written; the extension's load, like a worker's imports, is not in it."""
    con = duckdb.connect()
    try:
        version = con.sql("PRAGMA version").fetchone()[0]  # type: ignore[index]
        library = files("duckdb_extension_postgres_scanner").joinpath(
            "extensions", version, "postgres_scanner.duckdb_extension"
        )
        con.execute(f"LOAD '{library}'")  # signed: DuckDB refuses it otherwise
        con.execute(f"SET threads = {os.cpu_count()}")
        started = time.perf_counter()
        con.execute(f"ATTACH '{url}' AS pg (TYPE postgres, READ_ONLY)")
        con.execute(EXPORT.format(cutoff=cutoff, path=path))
        return time.perf_counter() - started
    finally:
        con.close()


if __name__ == "__main__":
    print(export_seconds(*sys.argv[1:4]))
