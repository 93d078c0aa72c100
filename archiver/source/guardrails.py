"""Manners toward the application's database: who holds the lock a chunk timed out on,
how far replicas lag behind, and the marker that tells CDC consumers a chunk's deletes are
archival."""

from __future__ import annotations

import time

from archiver.bulk import BulkConnection, BulkCursor, fetch_and_rollback
from archiver.errors import InputError
from archiver.source.tables import TableInfo

LOCK_NOT_AVAILABLE = "55P03"  # SQLSTATE of a lock_timeout
DEADLOCK_DETECTED = "40P01"
_LOCK_HOLDERS = r"""
SELECT l.pid, l.mode, COALESCE(NULLIF(a.application_name, ''), 'unnamed'),
       left(regexp_replace(a.query, '\s+', ' ', 'g'), 80)
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.relation = $1::bigint::oid AND l.granted AND l.pid <> pg_backend_pid()
  AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
ORDER BY l.pid
"""


def transaction_id(conn: BulkConnection) -> str:
    """The id of the connection's open transaction (assigned now if it has none), kept
    open: what a catalog in another database records before the source commits."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_xact_id()::text")
        return str(cur.fetchall()[0][0])


def transaction_status(conn: BulkConnection, xid: str) -> str | None:
    """pg_xact_status of transaction `xid`: committed, aborted, in progress; None when it
    is too old for the server to remember."""
    rows = fetch_and_rollback(conn, "SELECT pg_xact_status($1::text::xid8)", (xid,))
    return str(rows[0][0]) if rows and rows[0][0] is not None else None


def lock_holders(conn: BulkConnection, table: TableInfo) -> str:
    """Who holds a lock on `table` that a chunk's DELETE or SELECT would wait for."""
    rows = fetch_and_rollback(conn, _LOCK_HOLDERS, (table.oid,))
    return "; ".join(f"pid {p} ({mode}, {app}: {query})" for p, mode, app, query in rows)


_REPLICA_LAG = """
SELECT GREATEST(
         (SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)) FROM pg_stat_replication),
         (SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)) FROM pg_replication_slots),
         0)::bigint,
       COALESCE((SELECT max(extract(epoch FROM replay_lag)) FROM pg_stat_replication), 0)::float8,
       pg_has_role('pg_read_all_stats', 'USAGE')
"""


def replica_lag(conn: BulkConnection) -> tuple[int, float]:
    """(bytes the furthest replica or replication slot is behind, its replay lag in
    seconds) on the source. Without pg_read_all_stats (pg_monitor has it) the replicas'
    positions read NULL and no lag would ever show: refused instead."""
    behind, seconds, allowed = fetch_and_rollback(conn, _REPLICA_LAG)[0]
    if not allowed:
        raise InputError(
            "--max-replica-lag: this role cannot read replicas' positions in "
            "pg_stat_replication; GRANT pg_monitor (or pg_read_all_stats) to it"
        )
    return int(behind), float(seconds)


CDC_PREFIX = "archiver"


def emit_cdc_marker(cur: BulkCursor, content: str) -> None:
    """A transactional logical decoding message in the chunk's transaction: decoded with
    its deletes, and only if they commit (pg_logical_emit_message, any wal_level)."""
    cur.execute("SELECT pg_logical_emit_message(true, $1::text, $2::text)", (CDC_PREFIX, content))
    cur.fetchall()


def wal_position(conn: BulkConnection) -> int:
    """The source cluster's WAL insert position, in bytes."""
    return int(
        fetch_and_rollback(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")[0][
            0
        ]
    )


_DEAD_TUPLES = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::bigint::oid"


def dead_tuples(conn: BulkConnection, table: TableInfo) -> int:
    """Dead row versions in `table`, as the statistics say now (they lag by a second)."""
    rows = fetch_and_rollback(conn, _DEAD_TUPLES, (table.oid,))
    return int(rows[0][0] or 0) if rows else 0


def vacuum(conn: BulkConnection, table: TableInfo) -> float:
    """VACUUM (ANALYZE) the table (outside a transaction, as it must run); its seconds."""
    started = time.monotonic()
    conn.adbc_connection.set_autocommit(True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"VACUUM (ANALYZE) {table.quoted}")
    finally:
        conn.adbc_connection.set_autocommit(False)
    return time.monotonic() - started
