-- The reads that span the state tables for the archive's readers (archiver query,
-- archiver serve): every query by name, run through archiver/store/reads.py.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: catalog_archived
-- Every catalogued table, read off the index on source_table (a loose index scan).
WITH RECURSIVE t AS (
    SELECT min(source_table) AS s FROM archive_files
    UNION ALL
    SELECT (SELECT min(source_table) FROM archive_files WHERE source_table > t.s)
    FROM t WHERE t.s IS NOT NULL
)
SELECT s FROM t WHERE s IS NOT NULL ORDER BY s

-- name: catalog_named
-- The catalog's tables a statement names (schema.table, or a bare name in any schema:
-- its distinct tables read off the index on source_table, a loose index scan), and the
-- source's tables of those names with archive jobs queued but no file yet (their view
-- has _archiver_source too).
WITH RECURSIVE t AS (
    SELECT min(source_table) AS s FROM archive_files
    UNION ALL
    SELECT (SELECT min(source_table) FROM archive_files WHERE source_table > t.s)
    FROM t WHERE t.s IS NOT NULL
), named AS (SELECT jsonb_array_elements_text($1::jsonb) AS n)
SELECT s FROM t JOIN named ON lower(s) = lower(n)
    OR (position('.' IN n) = 0 AND lower(split_part(s, '.', 2)) = lower(n))
UNION
SELECT j.payload->>'table' FROM background_jobs j
WHERE j.task_name = 'archive' AND j.payload->>'table' IN (
    SELECT c.relnamespace::regnamespace::text || '.' || c.relname FROM pg_class c
    JOIN named ON lower(c.relname) = lower(named.n) AND c.relkind IN ('r', 'p')
    UNION ALL
    SELECT c.relnamespace::regnamespace::text || '.' || c.relname FROM pg_class c
    JOIN named ON position('.' IN named.n) > 0
     AND lower(c.relnamespace::regnamespace::text) = lower(split_part(named.n, '.', 1))
     AND lower(c.relname) = lower(substr(named.n, position('.' IN named.n) + 1))
     AND c.relkind IN ('r', 'p'))

-- name: catalog_delta_exact
-- Tables whose Delta table holds exactly their committed files at the snapshot: every
-- committed file in a publication already in the log, every retired or offline one
-- taken out by one (the other tables' archive is read from their files: exact, slower).
SELECT d.source_table FROM delta_tables d
WHERE d.storage_url = $1 AND d.published > 0
  AND d.source_table IN (SELECT jsonb_array_elements_text($2::jsonb)) AND NOT EXISTS (
    SELECT 1 FROM archive_files f
    WHERE f.storage_url = d.storage_url AND f.source_table = d.source_table AND (
        (f.state = 'committed' AND f.delta AND NOT f.offline
         AND (f.publication IS NULL OR f.publication > d.published))
        OR ((f.state = 'retired' OR f.offline) AND f.publication <= d.published
            AND (f.unpublication IS NULL OR f.unpublication > d.published))))

-- name: catalog_committed_files
-- The committed files of tables $4 on storage $1, with their job's mode; where $2 is
-- false, only the offline ones of the tables $3 (read through their Delta table).
SELECT f.source_table, f.path, f.offline, f.delta, j.payload->>'mode',
       f.key_columns[1], f.min_key[1], f.max_key[1], f.cutoff_column,
       to_char(f.min_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
       to_char(f.max_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'),
       coalesce(f.delta_schema, '')
FROM archive_files f LEFT JOIN background_jobs j ON j.id = f.job_id
WHERE f.source_table IN (SELECT jsonb_array_elements_text($4::jsonb))
  AND f.storage_url = $1 AND f.state = 'committed' AND ($2 OR f.offline
  OR f.source_table NOT IN (SELECT jsonb_array_elements_text($3::jsonb)))
ORDER BY f.source_table, f.id
