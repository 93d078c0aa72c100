-- archive_ledger, and the table locks its operations and compaction take: every query
-- by name. Written only through archiver/store/ledger.py.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: prune_ledger
-- The housekeeping operations' ledger rows (a compaction's, a conversion's) finished
-- before the retention, none of whose retired files is left: no reader needs them (the
-- sweep reads running ones, the publisher the retirements of files still in its log).
-- Restores, erasures and purges stay: who took what out of the archive, and when.
DELETE FROM archive_ledger WHERE id IN (
    SELECT l.id FROM archive_ledger l
    WHERE l.operation IN ('compact', 'convert') AND l.status <> 'running'
      AND l.finished_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (
          SELECT 1 FROM archive_files f WHERE f.retired_by = l.id AND f.state = 'retired')
    LIMIT $2)

-- name: ledger_begin
-- An operation that takes rows out of the archive (archiver.ledger), its lock taken in
-- the same transaction: a running row whose lock is free was left by a dead process.
WITH l AS (
    INSERT INTO archive_ledger (operation, actor, storage_url, tables, request)
    VALUES ($1, $2, $3, ARRAY(SELECT jsonb_array_elements_text($4::jsonb)), $5::jsonb)
    RETURNING id
)
SELECT id, pg_advisory_lock(hashtextextended('archiver.ledger ' || id, 0))::text FROM l

-- name: ledger_held
-- Whether this session still holds operation $1's lock (a bigint key: classid holds its
-- high 32 bits, objid its low ones). False once the session ended: the sweep may have
-- taken the operation for dead and deleted what it had written.
WITH k AS (SELECT hashtextextended('archiver.ledger ' || $1::bigint, 0) AS key)
SELECT EXISTS (
    SELECT 1 FROM pg_locks, k
    WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1
      AND classid::bigint = (k.key >> 32) & 4294967295 AND objid::bigint = k.key & 4294967295)

-- name: ledger_unlock
SELECT pg_advisory_unlock(hashtextextended('archiver.ledger ' || $1::bigint, 0))

-- name: ledger_running
-- Operations on storage $1 still running, with the lock of each free: left by a dead
-- process (the lock is taken here, held until ledger_unlock); with the source
-- transaction and intent of a restore into another database (sql/015).
WITH running AS MATERIALIZED (
    SELECT id, tables, source_xid, intent FROM archive_ledger
    WHERE storage_url = $1 AND status = 'running'
)
SELECT id, array_to_json(tables)::text, source_xid::text, intent::text FROM running
WHERE pg_try_advisory_lock(hashtextextended('archiver.ledger ' || id, 0))

-- name: ledger_intent
UPDATE archive_ledger SET source_xid = $2::text::xid8, intent = $3::jsonb
WHERE id = $1::bigint AND status = 'running'

-- name: ledger_intent_of
SELECT intent::text FROM archive_ledger WHERE id = $1::bigint

-- name: ledger_done
UPDATE archive_ledger SET status = 'done', finished_at = now(), rows = $2::bigint,
                          detail = $3::jsonb, intent = NULL
WHERE id = $1::bigint AND status = 'running'

-- name: ledger_abandon
UPDATE archive_ledger SET status = 'abandoned', finished_at = now()
WHERE id = $1::bigint AND status = 'running'

-- name: table_hold
-- A command that takes files of a table out of the archive, rewrites or moves them
-- (restore, erase, purge, tier, rehydrate, protect) holds it shared for its duration:
-- a compaction of the table then yields rather than commit (table_merge).
SELECT pg_advisory_lock_shared(hashtextextended('archiver.table ' || $1 || ' ' || $2, 0))

-- name: table_release
SELECT pg_advisory_unlock_shared(hashtextextended('archiver.table ' || $1 || ' ' || $2, 0))

-- name: table_merge
-- A compaction's commit, in its transaction: false when a command holds the table (the
-- compaction yields); a command that asks meanwhile waits for this commit, milliseconds.
SELECT pg_try_advisory_xact_lock(hashtextextended('archiver.table ' || $1 || ' ' || $2, 0))

-- name: sweep_tables
-- Tables on storage $1 the ledger sweep may have work on: those of operations still
-- running (their process may have died), and those with retired files out of their
-- Delta log whose blobs can go (as reapable says).
SELECT unnest(tables) FROM archive_ledger WHERE storage_url = $1 AND status = 'running'
UNION
SELECT DISTINCT f.source_table FROM archive_files f
LEFT JOIN delta_tables d USING (storage_url, source_table)
WHERE f.storage_url = $1 AND f.state = 'retired'
  AND (CASE WHEN f.publication IS NULL THEN coalesce(d.iceberg_published, 1) <> 0
            ELSE f.unpublication <= least(d.published, d.iceberg_published) END)
  AND (f.kept_until IS NULL OR f.kept_until <= now()) AND NOT archiver_seen_committed(f.retired_xid)
