"""archiver serve's reads of the catalog (archive_files with background_jobs): the files
a statement reads, on a libpq connection of serve's (psycopg's binding, loaded by serve
alone: the CLI's commands never import it), and what serve declares of each table.
Every statement is named in store/served.sql. Writes nothing."""

from __future__ import annotations

import json
from typing import Any

from psycopg.pq import DiagnosticField, ExecStatus
from psycopg.pq.abc import PGconn, PGresult

from archiver.db import query
from archiver.errors import DatabaseUnavailable


def served_files(
    conn: PGconn,
    names: list[str],
    storage: str,
    retired: bool,
    ranges: dict[str, list[Any]] | None = None,
) -> list[tuple[Any, ...]]:
    """serve's files of the tables `names` name (schema.table, a bare name, `*`: every
    table) on `storage` (store/reads.sql, served_files, says which), those whose integer
    key meets none of `ranges` (statement.integer_ranges) left out: (table, path,
    offline, delta, job mode, key column, min key, max key, cutoff column, min cutoff,
    max cutoff, id, retired, integer key). On a libpq connection of serve's, the
    statement prepared once on it: serve asks it for every statement, where ADBC's
    conversions of parameters and rows, and the server's planning of it each time,
    would cost more than the lookup's own read (docs/performance.md)."""
    params = [json.dumps(names).encode(), storage.encode(), b"t" if retired else b"f",
              json.dumps(ranges or {}).encode()]  # fmt: skip
    res = conn.exec_prepared(b"served_files", params)
    if (
        res.status == ExecStatus.FATAL_ERROR
        and res.error_field(DiagnosticField.SQLSTATE) == b"26000"
    ):
        _checked(conn.prepare(b"served_files", query("served_files").encode()))
        res = conn.exec_prepared(b"served_files", params)
    _checked(res)
    get, out = res.get_value, []
    for row in range(res.ntuples):
        text = [
            None if (v := get(row, c)) is None else v.decode()
            for c in (0, 1, 4, 5, 6, 7, 8, 9, 10, 11)
        ]
        out.append((text[0], text[1], get(row, 2) == b"t", get(row, 3) == b"t", *text[2:9],
                    None if text[9] is None else int(text[9]), get(row, 12) == b"t",
                    get(row, 13) == b"t"))  # fmt: skip
    return out


def _checked(res: PGresult | None) -> PGresult:
    if res is None or res.status not in (ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK):
        said = b"" if res is None else res.error_message
        raise DatabaseUnavailable(
            f"the catalog's files could not be read: {said.decode(errors='replace').strip()}"
        )
    return res


def served_signature(cur: Any, storage: str) -> tuple[Any, ...]:
    """What changes whenever a file on `storage` is committed or leaves: serve declares
    its tables again then."""
    cur.execute(query("served_signature"), (storage,))
    return tuple(cur.fetchall()[0])


def served_definitions(cur: Any, storage: str) -> list[tuple[Any, ...]]:
    """(table, path, key columns, id) of the newest committed file of each distinct
    schema of each table on `storage`, each table's newest first."""
    cur.execute(query("served_definitions"), (storage,))
    rows = cur.fetchall()
    return sorted(rows, key=lambda r: (str(r[0]), -int(r[3])))
