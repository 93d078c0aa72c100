-- archive_files (and archiver_file_counts, archive_verifications): every query by name.
-- Written only through archiver/store/archive_files.py.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: compact_file_counts
WITH folded AS (DELETE FROM archiver_file_counts RETURNING *)
INSERT INTO archiver_file_counts
SELECT source_table, sum(catalogued), sum(files), sum(rows), sum(bytes), sum(pending_files)
FROM folded GROUP BY 1 HAVING sum(catalogued) <> 0

-- name: job_files
SELECT part, path, row_count, byte_size, md5, min_key, max_key, state, source_xid::text AS source_xid
FROM archive_files WHERE job_id = $1 ORDER BY part

-- name: job_paths
SELECT path FROM archive_files WHERE job_id = $1::uuid

-- name: next_part
SELECT COALESCE(max(part), 0) + 1 FROM archive_files WHERE job_id = $1::uuid

-- name: insert_file
INSERT INTO archive_files (job_id, part, source_table, storage_url, path, row_count, byte_size, md5,
                           key_columns, min_key, max_key, cutoff_column,
                           min_cutoff_value, max_cutoff_value, state, source_xid,
                           delta_schema, delta_stats, delta, tier, made_by)
VALUES ($1::uuid, $2::int, $3, $4, $5, $6::bigint, $7::bigint, $8,
        ARRAY(SELECT jsonb_array_elements_text($9::jsonb)),
        ARRAY(SELECT jsonb_array_elements_text($10::jsonb)),
        ARRAY(SELECT jsonb_array_elements_text($11::jsonb)),
        $12, $13::timestamptz, $14::timestamptz, $15, NULLIF($16, '')::xid8,
        NULLIF($17, ''), NULLIF($18, ''), $19::text::boolean, NULLIF($20, ''), $21::bigint)

-- name: confirm_file
UPDATE archive_files SET state = 'committed', source_xid = NULL
WHERE job_id = $1::uuid AND part = $2::int AND state = 'pending'

-- name: pending_files
SELECT part, path, source_xid::text FROM archive_files
WHERE job_id = $1::uuid AND state = 'pending' ORDER BY part

-- name: forget_file
DELETE FROM archive_files WHERE job_id = $1::uuid AND part = $2::int AND state = 'pending'

-- name: committed_progress
-- A job's progress as its committed files say it, the truth a resumed job starts from.
SELECT count(*), COALESCE(sum(row_count), 0), COALESCE(sum(byte_size), 0),
       (SELECT array_to_json(max_key)::text FROM archive_files
         WHERE job_id = $1::uuid AND state = 'committed' ORDER BY part DESC LIMIT 1)
FROM archive_files WHERE job_id = $1::uuid AND state = 'committed'

-- name: catalogued_tables_named
-- The catalogued tables (schema.table) named $1 in any schema: the distinct tables read
-- off the index on source_table one probe each (a loose index scan), not every file.
WITH RECURSIVE t AS (
    SELECT min(source_table) AS s FROM archive_files
    UNION ALL
    SELECT (SELECT min(source_table) FROM archive_files WHERE source_table > t.s)
    FROM t WHERE t.s IS NOT NULL
)
SELECT s FROM t WHERE right(s, length($1) + 1) = '.' || $1

-- name: archived_files
-- Catalogued files by job and/or tables (schema.table each; see catalogued_tables_named)
-- and/or an overlap with [from, to) of the cutoff column.
SELECT id, job_id::text AS job_id, part, source_table, storage_url, path, row_count, byte_size,
       md5, key_columns, min_key, max_key, cutoff_column, state, delta, delta_schema,
       min_cutoff_value::text AS min_cutoff_value, max_cutoff_value::text AS max_cutoff_value,
       tier, offline, immutable_until, legal_hold
FROM archive_files
WHERE ($1::uuid IS NULL OR job_id = $1::uuid)
  AND ($2::text[] IS NULL OR source_table = ANY ($2::text[]))
  AND ($3::timestamptz IS NULL OR max_cutoff_value >= $3::timestamptz)
  AND ($4::timestamptz IS NULL OR min_cutoff_value < $4::timestamptz)
  AND ($5::text IS NULL OR state = $5)
ORDER BY source_table, created_at, job_id, part

-- name: delta_not_mine
-- A file that is not a move's (a copy archived before copies were marked): out of the
-- Delta table, as copies are.
UPDATE archive_files SET delta = false, publication = NULL WHERE id = $1::bigint

-- name: delta_files
SELECT id, path, byte_size, row_count, delta_schema, delta_stats,
       (extract(epoch FROM created_at) * 1000)::bigint AS created_ms, made_by
FROM archive_files
WHERE storage_url = $1 AND source_table = $2 AND publication = $3::bigint ORDER BY id

-- name: delta_facts
UPDATE archive_files SET delta_schema = $2, delta_stats = $3 WHERE id = $1::bigint

-- name: delta_refuse
UPDATE archive_files SET publication = NULL, delta_refused = $2 WHERE id = $1::bigint

-- name: delta_unnumber
-- A file leaving its publication before the Delta log ever held it (delta.convert).
UPDATE archive_files SET publication = NULL WHERE id = $1::bigint

-- name: catalog_file
SELECT id, job_id::text AS job_id, part, source_table, storage_url, path, row_count, byte_size,
       md5, key_columns, min_key, max_key, cutoff_column, state, delta, delta_schema,
       min_cutoff_value::text AS min_cutoff_value, max_cutoff_value::text AS max_cutoff_value,
       tier, offline, immutable_until, legal_hold
FROM archive_files WHERE id = $1::bigint

-- name: delta_catalogued
SELECT path, publication, delta_refused FROM archive_files
WHERE storage_url = $1 AND source_table = $2 AND delta AND state = 'committed'

-- name: ledger_claim_files
-- A restore into another database (sql/015): the files it will retire, claimed while
-- still committed; fewer rows than asked: some were retired or claimed meanwhile.
UPDATE archive_files SET retired_by = $2::bigint
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint))
  AND state = 'committed' AND retired_by IS NULL
RETURNING id

-- name: ledger_unclaim
UPDATE archive_files SET retired_by = NULL
WHERE retired_by = $1::bigint AND state = 'committed'

-- name: ledger_lock_files
-- The files an operation retires, locked until it commits; fewer rows than asked: some
-- were retired (or deleted) meanwhile, or claimed by a restore into another database.
SELECT id FROM archive_files WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint))
  AND state = 'committed' AND retired_by IS NULL
FOR UPDATE

-- name: ledger_retire
-- What an operation retires is kept on storage for the readers' retention ($3 seconds,
-- counted again from the publication that removes it from the Delta log:
-- delta_published), for readers that opened the table, or planned a read, before; an
-- erasure's goes as soon as no snapshot sees it committed (retired_xid:
-- archiver_seen_committed, for the readers of the views archiver attach makes).
UPDATE archive_files SET state = 'retired', retired_by = $2::bigint, retired_xid = pg_current_xact_id(),
    kept_until = CASE WHEN (SELECT operation FROM archive_ledger WHERE id = $2::bigint) <> 'erase'
                      THEN now() + make_interval(secs => $3::float8) END
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) AND state = 'committed'
  AND (retired_by IS NULL OR retired_by = $2::bigint)

-- name: ledger_unkeep
-- An erasure: the retired files of the tables it erases from, kept for readers, go as
-- soon as they are out of the log (they hold the erased rows too).
UPDATE archive_files f SET kept_until = NULL
FROM archive_ledger l
WHERE l.id = $1::bigint AND l.operation = 'erase' AND f.storage_url = l.storage_url
  AND f.source_table = ANY (l.tables) AND f.state = 'retired' AND f.kept_until IS NOT NULL

-- name: catalogued_path
SELECT EXISTS (SELECT 1 FROM archive_files WHERE storage_url = $1 AND path = $2)

-- name: reapable
-- Retired files of a table whose blobs can go: out of its Delta log and its Iceberg
-- table (never in them, or their removal published in both). LEAST ignores a NULL
-- iceberg_published (no Iceberg table); 0 means one whose first commit, or whose first
-- after a rebuild (which makes every file unpublished), is not recorded yet: nothing
-- of the table is reaped meanwhile.
SELECT f.id, f.path FROM archive_files f
LEFT JOIN delta_tables d USING (storage_url, source_table)
WHERE f.storage_url = $1 AND f.source_table = $2 AND f.state = 'retired'
  AND (CASE WHEN f.publication IS NULL THEN coalesce(d.iceberg_published, 1) <> 0
            ELSE f.unpublication <= least(d.published, d.iceberg_published) END)
  AND f.id > $3::bigint
  AND (f.kept_until IS NULL OR f.kept_until <= now()) AND NOT archiver_seen_committed(f.retired_xid)
ORDER BY f.id LIMIT 1000

-- name: reaped
DELETE FROM archive_files
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) AND state = 'retired'

-- name: table_file_schemas
-- The distinct Delta schemas of a table's committed files (NULL: written before 008).
SELECT DISTINCT delta_schema FROM archive_files WHERE source_table = $1 AND state = 'committed'

-- name: record_verification
INSERT INTO archive_verifications (actor, scope, tables, files, problems, first_problems)
VALUES ($1, $2, ARRAY(SELECT jsonb_array_elements_text($3::jsonb)), $4::int, $5::int,
        ARRAY(SELECT jsonb_array_elements_text($6::jsonb)))

-- name: files_going_offline
-- archiver tier --tier Archive, before any blob moves: the files leave their Delta
-- tables in the next publication (archiver.lifecycle), still catalogued and archived;
-- their blobs move once that publication is in both logs and the readers' retention
-- ($2 seconds, counted again from it: delta_published) is over (offline_due).
UPDATE archive_files SET offline = true,
    kept_until = CASE WHEN offline THEN kept_until ELSE now() + make_interval(secs => $2::float8) END
WHERE id = ANY ($1::bigint[]) AND state = 'committed'

-- name: files_waiting_for_archive
SELECT kept_until FROM archive_files WHERE id = ANY ($1::bigint[]) AND offline
  AND state = 'committed' AND tier IS DISTINCT FROM 'Archive'

-- name: offline_due
-- The table's offline files whose blobs can move to the Archive tier now: out of its
-- Delta log and its Iceberg table (as reapable says) and past the readers' retention.
-- Under the table's publisher lock: rehydrate brings files back online under it too.
SELECT f.id, f.path FROM archive_files f
LEFT JOIN delta_tables d USING (storage_url, source_table)
WHERE f.storage_url = $1 AND f.source_table = $2 AND f.state = 'committed' AND f.offline
  AND f.tier IS DISTINCT FROM 'Archive'
  AND (CASE WHEN f.publication IS NULL THEN coalesce(d.iceberg_published, 1) <> 0
            ELSE f.unpublication <= least(d.published, d.iceberg_published) END)
  AND (f.kept_until IS NULL OR f.kept_until <= now())
ORDER BY f.id

-- name: files_moved_to_archive
UPDATE archive_files SET tier = 'Archive'
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) AND offline
  AND state = 'committed'

-- name: files_tier
UPDATE archive_files SET tier = $2 WHERE id = ANY ($1::bigint[])

-- name: files_back_online
-- Rehydrated (or found online): back in the Delta table. Under the table's publisher
-- lock (delta_lock): no publication numbers them meanwhile. A file whose removal was
-- numbered is added again by the next publication; one whose removal was not yet
-- numbered simply stays in the log. $3: those of them rehydrate saw in the Archive tier;
-- the others were waiting to move there, and stay offline if a publisher moved them since.
UPDATE archive_files
SET offline = false, tier = $2, kept_until = NULL,
    publication = CASE WHEN unpublication IS NULL THEN publication END, unpublication = NULL
WHERE id = ANY ($1::bigint[]) AND offline AND state = 'committed'
  AND (tier IS NOT DISTINCT FROM 'Archive') = (id = ANY ($3::bigint[]))
RETURNING id

-- name: files_verified
UPDATE archive_files SET verified_at = now() WHERE id = ANY ($1::bigint[])

-- name: files_protected
UPDATE archive_files
SET immutable_until = COALESCE($2::timestamptz, immutable_until),
    legal_hold = COALESCE($3::boolean, legal_hold)
WHERE id = ANY ($1::bigint[])

-- name: files_unverified
-- Of files $1, those no `archiver verify` found sound since they were written.
SELECT id FROM archive_files WHERE id = ANY ($1::bigint[]) AND verified_at IS NULL

-- name: catalogued_among
-- Which of names $2 (a JSON array) the catalog holds on storage $1, in any state.
SELECT f.path FROM jsonb_array_elements_text($2::jsonb) n (path)
JOIN archive_files f ON f.storage_url = $1 AND f.path = n.path

-- name: orphans_catalogued
-- Every name the catalog holds of a table's files, in any state (archiver.lifecycle.orphans).
SELECT path FROM archive_files WHERE storage_url = $1 AND source_table = $2

-- name: compact_files
-- Every committed file of the jobs that archived table $2 on storage $1 (its chunks'
-- children's files among them), with whether each is in its Delta log; none of a job
-- still queued or running (its attempt may yet add to its chunks, or verify them).
WITH jobs AS (
    SELECT DISTINCT f.job_id FROM archive_files f
    WHERE f.storage_url = $1 AND f.source_table = $2 AND f.state = 'committed'
      AND NOT EXISTS (SELECT 1 FROM background_jobs j
                      WHERE j.id = f.job_id AND j.status IN ('queued', 'running'))
)
SELECT f.id, f.job_id::text AS job_id, f.part, f.source_table, f.storage_url, f.path, f.row_count,
       f.byte_size, f.md5, f.key_columns, f.min_key, f.max_key, f.cutoff_column, f.state,
       f.delta, f.delta_schema, f.min_cutoff_value::text AS min_cutoff_value,
       f.max_cutoff_value::text AS max_cutoff_value, f.tier, f.offline, f.immutable_until,
       f.legal_hold,
       f.publication IS NOT NULL AND f.publication <= COALESCE(d.published, 0)
           AND f.unpublication IS NULL AS in_log
FROM archive_files f JOIN jobs USING (job_id)
LEFT JOIN delta_tables d ON d.storage_url = f.storage_url AND d.source_table = f.source_table
WHERE f.state = 'committed' AND f.storage_url = $1

-- name: compact_tables
-- Tables on storage $1 with two small committed files or more (of $2 bytes at most):
-- maybe worth a compaction (its plan decides).
SELECT source_table FROM archive_files
WHERE storage_url = $1 AND state = 'committed' AND byte_size < $2::bigint AND cutoff_column <> ''
GROUP BY source_table HAVING count(*) >= 2

-- name: table_has_files
SELECT EXISTS (SELECT 1 FROM archive_files WHERE source_table = $1)

-- name: retired_left
-- Retired files still stored though they could go; those kept on purpose for the
-- readers' retention (for readers that opened the Delta log before) flagged.
SELECT path, kept_until > now() FROM archive_files WHERE storage_url = $1
AND source_table = $2 AND state = 'retired' ORDER BY id

-- name: kept_for_readers
-- Files of storage $1 kept for readers that opened a Delta table before a change took
-- them out (retired, or offline and waiting to move to the Archive tier): count, bytes.
SELECT count(*), coalesce(sum(byte_size), 0)::bigint FROM archive_files
WHERE storage_url = $1 AND kept_until > now()
  AND (state = 'retired' OR (offline AND tier IS DISTINCT FROM 'Archive'))

-- name: file_ids_at
SELECT id FROM archive_files WHERE storage_url = $1 AND path = ANY ($2::text[])

-- name: published_paths
-- In the Delta log: added by a published publication, not yet removed by one.
SELECT f.path FROM archive_files f JOIN delta_tables d USING (storage_url, source_table)
WHERE f.storage_url = $1 AND f.source_table = $2 AND f.publication <= d.published
  AND (f.unpublication IS NULL OR f.unpublication > d.published)
