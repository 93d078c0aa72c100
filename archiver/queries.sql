-- Every query archiver runs against background_jobs and archive_files, by name.
-- Loaded by archiver/db.py (query); `-- name: X` starts a query. The schema lives in sql/.

-- name: enqueue
INSERT INTO background_jobs (task_name, payload, priority, max_attempts, dedup_key, lock_key, run_at, limits)
VALUES ($1, $2::jsonb, $3, $4, $5, $6, COALESCE($7, now()), COALESCE($8::jsonb, '{}'))
ON CONFLICT (dedup_key) WHERE status IN ('queued', 'running') DO NOTHING
RETURNING id

-- name: find_duplicate
SELECT id, status FROM background_jobs
WHERE dedup_key = $1 AND status IN ('queued', 'running')

-- name: claim_jobs
-- Up to $2 of the oldest most urgent queued jobs, at most one per lock_key, and none
-- whose lock_key a running job holds. The unique index on running lock_keys is the
-- backstop when two claims race for one table.
WITH candidates AS (
    SELECT q.id, q.lock_key, q.priority, q.run_at, q.created_at FROM background_jobs q
    WHERE q.status = 'queued' AND q.run_at <= now() AND NOT archiver_job_paused(q)
      AND (q.lock_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM background_jobs r WHERE r.status = 'running' AND r.lock_key = q.lock_key))
    ORDER BY q.priority DESC, q.run_at, q.created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED),
picked AS (
    SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY COALESCE(lock_key, id::text)
                                      ORDER BY priority DESC, run_at, created_at) AS n
        FROM candidates) c
    WHERE n = 1)
UPDATE background_jobs j
SET status = 'running', locked_by = $1, attempts = j.attempts + 1, claims = j.claims + 1,
    started_at = COALESCE(j.started_at, now()), heartbeat_at = now(), finished_at = NULL
FROM picked WHERE j.id = picked.id
RETURNING j.*

-- name: seconds_to_next_run
-- How long until the earliest queued job may run (a retry waiting out its backoff).
-- Paused jobs are left out: a table can be paused indefinitely.
-- No row when nothing is queued (GREATEST would turn the empty min() into 0: an idle
-- worker then polled 20 times a second, ~80 transactions a second, found 2026-11-25).
SELECT GREATEST(EXTRACT(epoch FROM earliest - now()), 0)::float8
FROM (SELECT min(run_at) AS earliest FROM background_jobs j
      WHERE status = 'queued' AND isfinite(run_at) AND NOT archiver_job_paused(j)) q
WHERE earliest IS NOT NULL

-- name: complete_many
-- Finish several jobs of this worker in one round trip (no-op jobs).
UPDATE background_jobs
SET status = 'completed', finished_at = now(), locked_by = NULL, heartbeat_at = NULL
WHERE id = ANY($1::uuid[]) AND status = 'running' AND locked_by = $2
RETURNING id

-- name: heartbeat
UPDATE background_jobs j SET heartbeat_at = now()
WHERE id = $1 AND status = 'running' AND locked_by = $2
RETURNING cancel_requested_at IS NOT NULL AS cancel_requested, archiver_job_paused(j) AS paused

-- name: complete
UPDATE background_jobs
SET status = 'completed', finished_at = now(), locked_by = NULL, heartbeat_at = NULL, progress = $3::jsonb
WHERE id = $1 AND status = 'running' AND locked_by = $2
RETURNING id

-- name: fail_attempt
-- Back to queued after a backoff, or failed for good after max_attempts; earlier errors
-- are kept, the newest 10.
UPDATE background_jobs
SET status = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'queued' END,
    run_at = CASE WHEN attempts >= max_attempts THEN run_at
                  ELSE now() + make_interval(secs => $4) END,
    finished_at = CASE WHEN attempts >= max_attempts THEN now() END,
    last_error = $3,
    errors = (SELECT COALESCE(jsonb_agg(e ORDER BY n), '[]') FROM (
                SELECT e, n FROM jsonb_array_elements(
                    errors || jsonb_build_array(jsonb_build_object(
                        'at', now(), 'attempt', attempts, 'worker', $2::text, 'error', $3::text)))
                    WITH ORDINALITY AS x(e, n)
                ORDER BY n DESC LIMIT 10) kept),
    locked_by = NULL, heartbeat_at = NULL
WHERE id = $1 AND status = 'running' AND locked_by = $2
RETURNING status, run_at

-- name: release
-- A graceful stop hands the job back untouched; the attempt does not count. A job whose
-- maintenance window closed waits for the next opening ($3).
UPDATE background_jobs
SET status = 'queued', run_at = COALESCE($3::timestamptz, now()), attempts = GREATEST(attempts - 1, 0),
    locked_by = NULL, heartbeat_at = NULL
WHERE id = $1 AND status = 'running' AND locked_by = $2
RETURNING id

-- name: finish_cancelled
UPDATE background_jobs
SET status = 'cancelled', finished_at = now(), locked_by = NULL, heartbeat_at = NULL
WHERE id = $1 AND status = 'running' AND locked_by = $2
RETURNING id

-- name: rescue_expired
-- Running jobs whose worker stopped renewing its lease: requeued at once (or failed,
-- or cancelled if that was asked). Any live worker runs this; no sweeper needed.
UPDATE background_jobs j
SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                  WHEN j.attempts >= j.max_attempts THEN 'failed'
                  ELSE 'queued' END,
    finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts
                       THEN now() END,
    run_at = now(),
    last_error = format('worker %s lost its lease (no heartbeat since %s)', j.locked_by, j.heartbeat_at),
    locked_by = NULL, heartbeat_at = NULL
WHERE j.id IN (
    SELECT id FROM background_jobs
    WHERE status = 'running' AND heartbeat_at < now() - make_interval(secs => $1)
    FOR UPDATE SKIP LOCKED)
RETURNING j.id, j.status

-- name: prune_finished
DELETE FROM background_jobs WHERE id IN (
    SELECT id FROM background_jobs
    WHERE status IN ('completed', 'cancelled', 'failed')
      AND finished_at < now() - make_interval(secs => $1)
    LIMIT $2 FOR UPDATE SKIP LOCKED)

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

-- name: compact_job_counts
-- The count deltas (sql/014_status_counts.sql) folded into one row per table and status
-- (per table for files). A delta inserted meanwhile is not in the DELETE's snapshot: kept.
WITH folded AS (DELETE FROM archiver_job_counts RETURNING *)
INSERT INTO archiver_job_counts
SELECT source_table, status, sum(jobs), sum(rows_archived), sum(bytes_archived)
FROM folded GROUP BY 1, 2 HAVING sum(jobs) <> 0

-- name: compact_file_counts
WITH folded AS (DELETE FROM archiver_file_counts RETURNING *)
INSERT INTO archiver_file_counts
SELECT source_table, sum(catalogued), sum(files), sum(rows), sum(bytes), sum(pending_files)
FROM folded GROUP BY 1 HAVING sum(catalogued) <> 0

-- name: cancel
-- Queued: cancelled at once. Running: flagged; its worker stops at the next chunk boundary.
UPDATE background_jobs
SET status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
    finished_at = CASE WHEN status = 'queued' THEN now() ELSE finished_at END,
    cancel_requested_at = COALESCE(cancel_requested_at, now())
WHERE id = $1 AND status IN ('queued', 'running')
RETURNING status

-- name: retry
UPDATE background_jobs
SET status = 'queued', run_at = now(), attempts = 0, finished_at = NULL,
    cancel_requested_at = NULL, locked_by = NULL, heartbeat_at = NULL
WHERE id = $1 AND status IN ('failed', 'cancelled')
RETURNING id

-- name: job_by_id
SELECT * FROM background_jobs WHERE id = $1

-- name: status_summary
-- The operator views (sql/003_ops_views.sql); intervals as seconds for scripts.
SELECT source_table, status, jobs,
       extract(epoch FROM oldest_queued_age)::float8 AS oldest_queued_seconds,
       rows_archived, bytes_archived
FROM archiver_job_summary ORDER BY 1, 2

-- name: running_jobs
SELECT id, source_table, worker, attempts, started_at,
       extract(epoch FROM heartbeat_age)::float8 AS heartbeat_age_seconds,
       rows_done, rows_estimated, chunks_done, chunks_estimated, bytes_done,
       progress_pct::float8 AS progress_pct, rows_per_second::float8 AS rows_per_second,
       extract(epoch FROM eta)::float8 AS eta_seconds, cancel_requested,
       throttled_reason, throttled_since
FROM archiver_running_jobs ORDER BY started_at

-- name: failed_jobs
-- The newest 50 (`archiver status`): the summary counts them all, `archiver jobs
-- --status failed` lists them (20,000 failed jobs were 20,000 lines). Each half newest
-- first by its own index (failed ones by background_jobs_failed), then the two merged:
-- one sort of the whole view took 66 ms at 20,000 failed jobs.
SELECT * FROM (
    (SELECT id, source_table, status, attempts, max_attempts, last_error, next_retry, finished_at
     FROM archiver_failed_jobs WHERE status = 'failed' ORDER BY finished_at DESC LIMIT 50)
    UNION ALL
    (SELECT id, source_table, status, attempts, max_attempts, last_error, next_retry, finished_at
     FROM archiver_failed_jobs WHERE status = 'queued' ORDER BY next_retry DESC LIMIT 50)
) newest ORDER BY COALESCE(finished_at, next_retry) DESC LIMIT 50

-- name: archive_summary
SELECT source_table, files, rows, bytes, oldest_value, newest_value, pending_files
FROM archiver_archive_files ORDER BY 1

-- name: list_jobs
-- Newest first (the newest-jobs index, walked in its order), keyset-paged after the row
-- ($6 created_at, $7 id) that ended the previous page; a table filter matches `orders`
-- or `public.orders`; $4 the task, $5 text in the last error (any case), $8/$9 created
-- in [from, to).
SELECT id, payload->>'table' AS source_table, task_name, status, attempts, max_attempts,
       COALESCE((progress->>'rows')::bigint, 0) AS rows,
       COALESCE((progress->>'bytes')::bigint, 0) AS bytes,
       created_at, finished_at, last_error
FROM background_jobs
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR payload->>'table' = $2 OR payload->>'table' LIKE '%.' || $2)
  AND ($4::text IS NULL OR task_name = $4)
  AND ($5::text IS NULL OR strpos(lower(last_error), lower($5)) > 0)
  AND ($6::timestamptz IS NULL OR created_at < $6 OR (created_at = $6 AND id > $7::uuid))
  AND ($8::timestamptz IS NULL OR created_at >= $8)
  AND ($9::timestamptz IS NULL OR created_at < $9)
ORDER BY created_at DESC, id
LIMIT $3

-- name: jobs_by_status
SELECT status, sum(jobs)::bigint FROM archiver_job_summary GROUP BY status

-- name: running_archive_of
SELECT id FROM background_jobs
WHERE status = 'running' AND task_name = 'archive' AND payload->>'table' = $1 LIMIT 1

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

-- name: checkpoint
UPDATE background_jobs SET progress = $3::jsonb, heartbeat_at = now()
WHERE id = $1::uuid AND status = 'running' AND locked_by = $2
RETURNING id

-- name: still_held
-- Locks the job row until the pending file is committed: a rescue (SKIP LOCKED) cannot
-- slip in between this check and the insert.
SELECT id FROM background_jobs WHERE id = $1::uuid AND status = 'running' AND locked_by = $2
FOR NO KEY UPDATE

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

-- name: enqueue_policy_slot
-- A policy's slot, unless any scheduler ever enqueued it (unique policy_name, slot_at).
INSERT INTO background_jobs (task_name, payload, priority, max_attempts, lock_key,
                             policy_name, slot_at, limits, run_at)
VALUES ($1, $2::jsonb, $3, $4, $5, $6, $7, $8::jsonb, COALESCE($9::timestamptz, now()))
ON CONFLICT DO NOTHING
RETURNING id

-- name: policy_slot_job
SELECT id FROM background_jobs WHERE policy_name = $1 AND slot_at = $2

-- name: last_policy_slot
SELECT max(slot_at) FROM background_jobs WHERE policy_name = $1

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

-- name: pause_table
INSERT INTO archiver_paused_tables (source_table) VALUES ($1)
ON CONFLICT (source_table) DO NOTHING
RETURNING paused_at

-- name: resume_table
WITH resumed AS (DELETE FROM archiver_paused_tables WHERE source_table = $1 RETURNING source_table)
SELECT pg_notify('archiver_jobs', source_table) FROM resumed

-- name: pause_job
UPDATE background_jobs SET paused_at = COALESCE(paused_at, now())
WHERE id = $1 AND status IN ('queued', 'running')
RETURNING status

-- name: resume_job
-- Setting run_at notifies idle workers (the queue's trigger).
UPDATE background_jobs SET paused_at = NULL, run_at = CASE WHEN status = 'queued' THEN now() ELSE run_at END
WHERE id = $1 AND paused_at IS NOT NULL
RETURNING status

-- name: paused
SELECT kind, source_table, job_id, paused_at, jobs FROM archiver_paused ORDER BY paused_at

-- name: queue_schema
SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass('background_jobs')

-- name: job_limits
SELECT limits::text FROM background_jobs WHERE id = $1::uuid

-- name: set_throttled
-- Why a running job waits ('' = it no longer does), and since when.
UPDATE background_jobs
SET throttled_reason = NULLIF($3, ''),
    throttled_since = CASE WHEN $3 = '' THEN NULL
                           WHEN throttled_reason IS DISTINCT FROM $3 THEN now()
                           ELSE throttled_since END
WHERE id = $1::uuid AND status = 'running' AND locked_by = $2

-- name: set_limits
-- Change a queued or running job's limits; a running job obeys from its next chunk. A new
-- maintenance window moves a queued job's run_at to its next opening ($3).
UPDATE background_jobs
SET limits = jsonb_strip_nulls(limits || $2::jsonb),
    run_at = CASE WHEN status = 'queued' AND $3::timestamptz IS NOT NULL THEN $3 ELSE run_at END
WHERE id = $1 AND status IN ('queued', 'running')
RETURNING status, limits::text AS limits

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

-- name: delta_not_mine
-- A file that is not a move's (a copy archived before copies were marked): out of the
-- Delta table, as copies are.
UPDATE archive_files SET delta = false, publication = NULL WHERE id = $1::bigint

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
-- Delta log: it and every erasure before it not yet forgotten find every file retired
-- by then (by it or an earlier operation, whose rows it may also have held) out of the
-- log. NULL: none.
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
      AND l.id > d.history_forgotten_through
)
SELECT max(id) FROM erasures
WHERE out AND id < COALESCE((SELECT min(id) FROM erasures WHERE NOT out), 9223372036854775807)

-- name: delta_history_forgotten
UPDATE delta_tables SET history_forgotten_through = $3::bigint
WHERE storage_url = $1 AND source_table = $2

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

-- name: delta_published
-- Publication $3 is in the log: what a compaction retired and it removed is kept a day
-- from now (readers that opened the log before it still list them), whenever it ran.
WITH kept AS (
    UPDATE archive_files SET kept_until = greatest(kept_until, now() + interval '1 day')
    WHERE storage_url = $1 AND source_table = $2 AND unpublication = $3::bigint
      AND state = 'retired' AND kept_until IS NOT NULL
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
                        rebuilding = false
WHERE storage_url = $1 AND source_table = $2

-- name: delta_pending_tables
-- Tables on storage $1 with committed files not yet in their Delta log ($2: publishing
-- is on), whose last publication a crash interrupted, with retired files to take out
-- of their Delta log and delete, or with an operation that may have died mid-way (the
-- worker's sweep; partial indexes answer each part).
SELECT DISTINCT source_table FROM archive_files
WHERE $2::boolean AND storage_url = $1 AND publication IS NULL AND delta
  AND state = 'committed' AND delta_refused IS NULL AND NOT offline
UNION
SELECT DISTINCT source_table FROM archive_files
WHERE storage_url = $1 AND offline AND publication IS NOT NULL AND unpublication IS NULL
UNION
SELECT source_table FROM delta_tables
WHERE $2::boolean AND storage_url = $1 AND publications > published
UNION
SELECT DISTINCT source_table FROM archive_files WHERE storage_url = $1 AND state = 'retired'
  AND (kept_until IS NULL OR kept_until <= now()
       OR (publication IS NOT NULL AND unpublication IS NULL))  -- a compaction's: its removal
UNION
SELECT unnest(tables) FROM archive_ledger WHERE storage_url = $1 AND status = 'running'

-- name: delta_catalogued
SELECT path, publication, delta_refused FROM archive_files
WHERE storage_url = $1 AND source_table = $2 AND delta AND state = 'committed'

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

-- name: ledger_claim_files
-- A restore into another database (sql/015): the files it will retire, claimed while
-- still committed; fewer rows than asked: some were retired or claimed meanwhile.
UPDATE archive_files SET retired_by = $2::bigint
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint))
  AND state = 'committed' AND retired_by IS NULL
RETURNING id

-- name: ledger_intent
UPDATE archive_ledger SET source_xid = $2::text::xid8, intent = $3::jsonb
WHERE id = $1::bigint AND status = 'running'

-- name: ledger_intent_of
SELECT intent::text FROM archive_ledger WHERE id = $1::bigint

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
-- A compaction's inputs are kept on storage a day after they leave the Delta log (for
-- readers that opened the table before); what other operations retire goes at once.
UPDATE archive_files SET state = 'retired', retired_by = $2::bigint,
    kept_until = CASE WHEN (SELECT operation FROM archive_ledger WHERE id = $2::bigint) = 'compact'
                      THEN now() + interval '1 day' END
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) AND state = 'committed'
  AND (retired_by IS NULL OR retired_by = $2::bigint)

-- name: ledger_unkeep
-- An erasure: the files a compaction retired and keeps a day for readers, of the tables
-- it erases from, go as soon as they are out of the log (they hold the erased rows too).
UPDATE archive_files f SET kept_until = NULL
FROM archive_ledger l
WHERE l.id = $1::bigint AND l.operation = 'erase' AND f.storage_url = l.storage_url
  AND f.source_table = ANY (l.tables) AND f.state = 'retired' AND f.kept_until IS NOT NULL

-- name: ledger_done
UPDATE archive_ledger SET status = 'done', finished_at = now(), rows = $2::bigint,
                          detail = $3::jsonb, intent = NULL
WHERE id = $1::bigint AND status = 'running'

-- name: ledger_abandon
UPDATE archive_ledger SET status = 'abandoned', finished_at = now()
WHERE id = $1::bigint AND status = 'running'

-- name: catalogued_path
SELECT EXISTS (SELECT 1 FROM archive_files WHERE storage_url = $1 AND path = $2)

-- name: reapable
-- Retired files of a table whose blobs can go: out of its Delta log (never in it, or
-- their removal published).
SELECT f.id, f.path FROM archive_files f
LEFT JOIN delta_tables d USING (storage_url, source_table)
WHERE f.storage_url = $1 AND f.source_table = $2 AND f.state = 'retired'
  AND (f.publication IS NULL OR f.unpublication <= d.published) AND f.id > $3::bigint
  AND (f.kept_until IS NULL OR f.kept_until <= now())
ORDER BY f.id LIMIT 1000

-- name: reaped
DELETE FROM archive_files
WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) AND state = 'retired'

-- name: delta_try_lock
-- The publisher's lock (delta_lock), if free: whoever deletes retired files holds it,
-- so none is deleted while a publication that may still add it is under way.
SELECT pg_try_advisory_lock(hashtextextended('archiver.delta ' || $1 || ' ' || $2, 0))

-- name: console_jobs_by_table
-- The overview's jobs per table and status: every queued and running job and those
-- finished in the last day, each part read by its own partial index (never every job).
SELECT payload->>'table' AS source_table, status, count(*) AS jobs,
       now() - min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now()) AS oldest_queued_age
FROM (SELECT payload, status, run_at FROM background_jobs WHERE status = 'queued'
      UNION ALL
      SELECT payload, status, run_at FROM background_jobs WHERE status = 'running'
      UNION ALL
      SELECT payload, status, run_at FROM background_jobs
      WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at > now() - interval '1 day') j
GROUP BY 1, 2 ORDER BY 1, 2

-- name: console_failures
-- Failures of the last day (failed for good, or retrying after a failed attempt).
SELECT * FROM (
    SELECT id, payload->>'table' AS source_table, status, attempts, max_attempts, last_error,
           finished_at AS at
    FROM background_jobs
    WHERE status = 'failed' AND finished_at > now() - interval '1 day'
    UNION ALL
    SELECT id, payload->>'table', status, attempts, max_attempts, last_error, run_at
    FROM background_jobs
    WHERE status = 'queued' AND attempts > 0 AND last_error IS NOT NULL
) f ORDER BY at DESC LIMIT 50

-- name: console_rows_per_hour
-- Rows archived per hour over the last day (files committed; by their creation index).
SELECT date_trunc('hour', created_at, 'UTC') AS hour, sum(row_count)::bigint AS rows
FROM archive_files WHERE created_at > now() - interval '1 day' AND state <> 'pending'
GROUP BY 1 ORDER BY 1

-- name: console_queue_wait
-- Seconds from runnable to started, per hour of start, over the last day (jobs created
-- in the last two days: the newest-jobs index).
SELECT date_trunc('hour', started_at, 'UTC') AS hour,
       avg(extract(epoch FROM started_at - run_at))::float8 AS seconds, count(*) AS jobs
FROM background_jobs
WHERE created_at > now() - interval '2 days' AND started_at > now() - interval '1 day'
  AND started_at >= run_at
GROUP BY 1 ORDER BY 1

-- name: job_group
-- The jobs of one enqueue split by partitions or --parallel ranges.
SELECT id, status, payload->>'partition' AS partition, payload->'key_range' AS key_range,
       COALESCE((progress->>'rows')::bigint, 0) AS rows, created_at
FROM background_jobs WHERE payload->>'group' = $1 ORDER BY created_at, id

-- name: table_archive
-- One table's archive: files, rows, bytes, cutoff range (as archiver_archive_files).
SELECT * FROM archiver_archive_files WHERE source_table = $1

-- name: table_file_schemas
-- The distinct Delta schemas of a table's committed files (NULL: written before 008).
SELECT DISTINCT delta_schema FROM archive_files WHERE source_table = $1 AND state = 'committed'

-- name: table_schemas
-- The Delta schemas a table's files were written with, oldest first.
SELECT md5(delta_schema) AS version, min(created_at) AS first_at, count(*) AS files
FROM archive_files WHERE source_table = $1 AND state = 'committed' AND delta_schema IS NOT NULL
GROUP BY 1 ORDER BY 2

-- name: table_delta
SELECT storage_url, publications, published, delta_version, published_at
FROM delta_tables WHERE source_table = $1

-- name: table_tiers
-- One table's files by access tier: offline (Archive tier) and protected among them.
SELECT COALESCE(tier, 'account default') AS tier, count(*) AS files,
       count(*) FILTER (WHERE offline) AS offline,
       count(*) FILTER (WHERE legal_hold OR immutable_until > now()) AS protected
FROM archive_files WHERE source_table = $1 AND state = 'committed' GROUP BY 1 ORDER BY 1

-- name: table_ledger
-- The last operations that took rows of a table out of the archive (restore, purge,
-- erase): who, when, what was asked (an erasure's predicate as its shape only).
SELECT id, operation, status, actor, started_at, rows, request::text AS request
FROM archive_ledger WHERE $1 = ANY (tables) ORDER BY id DESC LIMIT 10

-- name: record_verification
INSERT INTO archive_verifications (actor, scope, tables, files, problems, first_problems)
VALUES ($1, $2, ARRAY(SELECT jsonb_array_elements_text($3::jsonb)), $4::int, $5::int,
        ARRAY(SELECT jsonb_array_elements_text($6::jsonb)))

-- name: last_verification
SELECT at, actor, scope, files, problems, first_problems FROM archive_verifications
WHERE $1 = ANY (tables) OR tables = '{}' ORDER BY at DESC LIMIT 1

-- name: files_going_offline
-- archiver tier --tier Archive, before any blob moves: the files leave their Delta
-- tables in the next publication (archiver.lifecycle), still catalogued and archived.
UPDATE archive_files SET offline = true
WHERE id = ANY ($1::bigint[]) AND state = 'committed'

-- name: files_tier
UPDATE archive_files SET tier = $2 WHERE id = ANY ($1::bigint[])

-- name: files_back_online
-- Rehydrated (or found online): back in the Delta table. Under the table's publisher
-- lock (delta_lock): no publication numbers them meanwhile. A file whose removal was
-- numbered is added again by the next publication; one whose removal was not yet
-- numbered simply stays in the log.
UPDATE archive_files
SET offline = false, tier = $2,
    publication = CASE WHEN unpublication IS NULL THEN publication END, unpublication = NULL
WHERE id = ANY ($1::bigint[]) AND offline AND state = 'committed'
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

-- name: key_collations
-- Each column of table $1 with its collation, schema-qualified: keys ordered as
-- PostgreSQL orders them (a rewritten file's catalogued key ends).
SELECT a.attname::text, quote_ident(n.nspname) || '.' || quote_ident(c.collname)
FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
JOIN pg_namespace n ON n.oid = c.collnamespace
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped

-- name: key_types
-- Each column of table $1: its type as SQL, and its collation (schema-qualified) if it
-- has one: an erasure's rewritten file's key ends, in the table's own order.
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
       CASE WHEN a.attcollation <> 0 THEN (
           SELECT quote_ident(n.nspname) || '.' || quote_ident(c.collname)
           FROM pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace
           WHERE c.oid = a.attcollation) END
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped

-- name: integer_columns
-- The columns of integer types of the tables $1 (a JSON array of schema.table) this
-- database has: a catalogued key range of theirs compares as numbers (text ends do not).
SELECT t.name, a.attname::text
FROM jsonb_array_elements_text($1::jsonb) AS t(name)
JOIN pg_attribute a ON a.attrelid = to_regclass(
    quote_ident(split_part(t.name, '.', 1)) || '.' || quote_ident(substr(t.name, strpos(t.name, '.') + 1))
) AND a.attnum > 0
 AND NOT a.attisdropped AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)

-- name: audit_record
INSERT INTO archiver_audit (actor, address, via, action, target, outcome)
VALUES ($1, $2, $3, $4, $5, $6)

-- name: audit_of_target
-- The latest actions on one job or table (its page's "changed by").
SELECT at, actor, via, action, outcome FROM archiver_audit
WHERE target = $1 ORDER BY at DESC LIMIT $2

-- name: orphans_catalogued
-- Every name the catalog holds of a table's files, in any state (archiver.lifecycle.orphans).
SELECT path FROM archive_files WHERE storage_url = $1 AND source_table = $2

-- name: orphans_writers_at_work
-- Of jobs $1 and ledger operations $2, those still at work: a job queued or running
-- (its next attempt deletes what an earlier one left), an operation running.
SELECT j.id::text FROM jsonb_array_elements_text($1::jsonb) a (id)
JOIN background_jobs j ON j.id = a.id::uuid WHERE j.status IN ('queued', 'running')
UNION ALL
SELECT 'op:' || l.id FROM jsonb_array_elements_text($2::jsonb) a (id)
JOIN archive_ledger l ON l.id = a.id::bigint WHERE l.status = 'running'

-- name: maintenance_seen
-- Duty $1 for scope $2 first seen: its clock starts (its first run is one period on).
INSERT INTO archiver_maintenance (duty, scope) VALUES ($1, $2) ON CONFLICT DO NOTHING

-- name: maintenance_due
-- Take duty $1's period for scope $2 when its last began $3 seconds ago or more: a row
-- back when this caller is to queue it, none when it is not due or another took it.
UPDATE archiver_maintenance SET last_queued = now()
WHERE duty = $1 AND scope = $2 AND last_queued <= now() - make_interval(secs => $3::float8)
RETURNING last_queued

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
