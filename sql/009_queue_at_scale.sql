-- The queue at a million finished jobs (the bench's catalog section): the newest jobs
-- first without sorting all of them (`archiver jobs`, the console's list), and the
-- failed ones without reading every job (archiver_failed_jobs, `archiver status`).
CREATE INDEX background_jobs_newest ON background_jobs (created_at DESC, id);
CREATE INDEX background_jobs_failed ON background_jobs (finished_at) WHERE status = 'failed';
