-- Each row in one place (archiver.ledger): an operation that takes rows out of the
-- archive (a restore that moves rows back; later retention and erasure) retires the
-- files it empties or rewrites, catalogues the rewritten files in their place and
-- writes a ledger row, in one transaction. A retired file leaves its Delta table in a
-- numbered publication (`unpublication`, as `publication` adds it), then its blob and
-- its catalog row are deleted.

ALTER TABLE archive_files DROP CONSTRAINT archive_files_state_check;
ALTER TABLE archive_files ADD CONSTRAINT archive_files_state_check
    CHECK (state IN ('pending', 'committed', 'retired'));
ALTER TABLE archive_files
    ADD COLUMN retired_by    bigint,             -- the archive_ledger row that retired it
    ADD COLUMN unpublication bigint;             -- the publication that removes it

-- A rewritten file keeps its original's job and part (a chunk's files stay together);
-- the retired original keeps them too until it is deleted.
ALTER TABLE archive_files DROP CONSTRAINT archive_files_job_id_part_key;
CREATE UNIQUE INDEX archive_files_job_part ON archive_files (job_id, part)
    WHERE state <> 'retired';

CREATE INDEX archive_files_retired ON archive_files (storage_url, source_table)
    WHERE state = 'retired';

CREATE TABLE archive_ledger (
    id          bigserial   PRIMARY KEY,
    operation   text        NOT NULL CHECK (operation IN ('restore')),
    status      text        NOT NULL DEFAULT 'running'
                CHECK (status IN ('running', 'done', 'abandoned')),
    actor       text        NOT NULL,            -- who asked (OS user@host of the command)
    db_role     text        NOT NULL DEFAULT current_user,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    storage_url text        NOT NULL,
    tables      text[]      NOT NULL,            -- schema.table each
    request     jsonb       NOT NULL DEFAULT '{}', -- what was asked (range, options)
    rows        bigint,                          -- rows taken out of the archive
    detail      jsonb                            -- per table: rows, files retired, files written
);
CREATE INDEX archive_ledger_running ON archive_ledger (id) WHERE status = 'running';
