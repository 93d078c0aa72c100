-- Views for operators: what is queued, running, failing, and what has been archived.
-- Read them with psql; `archiver status`, `jobs` and `show` print the same.

-- Per table and status: jobs, how long the oldest queued job has waited, rows and bytes
-- archived (progress counts committed chunks, so partly done jobs count too).
CREATE VIEW archiver_job_summary AS
SELECT payload->>'table' AS source_table,
       status,
       count(*) AS jobs,
       now() - min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now())
           AS oldest_queued_age,
       COALESCE(sum((progress->>'rows')::bigint), 0)::bigint AS rows_archived,
       COALESCE(sum((progress->>'bytes')::bigint), 0)::bigint AS bytes_archived
FROM background_jobs
GROUP BY 1, 2;

-- Running jobs: who runs them, how fresh their lease is, how far and how fast they go.
-- rows_per_second is over the job's whole run (since its first start).
CREATE VIEW archiver_running_jobs AS
SELECT id,
       payload->>'table' AS source_table,
       locked_by AS worker,
       attempts,
       started_at,
       now() - heartbeat_at AS heartbeat_age,
       r.rows_done,
       r.rows_estimated,
       COALESCE((progress->>'files')::int, 0) AS chunks_done,
       COALESCE((progress->>'chunks_estimated')::int, 0) AS chunks_estimated,
       COALESCE((progress->>'bytes')::bigint, 0) AS bytes_done,
       CASE WHEN r.rows_estimated > 0
            THEN round(100.0 * least(r.rows_done, r.rows_estimated) / r.rows_estimated, 1)
       END AS progress_pct,
       round(r.rows_done / r.seconds, 1) AS rows_per_second,
       CASE WHEN r.rows_done > 0 AND r.rows_estimated > r.rows_done
            THEN make_interval(secs => (r.rows_estimated - r.rows_done) * r.seconds / r.rows_done)
       END AS eta,
       cancel_requested_at IS NOT NULL AS cancel_requested
FROM background_jobs,
     LATERAL (SELECT COALESCE((progress->>'rows')::bigint, 0) AS rows_done,
                     COALESCE((progress->>'rows_estimated')::bigint, 0) AS rows_estimated,
                     greatest(extract(epoch FROM now() - started_at), 0.001) AS seconds) r
WHERE status = 'running';

-- Jobs that failed for good, and jobs waiting to retry after a failed attempt.
CREATE VIEW archiver_failed_jobs AS
SELECT id,
       payload->>'table' AS source_table,
       status,
       attempts,
       max_attempts,
       last_error,
       jsonb_array_length(errors) AS errors_kept,
       errors -> -1 ->> 'at' AS last_error_at,
       CASE WHEN status = 'queued' THEN run_at END AS next_retry,
       finished_at
FROM background_jobs
WHERE status = 'failed'
   OR (status = 'queued' AND attempts > 0 AND last_error IS NOT NULL);

-- Per table: the Parquet files written, their rows and bytes, and the range of the cutoff
-- column they cover. Files of jobs since pruned stay here.
CREATE VIEW archiver_archive_files AS
SELECT source_table,
       count(*) FILTER (WHERE state = 'committed') AS files,
       COALESCE(sum(row_count) FILTER (WHERE state = 'committed'), 0)::bigint AS rows,
       COALESCE(sum(byte_size) FILTER (WHERE state = 'committed'), 0)::bigint AS bytes,
       min(min_cutoff_value) FILTER (WHERE state = 'committed') AS oldest_value,
       max(max_cutoff_value) FILTER (WHERE state = 'committed') AS newest_value,
       count(*) FILTER (WHERE state = 'pending') AS pending_files,
       max(created_at) AS last_written_at
FROM archive_files
GROUP BY source_table;
