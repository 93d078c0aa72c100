-- `archiver status` at any number of jobs kept and files catalogued. archiver_job_summary grouped every job
-- (384 ms at 1,000,000 finished jobs, the bench's catalog section); it now groups the
-- live jobs (queued, running) and reads the finished ones from counts kept as jobs
-- finish, leave a finished status (retry) or are pruned.
--
-- The counts are deltas, appended and never updated: a trigger inserts +1 (and the
-- job's rows and bytes) when a job enters completed, failed or cancelled, and -1 when it
-- leaves one or is deleted. Inserts never wait on each other, so two workers finishing
-- jobs of one table do not queue on a counter row (nor deadlock, as updates of several
-- counter rows in two orders could). The pruner folds the deltas into one row per table
-- and status (jobqueue.compact_job_counts), so the view reads a few rows per table.

CREATE TABLE archiver_job_counts (
    source_table text NOT NULL,  -- '' for a job without a table (noop)
    status text NOT NULL,
    jobs bigint NOT NULL,
    rows_archived bigint NOT NULL,
    bytes_archived bigint NOT NULL
);

-- A job's contribution: 1 job and its progress's rows and bytes, signed.
CREATE FUNCTION archiver_job_count_of(j background_jobs, sign int)
RETURNS archiver_job_counts LANGUAGE sql IMMUTABLE AS $$
    SELECT COALESCE(j.payload->>'table', ''), j.status, sign::bigint,
           sign * COALESCE((j.progress->>'rows')::bigint, 0),
           sign * COALESCE((j.progress->>'bytes')::bigint, 0)
$$;

-- One job finishing, leaving a finished status, or changing while finished.
CREATE FUNCTION archiver_count_job_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IN ('completed', 'failed', 'cancelled') THEN
        INSERT INTO archiver_job_counts SELECT (archiver_job_count_of(OLD, -1)).*;
    END IF;
    IF NEW.status IN ('completed', 'failed', 'cancelled') THEN
        INSERT INTO archiver_job_counts SELECT (archiver_job_count_of(NEW, 1)).*;
    END IF;
    RETURN NULL;
END
$$;

-- Claims and heartbeats never call it: the WHEN is evaluated without a function call.
CREATE TRIGGER archiver_count_job_change
AFTER UPDATE ON background_jobs FOR EACH ROW
WHEN ((OLD.status IN ('completed', 'failed', 'cancelled')
       OR NEW.status IN ('completed', 'failed', 'cancelled'))
      AND (OLD.status, OLD.payload->>'table', OLD.progress->>'rows', OLD.progress->>'bytes')
          IS DISTINCT FROM
          (NEW.status, NEW.payload->>'table', NEW.progress->>'rows', NEW.progress->>'bytes'))
EXECUTE FUNCTION archiver_count_job_change();

-- Inserted or deleted jobs, a statement at a time (the pruner deletes a thousand at once).
CREATE FUNCTION archiver_count_jobs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO archiver_job_counts
    SELECT c.source_table, c.status, sum(c.jobs), sum(c.rows_archived), sum(c.bytes_archived)
    FROM inserted j, archiver_job_count_of(j, 1) c
    WHERE j.status IN ('completed', 'failed', 'cancelled')
    GROUP BY 1, 2;
    RETURN NULL;
END
$$;

CREATE FUNCTION archiver_count_jobs_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO archiver_job_counts
    SELECT c.source_table, c.status, sum(c.jobs), sum(c.rows_archived), sum(c.bytes_archived)
    FROM deleted j, archiver_job_count_of(j, -1) c
    WHERE j.status IN ('completed', 'failed', 'cancelled')
    GROUP BY 1, 2;
    RETURN NULL;
END
$$;

CREATE TRIGGER archiver_count_jobs_inserted
AFTER INSERT ON background_jobs REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION archiver_count_jobs_inserted();

CREATE TRIGGER archiver_count_jobs_deleted
AFTER DELETE ON background_jobs REFERENCING OLD TABLE AS deleted
FOR EACH STATEMENT EXECUTE FUNCTION archiver_count_jobs_deleted();

CREATE FUNCTION archiver_count_jobs_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM archiver_job_counts;
    RETURN NULL;
END
$$;

CREATE TRIGGER archiver_count_jobs_truncated
AFTER TRUNCATE ON background_jobs
FOR EACH STATEMENT EXECUTE FUNCTION archiver_count_jobs_truncated();

-- The jobs already kept, counted once, with no job changing meanwhile (writers wait for
-- the migration's transaction; readers do not).
LOCK TABLE background_jobs IN SHARE MODE;
INSERT INTO archiver_job_counts
SELECT c.source_table, c.status, sum(c.jobs), sum(c.rows_archived), sum(c.bytes_archived)
FROM background_jobs j, archiver_job_count_of(j, 1) c
WHERE j.status IN ('completed', 'failed', 'cancelled')
GROUP BY 1, 2;

CREATE OR REPLACE VIEW archiver_job_summary AS
SELECT payload->>'table' AS source_table,
       status,
       count(*) AS jobs,
       now() - min(run_at) FILTER (WHERE status = 'queued' AND run_at <= now())
           AS oldest_queued_age,
       COALESCE(sum((progress->>'rows')::bigint), 0)::bigint AS rows_archived,
       COALESCE(sum((progress->>'bytes')::bigint), 0)::bigint AS bytes_archived
FROM background_jobs
WHERE status IN ('queued', 'running')
GROUP BY 1, 2
UNION ALL
SELECT NULLIF(source_table, ''),
       status,
       sum(jobs)::bigint,
       NULL::interval,
       sum(rows_archived)::bigint,
       sum(bytes_archived)::bigint
FROM archiver_job_counts
GROUP BY source_table, status
HAVING sum(jobs) > 0;

-- The same for archiver_archive_files, a GROUP BY over every catalogued file (25 ms at
-- 100,000 files): files, rows, bytes and pending files counted as deltas by the same
-- means; the oldest and newest cutoff value and the last file written found per table
-- by an index probe each, not by reading the table's files.

CREATE TABLE archiver_file_counts (
    source_table text NOT NULL,
    catalogued bigint NOT NULL,  -- rows of archive_files, in any state
    files bigint NOT NULL,       -- committed
    rows bigint NOT NULL,
    bytes bigint NOT NULL,
    pending_files bigint NOT NULL
);

CREATE FUNCTION archiver_file_count_of(f archive_files, sign int)
RETURNS archiver_file_counts LANGUAGE sql IMMUTABLE AS $$
    SELECT f.source_table, sign::bigint,
           sign * (f.state = 'committed')::int::bigint,
           sign * CASE WHEN f.state = 'committed' THEN f.row_count ELSE 0 END,
           sign * CASE WHEN f.state = 'committed' THEN f.byte_size ELSE 0 END,
           sign * (f.state = 'pending')::int::bigint
$$;

CREATE FUNCTION archiver_count_file_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO archiver_file_counts SELECT (archiver_file_count_of(OLD, -1)).*;
    INSERT INTO archiver_file_counts SELECT (archiver_file_count_of(NEW, 1)).*;
    RETURN NULL;
END
$$;

-- Publications, tiers and verifications update files without changing what is counted.
CREATE TRIGGER archiver_count_file_change
AFTER UPDATE ON archive_files FOR EACH ROW
WHEN ((OLD.state, OLD.source_table, OLD.row_count, OLD.byte_size)
      IS DISTINCT FROM (NEW.state, NEW.source_table, NEW.row_count, NEW.byte_size))
EXECUTE FUNCTION archiver_count_file_change();

CREATE FUNCTION archiver_count_files_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO archiver_file_counts
    SELECT c.source_table, sum(c.catalogued), sum(c.files), sum(c.rows), sum(c.bytes),
           sum(c.pending_files)
    FROM inserted f, archiver_file_count_of(f, 1) c GROUP BY 1;
    RETURN NULL;
END
$$;

CREATE FUNCTION archiver_count_files_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO archiver_file_counts
    SELECT c.source_table, sum(c.catalogued), sum(c.files), sum(c.rows), sum(c.bytes),
           sum(c.pending_files)
    FROM deleted f, archiver_file_count_of(f, -1) c GROUP BY 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER archiver_count_files_inserted
AFTER INSERT ON archive_files REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION archiver_count_files_inserted();

CREATE TRIGGER archiver_count_files_deleted
AFTER DELETE ON archive_files REFERENCING OLD TABLE AS deleted
FOR EACH STATEMENT EXECUTE FUNCTION archiver_count_files_deleted();

CREATE FUNCTION archiver_count_files_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM archiver_file_counts;
    RETURN NULL;
END
$$;

CREATE TRIGGER archiver_count_files_truncated
AFTER TRUNCATE ON archive_files
FOR EACH STATEMENT EXECUTE FUNCTION archiver_count_files_truncated();

-- newest_value and last_written_at per table (oldest_value: archive_files_table_range)
CREATE INDEX archive_files_table_newest ON archive_files (source_table, max_cutoff_value)
    WHERE state = 'committed';
CREATE INDEX archive_files_table_written ON archive_files (source_table, created_at);

LOCK TABLE archive_files IN SHARE MODE;
INSERT INTO archiver_file_counts
SELECT c.source_table, sum(c.catalogued), sum(c.files), sum(c.rows), sum(c.bytes),
       sum(c.pending_files)
FROM archive_files f, archiver_file_count_of(f, 1) c GROUP BY 1;

CREATE OR REPLACE VIEW archiver_archive_files AS
SELECT c.source_table,
       c.files,
       c.rows,
       c.bytes,
       (SELECT min(min_cutoff_value) FROM archive_files f
        WHERE f.source_table = c.source_table AND f.state = 'committed') AS oldest_value,
       (SELECT max(max_cutoff_value) FROM archive_files f
        WHERE f.source_table = c.source_table AND f.state = 'committed') AS newest_value,
       c.pending_files,
       (SELECT max(created_at) FROM archive_files f
        WHERE f.source_table = c.source_table) AS last_written_at
FROM (SELECT source_table, sum(files)::bigint AS files, sum(rows)::bigint AS rows,
             sum(bytes)::bigint AS bytes, sum(pending_files)::bigint AS pending_files
      FROM archiver_file_counts GROUP BY source_table HAVING sum(catalogued) > 0) c;
