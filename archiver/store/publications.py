"""delta_tables, each table's publications into its Delta log (numbered, then
published, exactly once: archiver.delta.publish says how): the only code that writes
it. Every statement is named in store/publications.sql, with the advisory lock that
keeps one publisher per table (archiver.store.publisher_lock).

Three statements here write archive_files too, by design in the same statement as
delta_tables: numbering a publication (which files it adds and removes, and the table's
count), marking one published (a compaction's inputs kept a day for readers of the log
before it) and forgetting a table's log for a rebuild. Split in two, a crash or a
concurrent restore between the halves would leave files and count disagreeing; the
single-writer test lists these three by name."""

from __future__ import annotations

from typing import NamedTuple

from archiver.bulk import BulkConnection, run_in_transaction
from archiver.db import query


class Removal(NamedTuple):
    """A file a publication takes out of the Delta log."""

    path: str
    byte_size: int
    merged_by: int | None  # the compaction (its ledger id) that retired it: rows moved, not gone


def ensure(conn: BulkConnection, url: str, table: str) -> None:
    """The table's row, made if it has none."""
    run_in_transaction(conn, query("delta_table"), (url, table))


def mark_rebuilding(conn: BulkConnection, url: str, table: str) -> None:
    """A rebuild asked for: until it ends, the next publisher rebuilds."""
    run_in_transaction(conn, query("delta_rebuild_mark"), (url, table))


def renumber_all(conn: BulkConnection, url: str, table: str) -> None:
    """The log is derived: every file of the table to be numbered again from 1."""
    run_in_transaction(conn, query("delta_forget"), (url, table))


def number(conn: BulkConnection, url: str, table: str, publication: int, limit: int) -> bool:
    """Publication `publication`: up to `limit` committed files not in the log added by
    it, every retired or offline one in the log removed by it. False when it has
    nothing to do (not numbered)."""
    return bool(run_in_transaction(conn, query("delta_number"), (url, table, publication, limit)))


def history_forgotten(conn: BulkConnection, url: str, table: str, erased: object) -> None:
    run_in_transaction(conn, query("delta_history_forgotten"), (url, table, erased))


def published(
    conn: BulkConnection, url: str, table: str, publication: int, version: int | None
) -> None:
    """Publication `publication` is in the log, at Delta version `version`."""
    run_in_transaction(conn, query("delta_published"), (url, table, publication, version))


def rebuilding(conn: BulkConnection, url: str, table: str) -> bool:
    """Whether a rebuild of the table's log was asked for, or cut short."""
    return bool(run_in_transaction(conn, query("delta_rebuilding"), (url, table))[0][0])


def removals_pending(conn: BulkConnection, url: str, table: str) -> bool:
    """Whether files of the table's log must leave it (retired, or offline)."""
    return bool(run_in_transaction(conn, query("delta_removals_pending"), (url, table))[0][0])


def state(conn: BulkConnection, url: str, table: str) -> tuple[int, int]:
    """(publications numbered, publications published) of the table, its row locked until
    the caller commits."""
    numbered, done = run_in_transaction(conn, query("delta_state"), (url, table))[0]
    return int(numbered), int(done)


def removals(conn: BulkConnection, url: str, table: str, publication: int) -> list[Removal]:
    """The files publication `publication` takes out of the log, oldest first."""
    rows = run_in_transaction(conn, query("delta_removals"), (url, table, publication))
    return [Removal(str(p), int(s), None if m is None else int(m)) for p, s, m in rows]


def erasure_out(conn: BulkConnection, url: str, table: str, publication: int) -> int | None:
    """The newest erasure whose history can go once publication `publication` is in the
    log (store/publications.sql, delta_erasures_out), None: none."""
    found = run_in_transaction(conn, query("delta_erasures_out"), (url, table, publication))[0][0]
    return None if found is None else int(found)
