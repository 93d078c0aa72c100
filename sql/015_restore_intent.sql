-- A restore that moves rows back while the catalog is in another database than the
-- source (ARCHIVER_SOURCE_URL): the rows go in in one transaction of the source, the
-- files leave the archive in one of the catalog, and no transaction spans both. So, as
-- an archive job's chunk records its file `pending` with the source transaction's id
-- before that transaction commits, the restore records its intent first (archiver.ledger):
-- the files it retires claimed (still committed, retired_by set: no other operation
-- takes them), the rewrites and counts it will catalogue, and the source transaction's
-- id; then the source commits; then the catalog applies the intent. A crash in between
-- is settled by the next sweep with pg_xact_status on the source: committed, the intent
-- is applied; aborted, it is dropped and the files released.
ALTER TABLE archive_ledger
    ADD COLUMN source_xid xid8,
    ADD COLUMN intent     jsonb;
