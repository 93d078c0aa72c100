-- The console (archiver.web) at a million jobs and a hundred thousand files: rows
-- archived per hour by the files' creation time, a job's group (partitions and
-- --parallel ranges) by its id, and what `archiver verify` last found.
CREATE INDEX archive_files_created ON archive_files (created_at);
CREATE INDEX background_jobs_group ON background_jobs ((payload->>'group'))
    WHERE payload ? 'group';

CREATE TABLE archive_verifications (
    id             bigserial   PRIMARY KEY,
    at             timestamptz NOT NULL DEFAULT now(),
    actor          text        NOT NULL,
    scope          text        NOT NULL,            -- `all`, `table T` or `job ID`
    tables         text[]      NOT NULL,            -- the tables checked; {} for all
    files          integer     NOT NULL,
    problems       integer     NOT NULL,
    first_problems text[]      NOT NULL             -- the first ten lines
);
CREATE INDEX archive_verifications_at ON archive_verifications (at DESC);
