"""Foreign keys that point at a table: what deleting its rows would do to other tables.

Moving rows out of a table that other rows reference is refused: with ON DELETE CASCADE
the database would delete referencing rows that were never archived (silent loss), with
SET NULL / SET DEFAULT it would change them, and with NO ACTION / RESTRICT every chunk
would fail. Read from pg_constraint at enqueue, for policies, and again when a job starts,
since schemas change in between.
"""

from __future__ import annotations

from dataclasses import dataclass

from archiver.db import BulkConnection, fetch_all
from archiver.errors import InputError

# Keys pointing at the table or at any of its partitions (a partitioned table's key shows
# once on the parent and once per partition, linked by conparentid: count the parent's).
# A key declared on each partition of a partitioned child has conparentid = 0 on every
# partition and nothing on the parent, so each partition is listed.
_REFERENCING = """
SELECT cn.nspname::text || '.' || cl.relname::text, con.conname::text, con.confdeltype::text
FROM pg_constraint con
JOIN pg_class cl ON cl.oid = con.conrelid
JOIN pg_namespace cn ON cn.oid = cl.relnamespace
WHERE con.contype = 'f' AND con.conparentid = 0
  AND (con.confrelid = $1::bigint::oid  -- pg_partition_tree() is empty for a plain table
       OR con.confrelid IN (SELECT relid FROM pg_partition_tree($1::bigint::oid)))
ORDER BY 1, 2
"""

ON_DELETE = {
    "a": "NO ACTION",
    "r": "RESTRICT",
    "c": "CASCADE",
    "n": "SET NULL",
    "d": "SET DEFAULT",
}


@dataclass(frozen=True)
class Reference:
    table: str  # schema.table holding the foreign key
    constraint: str
    on_delete: str

    def __str__(self) -> str:
        return f"{self.table} ({self.constraint}, ON DELETE {self.on_delete})"


def referencing(conn: BulkConnection, table_oid: int) -> list[Reference]:
    """Every foreign key that references the table (or one of its partitions)."""
    rows = fetch_all(conn, _REFERENCING, (table_oid,))
    return [Reference(str(t), str(c), ON_DELETE.get(str(d), str(d))) for t, c, d in rows]


def check_unreferenced(conn: BulkConnection, table: str, table_oid: int) -> None:
    """Refuse to move rows out of a table that foreign keys reference, naming them."""
    found = referencing(conn, table_oid)
    if found:
        raise InputError(
            f"table {table} is referenced by foreign keys: {', '.join(map(str, found))}; "
            "moving its rows would delete, change or orphan theirs (archive it with "
            "--mode copy, or archive the referencing tables' rows first)"
        )
