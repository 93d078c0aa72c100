-- Requeue a running job whose worker is stuck or gone, without waiting for its lease
-- (ARCHIVER_LEASE_SECONDS) to expire. Safe even if the worker is alive: every write it
-- makes checks it still holds the job, so its chunk in progress rolls back.
--   psql "$ARCHIVER_DATABASE_URL" -v job_id=<uuid> -f sql/ops/requeue_stuck_job.sql
UPDATE background_jobs
SET status = 'queued', run_at = now(), locked_by = NULL, heartbeat_at = NULL,
    last_error = format('requeued by an operator (was held by %s)', locked_by)
WHERE id = :'job_id'::uuid AND status = 'running'
RETURNING id, status, attempts, max_attempts;
