-- Files an older release wrote with Parquet types Delta Lake has none for (uuid, json,
-- time, numeric wider than 38 digits) are rewritten with those columns as text by the
-- publisher, a ledger operation of its own (archiver.delta.convert).
ALTER TABLE archive_ledger DROP CONSTRAINT archive_ledger_operation_check;
ALTER TABLE archive_ledger ADD CONSTRAINT archive_ledger_operation_check
    CHECK (operation IN ('restore', 'purge', 'erase', 'convert'));

-- Those the publisher of the previous release left out of their Delta table for their
-- types: published (converted) by the next publication of their table.
UPDATE archive_files SET delta_refused = NULL
WHERE delta_refused LIKE '%has no Delta Lake type' AND state = 'committed';
