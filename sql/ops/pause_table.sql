-- Pause a table, as `archiver pause --table T` does: its queued jobs (and any enqueued
-- later) are not claimed; a running one stops at its next chunk boundary and is queued
-- again without spending an attempt. `resume_table.sql` undoes it.
--   psql "$ARCHIVER_DATABASE_URL" -v table=public.orders -f sql/ops/pause_table.sql
INSERT INTO archiver_paused_tables (source_table) VALUES (:'table')
ON CONFLICT (source_table) DO NOTHING
RETURNING source_table, paused_at;
