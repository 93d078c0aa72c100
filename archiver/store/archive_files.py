"""archive_files, archiver's catalog of what it archived (and archive_verifications, and
the per-table file counts): the only code that writes them. Every statement is named in
store/archive_files.sql. Reads of the event loop use asyncpg; a job's thread, a ledger operation
and a publication write on their synchronous ADBC connection, in the transaction the
caller commits (so a file's row commits with what it stands for)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

import asyncpg

from archiver.bulk import BulkConnection, Row, fetch_and_rollback, fetch_records, run_in_transaction
from archiver.db import query
from archiver.ident import TableName
from archiver.model import ArchivedFile, CatalogFile, FileState


async def job_files(conn: asyncpg.Connection, job_id: uuid.UUID) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(query("job_files"), job_id)]


async def catalogued_tables(conn: asyncpg.Connection, table: str) -> list[str]:
    """`table`, as a user writes it (PostgreSQL's syntax, see ident.TableName.parse), as
    the catalog names it: schema.table when the schema is given, else every catalogued
    schema.table of that bare name (a loose index scan, not a read of every file)."""
    name = TableName.parse(table)
    if name.schema is not None:
        return [str(name)]
    return [r[0] for r in await conn.fetch(query("catalogued_tables_named"), name.name)]


async def catalogued_among(
    conn: asyncpg.Connection, storage_url: str, paths: list[str]
) -> set[str]:
    """Which of `paths` the catalog holds on `storage_url`, in any state."""
    return {
        r[0] for r in await conn.fetch(query("catalogued_among"), storage_url, json.dumps(paths))
    }


async def archived_files(
    conn: asyncpg.Connection,
    *,
    job_id: uuid.UUID | None = None,
    table: str | None = None,
    cutoff_from: dt.datetime | None = None,
    cutoff_to: dt.datetime | None = None,
    state: str | None = None,
) -> list[CatalogFile]:
    """Catalogued files for restore and verify, in archive order. `table`: schema.table,
    or a bare name matching it in any schema."""
    tables = None if table is None else await catalogued_tables(conn, table)
    rows = await conn.fetch(query("archived_files"), job_id, tables, cutoff_from, cutoff_to, state)
    return [CatalogFile.from_row(r) for r in rows]


# -- a job's files (its thread, ADBC: in the chunk's transaction) ------------------------


def insert(conn: BulkConnection, f: ArchivedFile, state: FileState, xid: str | None = None) -> None:
    """Record `f` in the connection's open transaction."""
    run_in_transaction(
        conn,
        query("insert_file"),
        (
            f.job_id, f.part, f.source_table, f.storage_url, f.path, f.row_count, f.byte_size,
            f.md5, json.dumps(f.key_columns), json.dumps(f.min_key), json.dumps(f.max_key),
            f.cutoff_column, f.min_cutoff_value or "-infinity", f.max_cutoff_value or "infinity",
            str(state), xid or "", f.delta_schema, f.delta_stats, str(f.delta).lower(), f.tier,
            f.made_by,
        ),
    )  # fmt: skip


def confirm(conn: BulkConnection, job_id: str, part: int) -> None:
    """A pending file's source transaction committed: the file is committed."""
    run_in_transaction(conn, query("confirm_file"), (job_id, part))


def drop_rolled_back(conn: BulkConnection, job_id: str, part: int) -> None:
    """A pending file's source transaction rolled back: its row goes."""
    run_in_transaction(conn, query("forget_file"), (job_id, part))


# -- a ledger operation's files (ADBC, in the operation's transaction) ------------------


def claim(conn: BulkConnection, ids: Sequence[int], operation: int) -> list[Row]:
    """Files `ids` claimed by `operation` (a restore with its catalog apart): the rows
    of those still committed and unclaimed."""
    return run_in_transaction(conn, query("ledger_claim_files"), (json.dumps(list(ids)), operation))


def unclaim(conn: BulkConnection, operation: int) -> None:
    run_in_transaction(conn, query("ledger_unclaim"), (operation,))


def retire(conn: BulkConnection, ids: Sequence[int], operation: int, keep: float) -> None:
    """Files `ids` retired by `operation`, kept `keep` seconds for open readers (an
    erasure's not)."""
    run_in_transaction(conn, query("ledger_retire"), (json.dumps(list(ids)), operation, keep))


def stop_keeping(conn: BulkConnection, operation: int) -> None:
    """`operation`'s retired files no longer kept for readers (it was undone)."""
    run_in_transaction(conn, query("ledger_unkeep"), (operation,))


def delete_retired(conn: BulkConnection, ids: Sequence[int]) -> None:
    """Retired files whose blobs are deleted: their rows go."""
    run_in_transaction(conn, query("reaped"), (json.dumps(list(ids)),))


# -- a publication's look at its files (ADBC) -----------------------------------------


class Publishing(NamedTuple):
    """A file a publication adds to the Delta log, as the catalog has it (its Delta
    schema and statistics empty where it was archived before they were recorded)."""

    id: int
    path: str
    byte_size: int
    row_count: int
    delta_schema: str | None
    delta_stats: str | None
    created_ms: int
    made_by: int | None


def in_publication(
    conn: BulkConnection, storage_url: str, table: str, publication: int
) -> list[Publishing]:
    """The files publication `publication` adds, oldest first, in the open transaction."""
    rows = run_in_transaction(conn, query("delta_files"), (storage_url, table, publication))
    return [
        Publishing(int(i), str(p), int(b), int(r), s, st, int(c), None if m is None else int(m))
        for i, p, b, r, s, st, c, m in rows
    ]


def mark_not_in_delta(conn: BulkConnection, file_id: int) -> None:
    """A file the publisher found not to be a Delta file of this table."""
    run_in_transaction(conn, query("delta_not_mine"), (file_id,))


def set_facts(conn: BulkConnection, file_id: int, schema: str, stats: str) -> None:
    """The Delta schema and statistics of a file written before they were recorded."""
    run_in_transaction(conn, query("delta_facts"), (file_id, schema, stats))


def refuse_for_delta(conn: BulkConnection, file_id: int, why: str) -> None:
    """A file its Delta table cannot take (`why`): left out of it, and said."""
    run_in_transaction(conn, query("delta_refuse"), (file_id, why))


def unnumber(conn: BulkConnection, file_id: int) -> None:
    """A file rewritten with Delta's types: out of its publication, to be numbered again."""
    run_in_transaction(conn, query("delta_unnumber"), (file_id,))


# -- reads on an ADBC connection: a job's own files (the Catalog seam), a ledger
# -- operation's and the sweeps'; each rolled back unless it says otherwise -----------


def next_part(conn: BulkConnection, job_id: str) -> int:
    return int(fetch_and_rollback(conn, query("next_part"), (job_id,))[0][0])


def job_paths(conn: BulkConnection, job_id: str) -> set[str]:
    return {str(r[0]) for r in fetch_and_rollback(conn, query("job_paths"), (job_id,))}


def file_schemas(conn: BulkConnection, table: str) -> list[str | None]:
    """The distinct Delta schemas of `table`'s committed files."""
    return [r[0] for r in fetch_and_rollback(conn, query("table_file_schemas"), (table,))]


def committed_totals(conn: BulkConnection, job_id: str) -> Row:
    """The job's committed files: their count, rows, bytes and last key."""
    return fetch_and_rollback(conn, query("committed_progress"), (job_id,))[0]


def pending(conn: BulkConnection, job_id: str) -> list[Row]:
    """The job's pending files: part, path, source transaction."""
    return fetch_and_rollback(conn, query("pending_files"), (job_id,))


def catalog_file(conn: BulkConnection, file_id: int) -> CatalogFile:
    """One catalogued file, in the connection's open transaction."""
    with conn.cursor() as cur:
        cur.execute(query("catalog_file"), (file_id,))
        return CatalogFile.from_row(cur.fetch_arrow_table().to_pylist()[0])


def is_catalogued(conn: BulkConnection, storage_url: str, path: str) -> bool:
    """Whether the catalog holds `path` on `storage_url`, in any state; rolled back."""
    return bool(fetch_and_rollback(conn, query("catalogued_path"), (storage_url, path))[0][0])


def reapable(conn: BulkConnection, storage_url: str, table: str, after: int) -> list[Row]:
    """The next batch of `table`'s retired files out of its Delta log (id, path), ids
    above `after`; rolled back."""
    return fetch_and_rollback(conn, query("reapable"), (storage_url, table, after))


def lock_unretired(conn: BulkConnection, ids: Sequence[int]) -> int:
    """In the open transaction: lock those of the files `ids` not retired; how many."""
    return len(run_in_transaction(conn, query("ledger_lock_files"), (json.dumps(list(ids)),)))


def table_paths(conn: BulkConnection, storage_url: str, table: str) -> set[str]:
    """Every name the catalog holds of `table`'s files on `storage_url`, in any state."""
    return {
        r[0] for r in fetch_and_rollback(conn, query("orphans_catalogued"), (storage_url, table))
    }


def compactable(conn: BulkConnection, storage_url: str, table: str) -> list[dict[str, Any]]:
    """Every committed file of the finished jobs that archived `table` (compact_files),
    each with `in_log`; rolled back."""
    return fetch_records(conn, query("compact_files"), (storage_url, table))


# -- tiers, protection, verification (asyncpg) ----------------------------------------


async def unverified(conn: asyncpg.Connection, ids: Sequence[int]) -> list[int]:
    """Of files `ids`, those no `archiver verify` found sound since they were written."""
    return [r[0] for r in await conn.fetch(query("files_unverified"), list(ids))]


async def going_offline(conn: asyncpg.Connection, ids: Sequence[int], keep: float | None) -> None:
    """Files about to move to the Archive tier: out of their Delta tables first, their
    blobs kept readable `keep` seconds after that for the readers that opened it before
    (None: found there already)."""
    await conn.execute(query("files_going_offline"), list(ids), keep)


async def kept_for_readers(conn: asyncpg.Connection, storage_url: str) -> tuple[int, int]:
    """How many files of the storage are kept for the readers' retention, and their bytes."""
    files, nbytes = await conn.fetchrow(query("kept_for_readers"), storage_url)
    return int(files), int(nbytes)


async def waiting_for_archive(conn: asyncpg.Connection, ids: Sequence[int]) -> list[dt.datetime]:
    """Of files `ids`, offline, those not in the Archive tier yet: until when each waits."""
    return [r[0] for r in await conn.fetch(query("files_waiting_for_archive"), list(ids))]


def offline_due(conn: BulkConnection, storage_url: str, table: str) -> list[Row]:
    """The table's offline files whose blobs may move to the Archive tier now (id,
    path); rolled back."""
    return fetch_and_rollback(conn, query("offline_due"), (storage_url, table))


def moved_to_archive(conn: BulkConnection, ids: Sequence[int]) -> None:
    run_in_transaction(conn, query("files_moved_to_archive"), (json.dumps(list(ids)),))


async def set_tier(conn: asyncpg.Connection, ids: Sequence[int], tier: str) -> None:
    await conn.execute(query("files_tier"), list(ids), tier)


async def back_online(
    conn: asyncpg.Connection, ids: Sequence[int], tier: str, archived: Sequence[int]
) -> None:
    """Rehydrated files (those of `archived`, seen in the Archive tier) and files that
    had not moved there yet: online in `tier`, to rejoin their Delta tables."""
    await conn.fetch(query("files_back_online"), list(ids), tier, list(archived))


async def protected(
    conn: asyncpg.Connection, ids: Sequence[int], until: dt.datetime | None, legal_hold: bool | None
) -> None:
    await conn.execute(query("files_protected"), list(ids), until, legal_hold)


async def verified(
    conn: asyncpg.Connection,
    sound: Sequence[int],
    *,
    actor: str,
    scope: str,
    checked: list[Any],
    files: int,
    problems: list[str],
) -> None:
    """Verify's outcome: `sound` files marked verified, the run recorded (the console
    shows the last)."""
    await conn.execute(query("files_verified"), list(sound))
    await conn.execute(
        query("record_verification"), actor, scope, json.dumps(checked), files, len(problems),
        json.dumps(problems[:10]),
    )  # fmt: skip


async def compact_counts(pool: asyncpg.Pool) -> None:
    """Fold the catalogued-files count deltas (sql/014_status_counts.sql) into a row per
    table; the pruner calls it after each sweep."""
    await pool.execute(query("compact_file_counts"))


async def has_files(conn: asyncpg.Connection, table: str) -> bool:
    """Whether the catalog holds any file of `table` (schema.table), in any state."""
    return bool(await conn.fetchval(query("table_has_files"), table))


async def retired_left(
    conn: asyncpg.Connection, storage_url: str, table: str
) -> list[tuple[str, bool]]:
    """`table`'s retired files still stored: (path, kept on purpose for the readers'
    retention, for readers of the Delta log before it)."""
    rows = await conn.fetch(query("retired_left"), storage_url, table)
    return [(str(r[0]), bool(r[1])) for r in rows]


async def ids_at(conn: asyncpg.Connection, storage_url: str, paths: list[str]) -> list[int]:
    """The catalog ids of the files at `paths` on `storage_url`."""
    return [int(r[0]) for r in await conn.fetch(query("file_ids_at"), storage_url, paths)]


async def published_paths(conn: asyncpg.Connection, storage_url: str, table: str) -> set[str]:
    """The paths of `table`'s files its Delta log holds, as the catalog says: added by a
    published publication, not yet removed by one."""
    return {str(r[0]) for r in await conn.fetch(query("published_paths"), storage_url, table)}
