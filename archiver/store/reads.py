"""The reads that span the state tables (archive_files with delta_tables and
background_jobs) for `archiver query` and the orphan sweep. Each runs on the caller's
ADBC cursor, in its transaction (a query's exported snapshot); every statement is named
in store/reads.sql. Writes nothing (serve's own reads: store/served.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.db import query


def writers_at_work(conn: BulkConnection, job_ids: list[str], operations: list[int]) -> set[str]:
    """Of these jobs and ledger operations, those still at work (a job queued or running,
    an operation running), named as files.names.writer_of names them; rolled back."""
    args = (json.dumps(job_ids), json.dumps(operations))
    return {str(r[0]) for r in fetch_and_rollback(conn, query("orphans_writers_at_work"), args)}


def archived_tables(cur: Any) -> list[str]:
    """Every catalogued table (schema.table), in order."""
    cur.execute(query("catalog_archived"))
    return [str(r[0]) for r in cur.fetchall() if r[0]]


def named_tables(cur: Any, names: Iterable[str]) -> list[str]:
    """The tables `names` name (as a statement writes them: bare or schema.table, any
    case): catalogued ones, and the source's with archive jobs queued but no file yet."""
    cur.execute(query("catalog_named"), (json.dumps(sorted(names)),))
    return sorted({str(r[0]) for r in cur.fetchall() if r[0]})


def delta_exact(cur: Any, location: str, tables: list[str]) -> set[str]:
    """Those of `tables` whose Delta table on `location` holds exactly their committed
    files at the cursor's snapshot."""
    cur.execute(query("catalog_delta_exact"), (location, json.dumps(tables)))
    return {str(r[0]) for r in cur.fetchall()}


def committed_files(
    cur: Any, location: str, live: bool, exact: set[str], tables: list[str]
) -> list[tuple[Any, ...]]:
    """The committed files of `tables` on `location` (where `live` is False, of the
    `exact` tables only the offline ones): (table, path, offline, delta, job mode, key
    column, min key, max key, cutoff column, min cutoff, max cutoff as UTC text, Delta
    schema or '')."""
    params = (location, live, json.dumps(sorted(exact)), json.dumps(tables))
    cur.execute(query("catalog_committed_files"), params)
    return list(cur.fetchall())
