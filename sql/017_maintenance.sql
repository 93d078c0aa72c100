-- The workers' maintenance duties that run once a period for a whole storage or table
-- (the orphan sweep; compaction), not on every worker's timer: the first worker whose
-- timer finds a duty due takes the period (one row per duty and scope) and queues the
-- duty's job. Ops read when each last ran:
--   SELECT duty, scope, last_queued FROM archiver_maintenance ORDER BY last_queued DESC;
CREATE TABLE archiver_maintenance (
    duty         text        NOT NULL,  -- 'orphans', ...
    scope        text        NOT NULL,  -- a storage URL, or storage and table
    last_queued  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (duty, scope)
);
