-- What PostgreSQL's own catalog says of a source table's columns, of a session's
-- locks, and of a role's grants (read only).
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: session_advisory_locks
-- How many advisory locks this session holds: a shared session given back with one is
-- closed, not handed on (archiver.context, bulk.BulkPool).
SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()

-- name: key_collations
-- Each column of table $1 with its collation, schema-qualified: keys ordered as
-- PostgreSQL orders them (a rewritten file's catalogued key ends).
SELECT a.attname::text, quote_ident(n.nspname) || '.' || quote_ident(c.collname)
FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
JOIN pg_namespace n ON n.oid = c.collnamespace
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped

-- name: insert_rules
-- Whether table $1 has a rule ON INSERT (DO ALSO or INSTEAD): restore then runs its
-- INSERT alone, neither in a data-modifying WITH nor in a COPY, which such rules refuse.
SELECT EXISTS (SELECT FROM pg_rewrite WHERE ev_class = to_regclass($1) AND ev_type = '3')

-- name: key_types
-- Each column of table $1: its type as SQL, and its collation (schema-qualified) if it
-- has one: an erasure's rewritten file's key ends, in the table's own order.
SELECT a.attname::text, format_type(a.atttypid, a.atttypmod),
       CASE WHEN a.attcollation <> 0 THEN (
           SELECT quote_ident(n.nspname) || '.' || quote_ident(c.collname)
           FROM pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace
           WHERE c.oid = a.attcollation) END
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped

-- name: integer_columns
-- The columns of integer types of the tables $1 (a JSON array of schema.table) this
-- database has: a catalogued key range of theirs compares as numbers (text ends do not).
SELECT t.name, a.attname::text
FROM jsonb_array_elements_text($1::jsonb) AS t(name)
JOIN pg_attribute a ON a.attrelid = to_regclass(
    quote_ident(split_part(t.name, '.', 1)) || '.' || quote_ident(substr(t.name, strpos(t.name, '.') + 1))
) AND a.attnum > 0
 AND NOT a.attisdropped AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)

-- name: rest_grants
-- Each table of serve's definitions database (which carries the live tables' grants):
-- whether role %(role)s may read it whole, or some of it; every table for a NULL role
-- (the configured user). serve's Iceberg REST catalog (psycopg's parameters).
SELECT n.nspname, c.relname,
       COALESCE(has_schema_privilege(%(role)s::name, n.oid, 'USAGE')
                AND has_table_privilege(%(role)s::name, c.oid, 'SELECT'), true),
       COALESCE(has_schema_privilege(%(role)s::name, n.oid, 'USAGE')
                AND has_any_column_privilege(%(role)s::name, c.oid, 'SELECT'), true)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')

-- name: rest_row_security_exempt
-- Whether a live table's row security passes role %(role)s by, as serve's own check asks
-- it (the table's owner %(owner)s, its FORCE ROW LEVEL SECURITY %(forced)s).
SELECT r.rolbypassrls OR r.rolsuper OR (pg_has_role(%(role)s, %(owner)s, 'USAGE') AND NOT %(forced)s)
FROM pg_catalog.pg_roles r WHERE r.rolname = %(role)s

-- name: rest_signs_in
-- Whether role %(role)s may sign in at all, here (the definitions database, whose CONNECT
-- follows the application database's): a SAS vended to one who no longer may is made
-- void (archiver.serve.revoking).
SELECT rolcanlogin AND (rolvaliduntil IS NULL OR rolvaliduntil > now())
       AND has_database_privilege(rolname, current_database(), 'CONNECT')
FROM pg_catalog.pg_roles WHERE rolname = %(role)s
