-- Compaction (archiver.lifecycle.compact): a table's small files merged into files of a
-- target size, a ledger operation of its own ('compact') that retires the small files
-- and catalogues their merge in one transaction. Its Delta commit rearranges, it adds no
-- row (dataChange false): the publisher tells its actions by the operation that wrote a
-- file (made_by) or retired it (retired_by). A file compaction replaced stays on storage
-- a while after it leaves the Delta log (kept_until: a day on), for readers that opened
-- the table before, as Delta's own deletedFileRetentionDuration keeps them.
ALTER TABLE archive_ledger DROP CONSTRAINT archive_ledger_operation_check;
ALTER TABLE archive_ledger ADD CONSTRAINT archive_ledger_operation_check
    CHECK (operation IN ('restore', 'purge', 'erase', 'convert', 'compact'));
ALTER TABLE archive_files
    ADD COLUMN made_by    bigint,       -- the ledger operation that wrote it (a rewrite, a merge)
    ADD COLUMN kept_until timestamptz;  -- retired: its blob is not deleted before then
-- the workers' compaction sweep: the tables with small committed files, by their index
CREATE INDEX archive_files_small ON archive_files (storage_url, source_table, byte_size)
    WHERE state = 'committed';
-- a query's archive jobs of the tables it names (archiver.query.catalog), years of them
CREATE INDEX background_jobs_archive_table ON background_jobs ((payload->>'table'))
    WHERE task_name = 'archive';
