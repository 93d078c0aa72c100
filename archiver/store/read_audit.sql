-- The read audit (sql/021_reads.sql): written by serve in batches, pruned by the pruner,
-- read by the console.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: read_audit_copy
COPY archiver_reads (at, door, role, on_behalf_of, address, application, statement,
                     parameters, tables, columns, rows, duration_ms, outcome) FROM STDIN

-- name: read_audit_prune
-- One batch of the reads past the retention.
DELETE FROM archiver_reads WHERE id IN (
    SELECT id FROM archiver_reads WHERE at < now() - make_interval(secs => $1) LIMIT $2)

-- name: read_audit_recent
-- The latest reads, refusals first, of a role and a table where given (the console's).
SELECT at, role, on_behalf_of, address, application, statement, tables, columns, rows,
       duration_ms, outcome
FROM archiver_reads
WHERE ($1::text IS NULL OR role = $1) AND ($2::text IS NULL OR tables @> ARRAY[$2])
ORDER BY outcome = 'ok', at DESC
LIMIT $3

-- name: read_audit_rest_holders
-- Who loaded a table through a REST door in the last %(seconds)s, since its credentials
-- were last revoked: each one's latest load (psycopg's parameters).
SELECT role, max(at) FROM archiver_reads
WHERE door = %(door)s AND outcome = 'ok' AND tables <> '{}'
  AND at > now() - make_interval(secs => %(seconds)s)
  AND at > coalesce((SELECT max(at) FROM archiver_reads
                     WHERE door = %(door)s AND statement LIKE %(revoked)s || '%%'), '-infinity')
GROUP BY role
