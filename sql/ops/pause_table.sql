-- Pause a table: its queued jobs are not claimed until resumed (run_at = infinity).
-- A running job is not stopped (cancel it), and jobs enqueued later are not paused.
--   psql "$ARCHIVER_DATABASE_URL" -v table=public.orders -f sql/ops/pause_table.sql
UPDATE background_jobs
SET run_at = 'infinity'
WHERE status = 'queued' AND payload->>'table' = :'table'
RETURNING id, run_at;
