-- background_jobs (and what gates it: archiver_paused_tables, archiver_job_counts,
-- archiver_maintenance): every query by name. Written only through archiver/store/jobs.py.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

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
-- or cancelled if that was asked). Any live worker runs this; no sweeper needed. The
-- lost lease is the attempt's error, kept among the newest 10 as fail_attempt keeps one.
UPDATE background_jobs j
SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                  WHEN j.attempts >= j.max_attempts THEN 'failed'
                  ELSE 'queued' END,
    finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts
                       THEN now() END,
    run_at = now(),
    last_error = lost.said,
    errors = (SELECT COALESCE(jsonb_agg(e ORDER BY n), '[]') FROM (
                SELECT e, n FROM jsonb_array_elements(
                    j.errors || jsonb_build_array(jsonb_build_object(
                        'at', now(), 'attempt', j.attempts, 'worker', j.locked_by, 'error', lost.said)))
                    WITH ORDINALITY AS x(e, n)
                ORDER BY n DESC LIMIT 10) kept),
    locked_by = NULL, heartbeat_at = NULL
FROM (
    SELECT id, format('worker %s lost its lease (no heartbeat since %s)', locked_by, heartbeat_at) AS said
    FROM background_jobs
    WHERE status = 'running' AND heartbeat_at < now() - make_interval(secs => $1)
    FOR UPDATE SKIP LOCKED) lost
WHERE j.id = lost.id
RETURNING j.id, j.status

-- name: prune_finished
DELETE FROM background_jobs WHERE id IN (
    SELECT id FROM background_jobs
    WHERE status IN ('completed', 'cancelled', 'failed')
      AND finished_at < now() - make_interval(secs => $1)
    LIMIT $2 FOR UPDATE SKIP LOCKED)

-- name: compact_job_counts
-- The count deltas (sql/014_status_counts.sql) folded into one row per table and status
-- (per table for files). A delta inserted meanwhile is not in the DELETE's snapshot: kept.
WITH folded AS (DELETE FROM archiver_job_counts RETURNING *)
INSERT INTO archiver_job_counts
SELECT source_table, status, sum(jobs), sum(rows_archived), sum(bytes_archived)
FROM folded GROUP BY 1, 2 HAVING sum(jobs) <> 0

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

-- name: running_archive_of
SELECT id FROM background_jobs
WHERE status = 'running' AND task_name = 'archive' AND payload->>'table' = $1 LIMIT 1

-- name: checkpoint
-- In the chunk's own transaction, which may have begun longer ago than the lease (a slow
-- upload): the heartbeat is the clock's, not the transaction's start (now() set it seconds
-- back, and the rescue took the job from its healthy worker after each such chunk).
UPDATE background_jobs SET progress = $3::jsonb, heartbeat_at = clock_timestamp()
WHERE id = $1::uuid AND status = 'running' AND locked_by = $2
RETURNING id

-- name: still_held
-- Locks the job row until the pending file is committed: a rescue (SKIP LOCKED) cannot
-- slip in between this check and the insert.
SELECT id FROM background_jobs WHERE id = $1::uuid AND status = 'running' AND locked_by = $2
FOR NO KEY UPDATE

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
