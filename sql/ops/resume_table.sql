-- Resume a table paused with pause_table.sql (or `archiver pause --table T`), as
-- `archiver resume --table T` does; idle workers are woken at once.
--   psql "$ARCHIVER_DATABASE_URL" -v table=public.orders -f sql/ops/resume_table.sql
WITH resumed AS (
    DELETE FROM archiver_paused_tables WHERE source_table = :'table' RETURNING source_table)
SELECT source_table, pg_notify('archiver_jobs', source_table) FROM resumed;
