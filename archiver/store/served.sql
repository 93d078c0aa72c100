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
-- statement's every read of it keeps, [low, high, [values] or null], null ends open)
-- leaves out here the files whose integer key range meets none of them -- but each
-- table's newest file, whose columns its view needs -- as archiver.query's pruning would
-- after (a key lookup then reads back one row, not one per file). The catalogued tables
-- are read off the index on source_table (a loose index scan). One query: serve runs it
-- for every statement.
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
), served AS (
    SELECT w.t, f.path, f.offline, f.delta, j.payload->>'mode' AS mode,
           f.key_columns[1] AS key, f.min_key[1] AS min_key, f.max_key[1] AS max_key,
           f.cutoff_column,
           to_char(f.min_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS first,
           to_char(f.max_cutoff_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS last,
           f.id, f.state = 'retired' AS retired,
           coalesce(f.key_columns[1] = ANY (i.columns), false) AS integer,
           max(f.id) FILTER (WHERE coalesce(j.payload->>'mode', '') <> 'copy')
               OVER (PARTITION BY w.t) AS newest
    FROM wanted w
    LEFT JOIN archive_files f ON f.source_table = w.t AND f.storage_url = $2 AND (
        f.state = 'committed' OR ($3 AND f.state = 'retired'
            AND (f.kept_until > now() OR archiver_seen_committed(f.retired_xid))))
    LEFT JOIN background_jobs j ON j.id = f.job_id
    LEFT JOIN integers i ON i.t = w.t
)
SELECT t, path, offline, delta, mode, key, min_key, max_key, cutoff_column, first, last,
       id, retired, integer
FROM served s
WHERE s.id IS NULL OR s.id = s.newest OR NOT s.integer OR NOT $4::jsonb ? lower(s.key)
   OR EXISTS (
        SELECT 1 FROM jsonb_array_elements($4::jsonb -> lower(s.key)) r,
             LATERAL (SELECT CASE WHEN s.min_key ~ '^[+-]?[0-9]{1,30}$' THEN s.min_key::numeric END AS low,
                             CASE WHEN s.max_key ~ '^[+-]?[0-9]{1,30}$' THEN s.max_key::numeric END AS high) k
        WHERE (r->>0 IS NULL OR k.high IS NULL OR k.high >= (r->>0)::numeric)
          AND (r->>1 IS NULL OR k.low IS NULL OR k.low <= (r->>1)::numeric)
          AND (jsonb_typeof(r->2) IS DISTINCT FROM 'array' OR EXISTS (
                SELECT 1 FROM jsonb_array_elements_text(r->2) v
                WHERE (k.low IS NULL OR v::numeric >= k.low)
                  AND (k.high IS NULL OR v::numeric <= k.high))))
ORDER BY t, id

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
