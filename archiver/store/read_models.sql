-- What the CLI's reports and the console's pages read: the ops views (sql/003), the job
-- lists and each table's archive, over every state table. Read only through
-- archiver/store/read_models.py; writes nothing.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

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
-- first by its own index (failed ones by background_jobs_failed), then the two merged,
-- rather than one sort of the whole view, which grows with the failed jobs.
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

-- name: paused
SELECT kind, source_table, job_id, paused_at, jobs FROM archiver_paused ORDER BY paused_at

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

-- name: table_delta
SELECT storage_url, publications, published, delta_version, published_at,
       iceberg_published, iceberg_snapshot, iceberg_published_at
FROM delta_tables WHERE source_table = $1

-- name: table_schemas
-- The Delta schemas a table's files were written with, oldest first.
SELECT md5(delta_schema) AS version, min(created_at) AS first_at, count(*) AS files
FROM archive_files WHERE source_table = $1 AND state = 'committed' AND delta_schema IS NOT NULL
GROUP BY 1 ORDER BY 2

-- name: last_verification
SELECT at, actor, scope, files, problems, first_problems FROM archive_verifications
WHERE $1 = ANY (tables) OR tables = '{}' ORDER BY at DESC LIMIT 1

-- name: table_tiers
-- One table's files by access tier: offline (Archive tier) and protected among them.
SELECT COALESCE(tier, 'account default') AS tier, count(*) AS files,
       count(*) FILTER (WHERE offline) AS offline,
       count(*) FILTER (WHERE legal_hold OR immutable_until > now()) AS protected
FROM archive_files WHERE source_table = $1 AND state = 'committed' GROUP BY 1 ORDER BY 1

-- name: table_kept
-- One table's files kept where they are for readers that opened its Delta table before
-- a change took them out (ARCHIVER_READER_RETENTION): retired, or offline and waiting
-- to move to the Archive tier; how many, their bytes, the last until when.
SELECT count(*) AS files, coalesce(sum(byte_size), 0) AS bytes, max(kept_until) AS until
FROM archive_files WHERE source_table = $1 AND kept_until > now()
  AND (state = 'retired' OR (offline AND tier IS DISTINCT FROM 'Archive'))

-- name: table_ledger
-- The last operations that took rows of a table out of the archive (restore, purge,
-- erase): who, when, what was asked (an erasure's predicate as its shape only).
SELECT id, operation, status, actor, started_at, rows, request::text AS request
FROM archive_ledger WHERE $1 = ANY (tables) ORDER BY id DESC LIMIT 10
