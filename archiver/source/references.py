"""Foreign keys that point at a table: what deleting its rows would do to other tables.

Moving rows out of a table that other rows reference is refused: with ON DELETE CASCADE
the database would delete referencing rows that were never archived (silent loss), with
SET NULL / SET DEFAULT it would change them, and with NO ACTION / RESTRICT every chunk
would fail. Read from pg_constraint at enqueue, for policies, and again when a job starts,
since schemas change in between.
"""

from __future__ import annotations

from dataclasses import dataclass

from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.errors import InputError
from archiver.ident import quote_ident

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
    rows = fetch_and_rollback(conn, _REFERENCING, (table_oid,))
    return [Reference(str(t), str(c), ON_DELETE.get(str(d), str(d))) for t, c, d in rows]


def check_unreferenced(conn: BulkConnection, table: str, table_oid: int) -> None:
    """Refuse to move rows out of a table that foreign keys reference, naming them."""
    found = referencing(conn, table_oid)
    if found:
        raise InputError(
            f"table {table} is referenced by foreign keys: {', '.join(map(str, found))}; "
            "moving its rows would delete, change or orphan theirs (--with-children "
            "archives their rows with it; --mode copy deletes nothing)"
        )


# Every foreign key pointing at the table or one of its partitions, with the referencing
# table as its partition tree's root (rows of a partitioned child are taken through it)
# and both sides' columns by name, in key order, with the constraint's own equality
# operators (parent = child) by schema, as PostgreSQL's referential triggers use them: a
# bare `=` resolves through the search_path, and between citext columns of an extension
# off it means text's case-sensitive equality, which would miss children PostgreSQL's
# ON DELETE CASCADE then deletes unarchived.
_FOREIGN_KEYS = """
SELECT con.conname::text, con.confdeltype::text,
       child.oid::bigint, cn.nspname::text || '.' || child.relname::text,
       ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n ORDER BY k.i),
       ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY k(n, i)
             JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n ORDER BY k.i),
       ARRAY(SELECT n.nspname::text FROM unnest(con.conpfeqop) WITH ORDINALITY k(op, i)
             JOIN pg_operator o ON o.oid = k.op JOIN pg_namespace n ON n.oid = o.oprnamespace
             ORDER BY k.i),
       ARRAY(SELECT o.oprname::text FROM unnest(con.conpfeqop) WITH ORDINALITY k(op, i)
             JOIN pg_operator o ON o.oid = k.op ORDER BY k.i),
       EXISTS (SELECT FROM pg_index i
               WHERE i.indrelid IN (con.conrelid, child.oid)
                 AND (i.indkey::int2[])[0:cardinality(con.conkey) - 1] @> con.conkey
                 AND con.conkey @> (i.indkey::int2[])[0:cardinality(con.conkey) - 1])
FROM pg_constraint con
JOIN pg_class child ON child.oid = COALESCE(pg_partition_root(con.conrelid), con.conrelid)
JOIN pg_namespace cn ON cn.oid = child.relnamespace
WHERE con.contype = 'f' AND con.conparentid = 0
  AND (con.confrelid = $1::bigint::oid
       OR con.confrelid IN (SELECT relid FROM pg_partition_tree($1::bigint::oid)))
ORDER BY 4, 1
"""


@dataclass(frozen=True)
class ForeignKey:
    """`child (columns) REFERENCES parent (referenced)`, by qualified table names."""

    name: str
    on_delete: str
    child: str
    child_oid: int
    columns: tuple[str, ...]
    parent: str
    referenced: tuple[str, ...]
    operators: tuple[tuple[str, str], ...]  # parent = child, per column: (schema, name)
    indexed: bool  # an index on the child leads with the key's columns

    def __str__(self) -> str:
        return f"{self.child} ({self.name}, ON DELETE {self.on_delete})"

    @property
    def equals(self) -> tuple[str, ...]:
        """The equality operators as SQL, per column: OPERATOR("schema".=)."""
        return tuple(f"OPERATOR({quote_ident(s)}.{name})" for s, name in self.operators)


def foreign_keys_to(conn: BulkConnection, table: str, table_oid: int) -> list[ForeignKey]:
    """Every foreign key referencing `table`; one declared on each partition of a
    partitioned child counts once, for the partitioned table."""
    found: dict[tuple[str, tuple[str, ...], tuple[str, ...]], ForeignKey] = {}
    for name, action, oid, child, columns, referenced, schemas, ops, indexed in fetch_and_rollback(
        conn, _FOREIGN_KEYS, (table_oid,)
    ):
        key = ForeignKey(
            str(name),
            ON_DELETE.get(str(action), str(action)),
            str(child),
            int(oid),
            tuple(columns),
            table,
            tuple(referenced),
            tuple(zip(schemas, ops, strict=True)),
            bool(indexed),
        )
        found.setdefault((key.child, key.columns, key.referenced), key)
    return list(found.values())


@dataclass(frozen=True)
class Aggregate:
    """A table with every table that references it, transitively: `tables` parents
    before children (the root first), `keys` the foreign keys between them."""

    tables: tuple[str, ...]
    oids: dict[str, int]
    keys: tuple[ForeignKey, ...]

    def parents_of(self, table: str) -> list[ForeignKey]:
        return [k for k in self.keys if k.child == table]

    def referenced_columns(self, table: str) -> list[str]:
        columns = (c for k in self.keys if k.parent == table for c in k.referenced)
        return list(dict.fromkeys(columns))


def aggregate(conn: BulkConnection, root: str, root_oid: int) -> Aggregate:
    """The aggregate of `root` along foreign keys, read from pg_constraint. A cycle
    (a self-reference included) is refused: its rows have no leaf to delete first."""
    oids, keys = {root: root_oid}, []
    todo = [root]
    while todo:
        parent = todo.pop(0)
        for key in foreign_keys_to(conn, parent, oids[parent]):
            keys.append(key)
            if key.child not in oids:
                oids[key.child] = key.child_oid
                todo.append(key.child)
    return Aggregate(tuple(parents_first(root, list(oids), keys)), oids, tuple(keys))


def parents_first(root: str, tables: list[str], keys: list[ForeignKey]) -> list[str]:
    """`tables` ordered so every table comes after each table it references; a cycle
    among them is refused, naming it."""
    parents = {t: {k.parent for k in keys if k.child == t and k.parent in tables} for t in tables}
    ordered: list[str] = []
    while len(ordered) < len(tables):
        ready = sorted(t for t in tables if t not in ordered and parents[t] <= set(ordered))
        if not ready:
            cycle = _cycle(parents, [t for t in tables if t not in ordered])
            raise InputError(
                f"table {root}: foreign keys form a cycle ({' -> '.join(cycle)}); "
                "--with-children cannot order its deletes, so it is refused"
            )
        ordered += ready
    return ordered


def _cycle(parents: dict[str, set[str]], left: list[str]) -> list[str]:
    """A cycle among `left` (each of which has a parent among them), as a path."""
    path = [left[0]]
    while True:
        step = min(p for p in parents[path[-1]] if p in left)
        if step in path:
            return [*path[path.index(step) :], step][::-1]
        path.append(step)
