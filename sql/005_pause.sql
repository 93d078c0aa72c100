-- Pausing. A paused table's jobs, and a paused job, are never claimed; a running one
-- stops at its next chunk boundary and goes back to the queue without spending an
-- attempt. A table pause also holds jobs enqueued later (a policy's next slot) until
-- `archiver resume`. Resuming notifies the workers.
CREATE TABLE archiver_paused_tables (
    source_table text        PRIMARY KEY,  -- schema.table, as jobs record it
    paused_at    timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE background_jobs ADD COLUMN paused_at timestamptz;

-- Tables paused the old way (sql/ops/pause_table.sql set run_at = 'infinity') stay paused.
INSERT INTO archiver_paused_tables (source_table)
SELECT DISTINCT payload->>'table' FROM background_jobs
WHERE status = 'queued' AND run_at = 'infinity' AND payload ? 'table'
ON CONFLICT DO NOTHING;
UPDATE background_jobs SET run_at = now() WHERE status = 'queued' AND run_at = 'infinity';

-- Whether a job may not run now: paused itself, or its table is.
CREATE FUNCTION archiver_job_paused(job background_jobs) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT job.paused_at IS NOT NULL
        OR EXISTS (SELECT 1 FROM archiver_paused_tables p WHERE p.source_table = job.payload->>'table')
$$;

-- What is paused: whole tables, and single jobs still queued or running.
CREATE VIEW archiver_paused AS
SELECT 'table' AS kind, source_table, NULL::uuid AS job_id, paused_at,
       (SELECT count(*) FROM background_jobs j
         WHERE j.payload->>'table' = p.source_table AND j.status IN ('queued', 'running')) AS jobs
FROM archiver_paused_tables p
UNION ALL
SELECT 'job', payload->>'table', id, paused_at, 1
FROM background_jobs
WHERE paused_at IS NOT NULL AND status IN ('queued', 'running');
