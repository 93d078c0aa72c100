-- The job queue and the catalog of archived files.
-- Applied by `archiver migrate`; every schema change is a new numbered file here.

CREATE TABLE background_jobs (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    task_name     text        NOT NULL,
    payload       jsonb       NOT NULL DEFAULT '{}',
    status        text        NOT NULL DEFAULT 'queued'
                  CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    priority      integer     NOT NULL DEFAULT 0,          -- higher runs first
    run_at        timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
    locked_by     text,
    heartbeat_at  timestamptz,
    last_error    text,
    errors        jsonb       NOT NULL DEFAULT '[]',       -- earlier errors, newest last, bounded
    progress      jsonb       NOT NULL DEFAULT '{}',
    dedup_key     text,                                    -- same archive never queued/running twice
    lock_key      text,                                    -- jobs sharing it never run at once
    cancel_requested_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    finished_at   timestamptz
);

-- Only queued rows: what a claim scans.
CREATE INDEX background_jobs_claimable ON background_jobs (priority DESC, run_at)
    WHERE status = 'queued';
CREATE UNIQUE INDEX background_jobs_dedup ON background_jobs (dedup_key)
    WHERE status IN ('queued', 'running');
CREATE UNIQUE INDEX background_jobs_one_running_per_lock ON background_jobs (lock_key)
    WHERE status = 'running';
CREATE INDEX background_jobs_running ON background_jobs (heartbeat_at) WHERE status = 'running';
CREATE INDEX background_jobs_finished ON background_jobs (finished_at)
    WHERE status IN ('completed', 'failed', 'cancelled');

-- Wake idle workers at once; polling remains the fallback.
CREATE FUNCTION archiver_notify_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'queued' THEN
        PERFORM pg_notify('archiver_jobs', NEW.id::text);
    END IF;
    IF NEW.cancel_requested_at IS NOT NULL AND NEW.status = 'running' THEN
        PERFORM pg_notify('archiver_cancel', NEW.id::text);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER background_jobs_notify
    AFTER INSERT OR UPDATE OF status, run_at, cancel_requested_at ON background_jobs
    FOR EACH ROW EXECUTE FUNCTION archiver_notify_job();

-- One row per Parquet file written. Rows stay when their job is pruned.
CREATE TABLE archive_files (
    id            bigserial   PRIMARY KEY,
    job_id        uuid        NOT NULL,
    part          integer     NOT NULL,
    source_table  text        NOT NULL,                    -- schema.table
    storage_url   text        NOT NULL,                    -- az://container/prefix or file:///dir
    path          text        NOT NULL,                    -- object name under storage_url
    row_count     bigint      NOT NULL,
    byte_size     bigint      NOT NULL,
    md5           text        NOT NULL,                    -- base64, as Azure reports it
    key_columns   text[]      NOT NULL,
    min_key       text[]      NOT NULL,
    max_key       text[]      NOT NULL,
    cutoff_column text        NOT NULL,
    min_cutoff_value timestamptz,                          -- dates and naive timestamps read as UTC
    max_cutoff_value timestamptz,
    state         text        NOT NULL DEFAULT 'committed'
                  CHECK (state IN ('pending', 'committed')),
    source_xid    xid8,                                    -- source transaction, when the source is another database
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, part)
);
CREATE INDEX archive_files_table_range ON archive_files (source_table, min_cutoff_value, max_cutoff_value);
