"""The live side of `--with-live`: the source database attached to DuckDB read-only by
its postgres scanner, the catalog's snapshot imported first thing in DuckDB's transaction
(checked on both sides), and every scan of the source kept at that snapshot."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from archiver.config import Settings
from archiver.db import application_name
from archiver.errors import InputError
from archiver.query.catalog import Snapshot
from archiver.query.engine import load_extension

LIVE_DB = "archiver_live"  # the attached source database, in DuckDB


def import_snapshot(con: Any, snapshot: Snapshot) -> None:
    """Step 2: DuckDB's transaction on the source reads at the catalog's snapshot."""
    con.execute("BEGIN")
    exported = snapshot.exported.replace("'", "")
    con.execute(f"CALL postgres_execute('{LIVE_DB}', 'SET TRANSACTION SNAPSHOT ''{exported}''')")
    seen = con.execute(
        f"SELECT * FROM postgres_query('{LIVE_DB}', 'SELECT pg_current_snapshot()::text')"
    ).fetchall()[0][0]
    if seen != snapshot.current:
        raise InputError(
            f"query --with-live: the live rows would be read at another snapshot ({seen}) "
            f"than the catalog's ({snapshot.current}); nothing returned"
        )


def pin_scans(con: Any, sql: str) -> None:
    """Every read of the source in `sql` at the imported snapshot. DuckDB 1.5.5's
    postgres scanner reads a big table in ctid ranges on several connections, the others
    pinned to an export of its transaction's snapshot; but in a statement with more than
    one scan of the attached database it reads the first range of each such scan on a
    pooled connection it never pins (duckdb-postgres b7632f3 fixes it, after 1.5.5): rows
    committed after the snapshot are then read or missed (tests/integration/test_with_live_commits.py).
    Without ctid ranges, every scan runs on the transaction's own connection: alone, it
    streams; beside others, each is read into memory first (the scanner's way of sharing
    one connection). So ranges only where the plan has exactly one scan of the source."""
    con.execute("SET pg_use_ctid_scan = false")
    try:
        plan = con.execute(f"EXPLAIN (FORMAT json) {sql}").fetchall()[0][1]
    except Exception:  # the statement's own error is the query's to report
        return
    if _scans(json.loads(plan)) == 1:
        con.execute("SET pg_use_ctid_scan = true")


def _scans(node: Any) -> int:
    """The POSTGRES_SCAN operators of a physical plan (EXPLAIN's JSON)."""
    if isinstance(node, list):
        return sum(_scans(n) for n in node)
    if not isinstance(node, dict):
        return 0
    return (node.get("name") == "POSTGRES_SCAN") + _scans(node.get("children", []))


@contextlib.contextmanager
def attached(con: Any, settings: Settings) -> Iterator[None]:
    """The source database attached read-only in DuckDB, by its postgres scanner."""

    load_extension(con, "postgres_scanner")
    url = _named(settings.effective_source_url).replace("'", "''")
    con.execute(f"ATTACH '{url}' AS {LIVE_DB} (TYPE postgres, READ_ONLY)")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            con.execute("ROLLBACK")


def _named(url: str) -> str:
    """`url` with this process's application_name (archiver.interrupt ends its sessions
    by it), unless it names one."""
    from urllib.parse import quote

    if "application_name=" in url:
        return url
    if url.startswith(("postgres://", "postgresql://")):
        return f"{url}{'&' if '?' in url else '?'}application_name={quote(application_name())}"
    return f"{url} application_name='{application_name()}'"
