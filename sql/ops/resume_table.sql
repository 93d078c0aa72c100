-- Resume a table paused with pause_table.sql: its paused jobs become runnable now.
--   psql "$ARCHIVER_DATABASE_URL" -v table=public.orders -f sql/ops/resume_table.sql
UPDATE background_jobs
SET run_at = now()
WHERE status = 'queued' AND run_at = 'infinity' AND payload->>'table' = :'table'
RETURNING id, run_at;
