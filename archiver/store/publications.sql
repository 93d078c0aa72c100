-- delta_tables, a table's publications into its Delta log, and the publisher's lock:
-- every query by name. Written only through archiver/store/publications.py.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: delta_lock
-- One publisher per Delta table (archiver.delta.publish), held across its transactions.
SELECT pg_advisory_lock(hashtextextended('archiver.delta ' || $1 || ' ' || $2, 0))

-- name: delta_locked
-- Whether this session holds delta_lock's lock (a bigint key: its high and low halves).
WITH k AS (SELECT hashtextextended('archiver.delta ' || $1 || ' ' || $2, 0) AS key)
SELECT EXISTS (SELECT 1 FROM pg_locks, k WHERE locktype = 'advisory' AND granted
               AND pid = pg_backend_pid() AND objsubid = 1
               AND classid = ((key >> 32) & 4294967295)::oid
               AND objid = (key & 4294967295)::oid)

-- name: delta_rebuilding
SELECT coalesce((SELECT rebuilding FROM delta_tables
                 WHERE storage_url = $1 AND source_table = $2), false)

-- name: delta_rebuild_mark
UPDATE delta_tables SET rebuilding = true WHERE storage_url = $1 AND source_table = $2

-- name: delta_unlock
SELECT pg_advisory_unlock(hashtextextended('archiver.delta ' || $1 || ' ' || $2, 0))

-- name: delta_table
INSERT INTO delta_tables (storage_url, source_table) VALUES ($1, $2)
ON CONFLICT DO NOTHING

-- name: delta_state
SELECT publications, published FROM delta_tables
WHERE storage_url = $1 AND source_table = $2 FOR UPDATE

-- name: delta_number
-- The next publication, numbered $3: every committed file of the table not yet in its
-- Delta log (up to $4) is added by it, every retired or offline one in the log removed
-- by it (an offline file, in the Archive tier, is added again once rehydrated).
WITH removed AS (
    UPDATE archive_files SET unpublication = $3::bigint
    WHERE storage_url = $1 AND source_table = $2 AND (state = 'retired' OR offline)
      AND publication IS NOT NULL AND unpublication IS NULL
    RETURNING retired_by
), numbered AS (
    UPDATE archive_files SET publication = $3::bigint
    WHERE (id IN (SELECT id FROM archive_files
                  WHERE storage_url = $1 AND source_table = $2 AND publication IS NULL
                    AND delta AND state = 'committed' AND delta_refused IS NULL AND NOT offline
                  ORDER BY id LIMIT $4::bigint)
           -- what replaces a file removed now goes in with it, whatever the limit (else
           -- the Delta table would miss the rows an erasure's rewrite or a merge keeps)
           OR (storage_url = $1 AND source_table = $2 AND delta
               AND made_by IN (SELECT retired_by FROM removed WHERE retired_by IS NOT NULL)))
      -- again here: a row a restore retired while this waited for it is re-checked
      -- against this WHERE only (READ COMMITTED), never against the subquery's
      AND state = 'committed' AND publication IS NULL AND delta_refused IS NULL
      AND NOT offline
    RETURNING 1
), counted AS (SELECT (SELECT count(*) FROM numbered) + (SELECT count(*) FROM removed) AS n)
UPDATE delta_tables SET publications = $3::bigint
FROM counted WHERE storage_url = $1 AND source_table = $2 AND counted.n > 0
RETURNING counted.n

-- name: delta_removals
-- With the compaction that retired each, if one did: its removal moves rows, not away.
SELECT f.path, f.byte_size, CASE WHEN l.operation = 'compact' THEN l.id END
FROM archive_files f LEFT JOIN archive_ledger l ON l.id = f.retired_by AND f.state = 'retired'
WHERE f.storage_url = $1 AND f.source_table = $2 AND f.unpublication = $3::bigint ORDER BY f.id

-- name: delta_removals_pending
-- Whether files of the table's Delta log must leave it (retired, or offline): done even
-- where publishing is off, so the table never lists a file that is gone or unreadable.
SELECT EXISTS (
    SELECT 1 FROM archive_files f JOIN delta_tables d USING (storage_url, source_table)
    WHERE f.storage_url = $1 AND f.source_table = $2 AND (f.state = 'retired' OR f.offline)
      AND f.publication IS NOT NULL AND (f.unpublication IS NULL OR f.unpublication > d.published)
)

-- name: delta_erasures_out
-- The newest erasure of table $2 whose history can go once publication $3 is in the
-- Delta log (in its Iceberg table, $4): it and every erasure before it not yet forgotten
-- there find every file retired by then (by it or an earlier operation, whose rows it
-- may also have held) out of the log. NULL: none.
WITH erasures AS (
    SELECT l.id, l.status = 'done' AND NOT EXISTS (
        SELECT 1 FROM archive_files f
        WHERE f.storage_url = $1 AND f.source_table = $2 AND f.state = 'retired'
          AND f.retired_by <= l.id AND f.publication IS NOT NULL
          AND (f.unpublication IS NULL OR f.unpublication > $3::bigint)
    ) AS out  -- one still running holds the watermark below it (ids precede commits)
    FROM archive_ledger l JOIN delta_tables d ON d.storage_url = l.storage_url
    WHERE l.storage_url = $1 AND d.source_table = $2 AND $2 = ANY (l.tables)
      AND l.operation = 'erase' AND l.status <> 'abandoned'
      AND l.id > CASE WHEN $4::boolean THEN d.iceberg_forgotten_through
                      ELSE d.history_forgotten_through END
)
SELECT max(id) FROM erasures
WHERE out AND id < COALESCE((SELECT min(id) FROM erasures WHERE NOT out), 9223372036854775807)

-- name: delta_history_forgotten
UPDATE delta_tables SET history_forgotten_through = $3::bigint
WHERE storage_url = $1 AND source_table = $2

-- name: delta_published
-- Publication $3 is in the log: what it removed, retired and kept for readers, is kept
-- the readers' retention ($5 seconds) from now (readers that opened the log before it
-- still list them), whenever it ran.
WITH kept AS (
    UPDATE archive_files SET kept_until = greatest(kept_until, now() + make_interval(secs => $5::float8))
    WHERE storage_url = $1 AND source_table = $2 AND unpublication = $3::bigint
      AND (state = 'retired' OR offline) AND kept_until IS NOT NULL
)
UPDATE delta_tables SET published = $3::bigint, delta_version = $4::bigint, published_at = now()
WHERE storage_url = $1 AND source_table = $2

-- name: delta_forget
-- `archiver publish --rebuild`: the log is derived; number every file again from 1.
WITH files AS (
    UPDATE archive_files SET publication = NULL, unpublication = NULL, delta_refused = NULL
    WHERE storage_url = $1 AND source_table = $2
)
UPDATE delta_tables SET publications = 0, published = 0, delta_version = NULL,
                        rebuilding = false,
                        -- its Iceberg table still lists the old files: none is reaped
                        -- until it holds the new numbering's (reapable)
                        iceberg_published = CASE WHEN iceberg_published IS NOT NULL THEN 0 END
WHERE storage_url = $1 AND source_table = $2

-- name: delta_pending_tables
-- Tables on storage $1 with committed files not yet in their Delta log ($2: publishing
-- is on), whose last publication a crash interrupted, whose Iceberg table is behind it,
-- or with retired or offline files their Delta log still lists (partial indexes answer each part). Retired files never
-- published, and what dead operations left, are the ledger sweep's (sweep_tables).
SELECT DISTINCT source_table FROM archive_files
WHERE $2::boolean AND storage_url = $1 AND publication IS NULL AND delta
  AND state = 'committed' AND delta_refused IS NULL AND NOT offline
UNION
SELECT DISTINCT source_table FROM archive_files
WHERE storage_url = $1 AND offline AND publication IS NOT NULL AND unpublication IS NULL
UNION
SELECT source_table FROM delta_tables
WHERE $2::boolean AND storage_url = $1 AND publications > published
UNION  -- an Iceberg table behind its Delta log (its mirror failed or was killed)
SELECT source_table FROM delta_tables
WHERE storage_url = $1 AND iceberg_published < published
UNION
SELECT DISTINCT source_table FROM archive_files WHERE storage_url = $1 AND state = 'retired'
  AND publication IS NOT NULL
  AND (kept_until IS NULL OR kept_until <= now() OR unpublication IS NULL)  -- a kept one's: its removal
UNION  -- offline files whose blobs are due to move to the Archive tier (offline_due)
SELECT DISTINCT source_table FROM archive_files WHERE storage_url = $1 AND offline
  AND state = 'committed' AND tier IS DISTINCT FROM 'Archive'
  AND (kept_until IS NULL OR kept_until <= now())

-- name: delta_try_lock
-- The publisher's lock (delta_lock), if free: whoever deletes retired files holds it,
-- so none is deleted while a publication that may still add it is under way.
SELECT pg_try_advisory_lock(hashtextextended('archiver.delta ' || $1 || ' ' || $2, 0))

-- name: iceberg_state
-- (the Delta publication in the log, the one the Iceberg table mirrors: NULL for none)
SELECT published, iceberg_published FROM delta_tables WHERE storage_url = $1 AND source_table = $2

-- name: iceberg_files
-- The files in the table's Delta log after publication $3: what its Iceberg table holds.
SELECT path FROM archive_files
WHERE storage_url = $1 AND source_table = $2 AND publication <= $3::bigint
  AND (unpublication IS NULL OR unpublication > $3::bigint)
ORDER BY id

-- name: iceberg_published
UPDATE delta_tables
SET iceberg_published = $3::bigint, iceberg_snapshot = $4::bigint, iceberg_published_at = now()
WHERE storage_url = $1 AND source_table = $2

-- name: iceberg_dropped
-- The table's Iceberg table no longer kept (ARCHIVER_ICEBERG turned off): out of the
-- catalog $3, so no engine reads files its blobs may lose, and no longer waited for.
WITH gone AS (
    DELETE FROM iceberg_tables
    WHERE catalog_name = $3 AND table_namespace = split_part($2, '.', 1)
      AND table_name = substr($2, length(split_part($2, '.', 1)) + 2)
)
UPDATE delta_tables SET iceberg_published = NULL, iceberg_snapshot = NULL
WHERE storage_url = $1 AND source_table = $2

-- name: iceberg_history_forgotten
UPDATE delta_tables SET iceberg_forgotten_through = $3::bigint
WHERE storage_url = $1 AND source_table = $2

-- name: iceberg_tables_state
-- Each table with an Iceberg table: its Delta publication, the one the Iceberg table
-- mirrors, and its snapshot (doctor, verify).
SELECT source_table, published, iceberg_published, iceberg_snapshot
FROM delta_tables WHERE storage_url = $1 AND iceberg_published IS NOT NULL
ORDER BY source_table
