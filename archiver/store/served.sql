-- archiver serve's reads of the catalog: the files a statement reads, and what serve
-- declares of each table. Run by archiver/store/served.py.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: served_files
-- The files of the tables a statement names, $1 (a JSON array: schema.table as stored, a
-- bare name in any schema, any case, or '*': every catalogued table) on storage $2:
-- committed, and with $3 retired ones some snapshot may still see committed
-- (archiver_seen_committed) or kept (a compaction's inputs). A table of this database
-- that has no file yet (named schema.table, or by its bare name with archive jobs
-- queued) as one row of NULLs (attach declares a table before its first file); whether
-- each file's key is an integer column here (its catalogued key range then prunes: text
-- ends sort otherwise). $4 (a JSON object: a column, lower case, to the ranges a
-- statement's every read of it keeps, [low, high, [values] or null], null ends open):
-- of a table whose key (its newest file's) is such an integer column, only the files
-- whose key span meets one of them, found by the GiST index on archiver_key_span (022),
-- with the table's newest file, whose columns its view needs, and any file of another
-- key read whole -- as archiver.query's pruning would after, but without testing every
-- file: a key lookup's catalog work stays flat in the number of files. The catalogued
-- tables are read off the index on source_table (a loose index scan). One query: serve
-- runs it for every statement.
WITH RECURSIVE catalogued AS (
    SELECT min(source_table) AS s FROM archive_files
    UNION ALL
    SELECT (SELECT min(source_table) FROM archive_files WHERE source_table > c.s)
    FROM catalogued c WHERE c.s IS NOT NULL
), named AS (
    SELECT jsonb_array_elements_text($1::jsonb) AS n
), wanted AS (
    SELECT n AS t FROM named
    WHERE position('.' IN n) > 0 AND (
        EXISTS (SELECT 1 FROM archive_files f WHERE f.source_table = n)
        OR to_regclass(quote_ident(split_part(n, '.', 1)) || '.'
                       || quote_ident(substr(n, strpos(n, '.') + 1))) IS NOT NULL)
    UNION
    SELECT c.s FROM catalogued c JOIN named ON c.s IS NOT NULL AND (
        n = '*' OR (position('.' IN n) = 0 AND lower(split_part(c.s, '.', 2)) = lower(n)))
    UNION
    SELECT j.payload->>'table' FROM background_jobs j
    WHERE j.task_name = 'archive' AND j.payload->>'table' IN (
        SELECT c.relnamespace::regnamespace::text || '.' || c.relname FROM pg_class c
        JOIN named ON position('.' IN named.n) = 0 AND lower(c.relname) = lower(named.n)
         AND c.relkind IN ('r', 'p'))
), integers AS (  -- each table's columns of an integer type here
    SELECT w.t, array_agg(a.attname::text) AS columns
    FROM wanted w JOIN pg_attribute a ON a.attrelid = to_regclass(
        quote_ident(split_part(w.t, '.', 1)) || '.' || quote_ident(substr(w.t, strpos(w.t, '.') + 1)))
    WHERE NOT a.attisdropped AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)
    GROUP BY w.t
), keyed AS (  -- each table's newest file (not a copy's), its key, whether $4 bounds it
    SELECT w.t, n.id AS newest, n.key,
           coalesce(NOT $3 AND n.key = ANY (i.columns) AND $4::jsonb ? lower(n.key), false) AS ranged
    FROM wanted w
    LEFT JOIN integers i ON i.t = w.t
    LEFT JOIN LATERAL (
        SELECT f.id, f.key_columns[1] AS key
        FROM archive_files f LEFT JOIN background_jobs j ON j.id = f.job_id
        WHERE f.source_table = w.t AND f.storage_url = $2 AND f.state = 'committed'
          AND coalesce(j.payload->>'mode', '') <> 'copy'
        ORDER BY f.id DESC LIMIT 1) n ON true
), spans AS (  -- the key ranges $4 keeps of a ranged table; a set of values, a range each
    SELECT k.t, k.key, CASE WHEN v IS NULL THEN whole ELSE numrange(v, v, '[]') * whole END AS span
    FROM keyed k, jsonb_array_elements($4::jsonb -> lower(k.key)) r,
         LATERAL (SELECT CASE WHEN (r->>0)::numeric > (r->>1)::numeric THEN 'empty'::numrange
                         ELSE numrange((r->>0)::numeric, (r->>1)::numeric, '[]') END AS whole) b,
         LATERAL (SELECT NULL::numeric AS v WHERE jsonb_typeof(r->2) IS DISTINCT FROM 'array'
                  UNION ALL
                  SELECT e::numeric FROM jsonb_array_elements_text(
                      CASE WHEN jsonb_typeof(r->2) = 'array' THEN r->2 END) e) vs
    WHERE k.ranged
), chosen AS (  -- the files a ranged table's statement may read. Each part is an index
    -- lookup per span or table behind OFFSET 0: a span meets few files, which the
    -- planner cannot tell, and a join it plans from its estimates scans every file
    SELECT k.t, k.newest AS id FROM keyed k WHERE k.ranged
    UNION
    SELECT s.t, m.id FROM spans s CROSS JOIN LATERAL (  -- by the span alone: the GiST index
        SELECT f.id, f.source_table, f.storage_url, f.key_columns[1] AS key FROM archive_files f
        WHERE archiver_key_span(f.min_key[1], f.max_key[1]) && s.span AND f.state = 'committed'
        OFFSET 0) m
    WHERE m.source_table = s.t AND m.storage_url = $2 AND m.key = s.key
    UNION
    SELECT k.t, o.id FROM keyed k CROSS JOIN LATERAL (
        SELECT f.id FROM archive_files f
        WHERE f.source_table = k.t AND f.state = 'committed' AND f.storage_url = $2
          AND (f.key_columns[1] < k.key OR f.key_columns[1] > k.key OR f.key_columns[1] IS NULL)
        OFFSET 0) o
    WHERE k.ranged
), served AS (  -- every file of the other tables (NULL: one with none yet)
    SELECT w.t, a.id FROM keyed w LEFT JOIN LATERAL (
        SELECT f.id FROM archive_files f
        WHERE f.source_table = w.t AND f.storage_url = $2 AND (
            f.state = 'committed' OR ($3 AND f.state = 'retired'
                AND (f.kept_until > now() OR archiver_seen_committed(f.retired_xid))))
        OFFSET 0) a ON true
    WHERE NOT w.ranged
    UNION ALL
    SELECT t, id FROM chosen
)
SELECT s.t, f.path, f.offline, f.delta, f.mode, f.key, f.min_key, f.max_key, f.cutoff_column,
       f.first, f.last, f.id, f.retired, coalesce(f.key = ANY (i.columns), false)
FROM served s
LEFT JOIN LATERAL (
    SELECT f.path, f.offline, f.delta, j.payload->>'mode' AS mode, f.key_columns[1] AS key,
           f.min_key[1] AS min_key, f.max_key[1] AS max_key, f.cutoff_column,
           to_char(f.min_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS first,
           to_char(f.max_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS last,
           f.id, f.state = 'retired' AS retired
    FROM archive_files f LEFT JOIN background_jobs j ON j.id = f.job_id
    WHERE f.id = s.id OFFSET 0) f ON true
LEFT JOIN integers i ON i.t = s.t
ORDER BY s.t, f.id

-- name: served_signature
-- Whether the committed files on storage $1 changed since serve last declared them.
SELECT coalesce(max(id), 0), count(*) FROM archive_files WHERE storage_url = $1 AND state = 'committed'

-- name: served_definitions
-- What serve declares of each table it serves from storage $1: the newest committed file
-- of each distinct Delta schema (a file that records none: each its own), newest first,
-- with the table's key columns; the files of copy jobs left out, as serve reads none.
SELECT DISTINCT ON (f.source_table, coalesce(f.delta_schema, f.path))
       f.source_table, f.path, f.key_columns, f.id
FROM archive_files f LEFT JOIN background_jobs j ON j.id = f.job_id
WHERE f.storage_url = $1 AND f.state = 'committed' AND coalesce(j.payload->>'mode', '') <> 'copy'
ORDER BY f.source_table, coalesce(f.delta_schema, f.path), f.id DESC
