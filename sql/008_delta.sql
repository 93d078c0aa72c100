-- Delta Lake (archiver.delta): each archived table is also a Delta table, derived from
-- this catalog. A file is added to its table's Delta log by a numbered publication;
-- the number is the Delta app transaction (`txn`, appId `archiver`) of the commit that
-- adds it, so a publication that crashed after its Delta commit is known for done.

ALTER TABLE archive_files
    ADD COLUMN delta_schema text,                -- the file's columns as a Delta schema (JSON)
    ADD COLUMN delta_stats  text,                -- its add action's statistics (JSON)
    ADD COLUMN delta        boolean NOT NULL DEFAULT true,  -- belongs in the Delta table
    ADD COLUMN publication  bigint,              -- the publication that adds it
    ADD COLUMN delta_refused text;               -- why it cannot join the Delta table

-- Files of copy jobs still in the queue: copies are not published (see ArchiveRequest).
UPDATE archive_files f SET delta = false
FROM background_jobs j WHERE j.id = f.job_id AND j.payload->>'mode' = 'copy';

CREATE INDEX archive_files_unpublished ON archive_files (storage_url, source_table)
    WHERE publication IS NULL AND delta AND state = 'committed' AND delta_refused IS NULL;
CREATE INDEX archive_files_publication ON archive_files (storage_url, source_table, publication);

CREATE TABLE delta_tables (
    storage_url   text        NOT NULL,
    source_table  text        NOT NULL,          -- schema.table
    publications  bigint      NOT NULL DEFAULT 0, -- numbers given out so far
    published     bigint      NOT NULL DEFAULT 0, -- the last one known to be in the Delta log
    delta_version bigint,                         -- the Delta table's version after it
    published_at  timestamptz,
    rebuilding    boolean     NOT NULL DEFAULT false, -- publish --rebuild under way
    PRIMARY KEY (storage_url, source_table)
);
