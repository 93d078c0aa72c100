"""The statements of the backlog plan (archive.backlog): a table's old rows read or
deleted by ranges of its pages (a TID Range Scan, PostgreSQL 14+), whatever their key
order. The range's bounds are tids handed over as transaction-local settings, as every
chunk's values are (source.chunks)."""

from __future__ import annotations

from archiver.bulk import BulkConnection, BulkCursor, fetch_and_rollback
from archiver.source.chunks import ChunkQueries

FROM, TO = "archiver.ctid_from", "archiver.ctid_to"


def table_pages(conn: BulkConnection, queries: ChunkQueries) -> int:
    """The table's heap pages now (not the planner's relpages, which lag behind)."""
    rows = fetch_and_rollback(
        conn,
        "SELECT pg_relation_size($1::regclass) / current_setting('block_size')::bigint",
        (queries.table.quoted,),
    )
    return int(rows[0][0])


def bind_pages(cur: BulkCursor, first: int, end: int | None) -> None:
    """The range's pages, [first, end) (None: to the table's end), for the statement
    after; within the chunk's transaction, after source.binding.bind_chunk."""
    cur.execute(
        "SELECT set_config($1, $2, true), set_config($3, $4, true)",
        (FROM, f"({first},0)", TO, f"({end if end is not None else 0},0)"),
    )
    cur.fetchall()


def _in_pages(queries: ChunkQueries, *, bounded: bool) -> str:
    ctid = f"{queries.table.quoted}.ctid"
    cond = f"{ctid} >= current_setting('{FROM}')::tid"
    if bounded:
        cond += f" AND {ctid} < current_setting('{TO}')::tid"
    return f"{cond} AND {queries.older()}"


def read_pages(queries: ChunkQueries, *, bounded: bool) -> str:
    """Copy: the range's rows older than the cutoff, in the job's snapshot. `bounded`:
    the range has an end (the last range runs to the table's end)."""
    t = queries.table
    return (
        f"SELECT {queries.select_list} FROM {t.quoted} WHERE {_in_pages(queries, bounded=bounded)}"
    )


def delete_pages(queries: ChunkQueries, *, bounded: bool, skip_locked: bool) -> str:
    """Move: delete the range's rows older than the cutoff and return them.

    Waiting (`skip_locked=False`): one pass, the DELETE waits for a row another
    transaction holds (bounded by the caller's lock_timeout). PostgreSQL rechecks a row
    changed meanwhile against the statement's Filter (the cutoff); 15's TidRangeRecheck
    does not recheck the range, so its newest version is taken even where the update
    moved it to another page, and only once, since it is then deleted (a release that
    rechecks the range leaves it for the next archive: one place either way). Skipping (`skip_locked=True`): the range's
    old rows are locked first, skipping those others hold, then deleted by ctid (as
    ChunkQueries.take does); the rows skipped stay for the next archive."""
    t = queries.table
    where = _in_pages(queries, bounded=bounded)
    if skip_locked:
        chosen = f"SELECT ctid FROM {t.quoted} WHERE {where} FOR UPDATE SKIP LOCKED"
        where = f"ctid = ANY (ARRAY ({chosen})) AND {queries.older()}"
    return f"DELETE FROM {t.quoted} WHERE {where} RETURNING {queries.select_list}"
