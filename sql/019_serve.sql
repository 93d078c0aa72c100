-- The archive in the application's own SQL (archiver serve, archiver attach): a view that
-- unions a table's live rows with the archived rows of the files the reader's snapshot
-- sees committed (docs/sql-access.md). A file a restore, erase, purge or compaction
-- retires must stay readable while any snapshot that still sees it committed is alive,
-- as VACUUM keeps a deleted row's tuple: the transaction that retired it is recorded,
-- and its blob is deleted only once no snapshot of this database began before that
-- transaction ended (archiver_seen_committed), or when its keep (kept_until) ends, if later.
ALTER TABLE archive_files ADD COLUMN retired_xid xid8;  -- the transaction that retired it

-- Whether some other session of this database may hold a snapshot taken before
-- transaction `retired` ended: its xmin at or before it (pg_stat_activity shows every
-- session's backend_xmin to every role). Conservative: a snapshot's xmin is the oldest
-- transaction running in the whole cluster when it was taken, so a long transaction
-- anywhere defers reaping; the asking session itself is never one (its own snapshot
-- is newer than the retirement it reads). A standby's sessions are not among them: the views are
-- exact read on the primary (docs/sql-access.md).
CREATE FUNCTION archiver_seen_committed(retired xid8) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog AS $$
    SELECT retired IS NOT NULL AND EXISTS (
        SELECT 1 FROM pg_stat_activity
        WHERE datname = current_database() AND backend_xmin IS NOT NULL
          AND backend_type = 'client backend' AND pid <> pg_backend_pid()
          AND age(backend_xmin) >= age(((retired::text::numeric % 4294967296)::text)::xid))
$$;
