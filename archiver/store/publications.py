"""delta_tables, each table's publications into its Delta log (numbered, then
published, exactly once: archiver.delta.publish says how) and what its Iceberg table
mirrors of them (archiver.iceberg): the only code that writes it. Every statement is named in store/publications.sql, with the advisory lock that
keeps one publisher per table (archiver.store.publisher_lock).

Three statements here write archive_files too, by design in the same statement as
delta_tables: numbering a publication (which files it adds and removes, and the table's
count), marking one published (the files it removed kept for the readers' retention from
then, for readers of the log before it) and forgetting a table's log for a rebuild. Split in two, a crash or a
concurrent restore between the halves would leave files and count disagreeing. A fourth
takes a table no longer kept out of the Iceberg catalog (iceberg_tables, which pyiceberg
writes otherwise) as it stops waiting for it. The single-writer test lists the four."""

from __future__ import annotations

from typing import NamedTuple

from archiver.bulk import BulkConnection, run_in_transaction
from archiver.db import query


class Mirror(NamedTuple):
    """What a table's Iceberg table holds, as the catalog records it."""

    table: str
    published: int  # the Delta log's publication
    mirrored: int  # the one the Iceberg table holds
    snapshot: int | None

    @property
    def lag(self) -> int:
        """Publications of the Delta log the Iceberg table does not hold yet."""
        return self.published - self.mirrored


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
    conn: BulkConnection, url: str, table: str, publication: int, version: int | None, keep: float
) -> None:
    """Publication `publication` is in the log, at Delta version `version`; the files it
    removed are kept `keep` seconds from now for the readers that opened it before."""
    run_in_transaction(conn, query("delta_published"), (url, table, publication, version, keep))


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


def erasure_out(
    conn: BulkConnection, url: str, table: str, publication: int, *, iceberg: bool = False
) -> int | None:
    """The newest erasure whose history can go once publication `publication` is in the
    log, or in the Iceberg table (store/publications.sql, delta_erasures_out), None: none."""
    params = (url, table, publication, iceberg)
    found = run_in_transaction(conn, query("delta_erasures_out"), params)[0][0]
    return None if found is None else int(found)


def iceberg_state(conn: BulkConnection, url: str, table: str) -> tuple[int, int | None]:
    """(the publication in the Delta log, the one the Iceberg table mirrors: None, none)."""
    rows = run_in_transaction(conn, query("iceberg_state"), (url, table))
    if not rows:
        return 0, None
    published, mirrored = rows[0]
    return int(published), None if mirrored is None else int(mirrored)


def iceberg_files(conn: BulkConnection, url: str, table: str, publication: int) -> list[str]:
    """The paths of the files in the Delta log after publication `publication`."""
    return [
        str(r[0])
        for r in run_in_transaction(conn, query("iceberg_files"), (url, table, publication))
    ]


def iceberg_published(
    conn: BulkConnection, url: str, table: str, publication: int, snapshot: int | None
) -> None:
    """The Iceberg table holds publication `publication`'s files, at `snapshot`."""
    run_in_transaction(conn, query("iceberg_published"), (url, table, publication, snapshot))


def iceberg_dropped(conn: BulkConnection, url: str, table: str, catalog: str) -> None:
    """The table's Iceberg table out of catalog `catalog`, no longer kept."""
    run_in_transaction(conn, query("iceberg_dropped"), (url, table, catalog))


def iceberg_history_forgotten(conn: BulkConnection, url: str, table: str, erased: int) -> None:
    """The Iceberg table's snapshots before erasure `erased` are expired."""
    run_in_transaction(conn, query("iceberg_history_forgotten"), (url, table, erased))


def iceberg_mirrors(conn: BulkConnection, url: str) -> list[Mirror]:
    """Every table of storage `url` with an Iceberg table, and what it holds."""
    rows = run_in_transaction(conn, query("iceberg_tables_state"), (url,))
    return [Mirror(str(t), int(p), int(m), None if s is None else int(s)) for t, p, m, s in rows]
