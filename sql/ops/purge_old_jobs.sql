-- Delete finished jobs (completed, failed, cancelled) older than :days days. Workers do
-- this by themselves after ARCHIVER_RETENTION_DAYS; this is for doing it now. The
-- archive_files catalog keeps its rows.
--   psql "$ARCHIVER_DATABASE_URL" -v days=7 -f sql/ops/purge_old_jobs.sql
DELETE FROM background_jobs
WHERE status IN ('completed', 'failed', 'cancelled')
  AND finished_at < now() - make_interval(days => :'days'::int)
RETURNING id, status, finished_at;
