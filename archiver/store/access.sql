-- Archive-only access (sql/021_reads.sql): what `archiver access` grants, and what serve
-- mirrors beside the live tables' grants.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: access_grant
INSERT INTO archive_access (table_name, role, columns, granted_by) VALUES ($1, $2, $3, $4)
ON CONFLICT (table_name, role) DO UPDATE
SET columns = EXCLUDED.columns, granted_by = EXCLUDED.granted_by, granted_at = now()

-- name: access_revoke
DELETE FROM archive_access WHERE table_name = $1 AND role = $2

-- name: access_list
SELECT table_name, role, columns, granted_by, granted_at FROM archive_access
ORDER BY table_name, role
