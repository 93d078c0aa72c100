-- Throttling. A job's limits live in its row, so `archiver throttle` (or an UPDATE) can
-- change them while it runs; it obeys from its next chunk. While a job waits on a limit
-- it says why and since when.
ALTER TABLE background_jobs
    ADD COLUMN limits           jsonb NOT NULL DEFAULT '{}',  -- {"max_rows_per_second": N}
    ADD COLUMN throttled_reason text,
    ADD COLUMN throttled_since  timestamptz;

CREATE OR REPLACE VIEW archiver_running_jobs AS
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
       cancel_requested_at IS NOT NULL AS cancel_requested,
       throttled_reason,
       throttled_since,
       limits
FROM background_jobs,
     LATERAL (SELECT COALESCE((progress->>'rows')::bigint, 0) AS rows_done,
                     COALESCE((progress->>'rows_estimated')::bigint, 0) AS rows_estimated,
                     greatest(extract(epoch FROM now() - started_at), 0.001) AS seconds) r
WHERE status = 'running';
