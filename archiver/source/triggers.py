"""The row-level DELETE triggers a move sets off: named before a move runs them as
archiver's role (doctor, grants)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.source.tables import TableInfo


@dataclass(frozen=True)
class DeleteTrigger:
    """A row-level trigger that fires for every row a move deletes."""

    table: str  # schema.name of the table or partition it is declared on
    name: str
    timing: str  # BEFORE or AFTER
    function: str  # as regprocedure prints it: schema-qualified unless on the search path
    definer: bool  # SECURITY DEFINER: runs as its owner, not as the deleting role


# The enabled row-level DELETE triggers on some tables (oids, comma-separated) and their
# partitions. A partition's copy of its parent's trigger is left out where that trigger
# is listed. Foreign keys' triggers are left out by their constraint, not by
# tgisinternal: PostgreSQL 13 and 14 mark the partitions' copies internal too.
_DELETE_TRIGGERS = """
WITH rels AS (
    SELECT p.relid FROM unnest(string_to_array($1, ',')::oid[]) t(oid),
    LATERAL (SELECT relid FROM pg_partition_tree(t.oid::regclass)
             UNION SELECT t.oid::regclass) p),
found AS (
    SELECT t.oid, t.tgrelid, t.tgparentid, t.tgname, t.tgtype, t.tgfoid FROM pg_trigger t
    WHERE t.tgrelid IN (SELECT relid FROM rels)
      AND t.tgenabled IN ('A', CASE current_setting('session_replication_role')
                               WHEN 'replica' THEN 'R' ELSE 'O' END)
      AND t.tgtype::int & 1 <> 0 AND t.tgtype::int & 8 <> 0  -- FOR EACH ROW, ON DELETE
      AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.oid = t.tgconstraint AND k.contype = 'f'))
SELECT DISTINCT n.nspname || '.' || c.relname, f.tgname,
       CASE WHEN f.tgtype::int & 2 <> 0 THEN 'BEFORE' ELSE 'AFTER' END,
       f.tgfoid::regprocedure::text, p.prosecdef
FROM found f JOIN pg_class c ON c.oid = f.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_proc p ON p.oid = f.tgfoid
WHERE f.tgparentid NOT IN (SELECT oid FROM found)
"""


def delete_triggers(conn: BulkConnection, tables: Iterable[TableInfo]) -> list[DeleteTrigger]:
    """The row-level DELETE triggers that fire for each row deleted from the tables (see
    _DELETE_TRIGGERS), under the connection's `session_replication_role`: archiver never
    sets it, but a role's or a database's default can."""
    oids = ",".join(str(t.oid) for t in tables)
    rows = fetch_and_rollback(conn, _DELETE_TRIGGERS, (oids,))
    found = [DeleteTrigger(str(t), str(n), str(w), str(f), bool(d)) for t, n, w, f, d in rows]
    return sorted(found, key=lambda t: (t.table, t.name))  # by code point, whatever the collation
