"""delta_tables, each table's publications into its Delta log (numbered, then
published, exactly once: archiver.delta.publish says how): the only code that writes
it. Every statement is named in store/publications.sql, with the advisory lock that
keeps one publisher per table (archiver.delta.lock).

Three statements here write archive_files too, by design in the same statement as
delta_tables: numbering a publication (which files it adds and removes, and the table's
count), marking one published (a compaction's inputs kept a day for readers of the log
before it) and forgetting a table's log for a rebuild. Split in two, a crash or a
concurrent restore between the halves would leave files and count disagreeing; the
single-writer test lists these three by name."""

from __future__ import annotations

from archiver.bulk import BulkConnection, run_in_transaction
from archiver.db import query


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
