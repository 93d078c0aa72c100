-- Cancel a job: a queued one at once; a running one stops at its next chunk boundary
-- (its worker is told by NOTIFY and by its next heartbeat). Same as `archiver cancel ID`.
--   psql "$ARCHIVER_DATABASE_URL" -v job_id=<uuid> -f sql/ops/cancel_job.sql
UPDATE background_jobs
SET status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
    finished_at = CASE WHEN status = 'queued' THEN now() ELSE finished_at END,
    cancel_requested_at = COALESCE(cancel_requested_at, now())
WHERE id = :'job_id'::uuid AND status IN ('queued', 'running')
RETURNING id, status;
