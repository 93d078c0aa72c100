-- archiver_audit: every query by name. Written only through archiver/store/audit.py.
-- A line `-- name: X` starts a query; archiver.db.query looks it up by name.

-- name: audit_record
INSERT INTO archiver_audit (actor, address, via, action, target, outcome)
VALUES ($1, $2, $3, $4, $5, $6)

-- name: audit_of_target
-- The latest actions on one job or table (its page's "changed by").
SELECT at, actor, via, action, outcome FROM archiver_audit
WHERE target = $1 ORDER BY at DESC LIMIT $2
