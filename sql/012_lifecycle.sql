-- The archive's own lifecycle (docs/lifecycle.md): retention (`archiver purge`), erasure
-- on request (`archiver erase`), access tiers, index tags and write-once storage.
-- Purge and erase are ledger operations like a restore's move back (archiver.ledger):
-- files retired and rewritten in one transaction, then reaped.

ALTER TABLE archive_ledger DROP CONSTRAINT archive_ledger_operation_check;
ALTER TABLE archive_ledger ADD CONSTRAINT archive_ledger_operation_check
    CHECK (operation IN ('restore', 'purge', 'erase'));

ALTER TABLE archive_files
    -- the access tier the file was written in or last moved to (NULL: the account's
    -- default); 'Archive' is offline: unreadable until rehydrated
    ADD COLUMN tier            text,
    -- out of its Delta table while in the Archive tier (removed by a publication, as a
    -- retired file is), added again once rehydrated; still catalogued, still archived
    ADD COLUMN offline         boolean NOT NULL DEFAULT false,
    ADD COLUMN verified_at     timestamptz,      -- the last `archiver verify` that found it sound
    ADD COLUMN immutable_until timestamptz,      -- a per-blob immutability policy set by archiver
    ADD COLUMN legal_hold      boolean NOT NULL DEFAULT false;

CREATE INDEX archive_files_offline ON archive_files (storage_url, source_table)
    WHERE offline;

-- After an erasure, a table's Delta log history goes (its statistics may hold erased
-- values): the newest erasure whose history is gone (archiver.delta.history).
ALTER TABLE delta_tables ADD COLUMN history_forgotten_through bigint NOT NULL DEFAULT 0;
