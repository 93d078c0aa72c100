"""The application's tables as archiver sees them: columns, types and the key it walks,
read from PostgreSQL's catalog, and the planner's estimate of their size."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.errors import InputError
from archiver.ident import TableName, quote_ident, sql_name
from archiver.pgtypes.column import Column

CUTOFF_TYPES = ("date", "timestamp", "timestamptz")
# Key types whose Arrow order equals PostgreSQL's (no collation) and whose text form
# PostgreSQL reads back exactly.
ARROW_ORDERED_KEYS = ("int2", "int4", "int8", "uuid", "date", "timestamp", "timestamptz")
# Key types PostgreSQL orders its own way -- text in the column's collation, char(n)
# without its padding, citext case-insensitively, numeric with NaN above all -- so a
# chunk's first and last key (the resume point and the catalog's key range) come from
# PostgreSQL, never from Arrow.
PG_ORDERED_KEYS = ("text", "varchar", "bpchar", "citext", "numeric")
KEY_TYPES = ARROW_ORDERED_KEYS + PG_ORDERED_KEYS

log = logging.getLogger(__name__)

# A table by name as PostgreSQL resolves it: ($1 schema or '', $2 name); a bare name's
# matches in search_path order (find_table; the console's resolve_table too).
FIND_TABLE = """
SELECT n.nspname::text, c.relname::text, c.oid::bigint, c.relkind = 'p'
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = $2 AND c.relkind IN ('r', 'p')
  AND (n.nspname = $1 OR ($1 = '' AND n.nspname = ANY (current_schemas(false))))
ORDER BY array_position(current_schemas(false), n.nspname::text) NULLS LAST
"""
# The tables a name not found could have meant are among these: every table but the
# system's and partitions (near_tables).
_USER_TABLES = """
SELECT n.nspname::text, c.relname::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'
ORDER BY 1, 2
LIMIT 100000
"""


_COLUMNS = """
SELECT a.attname::text,
       format_type(a.atttypid, a.atttypmod),
       COALESCE(base.typname, t.typname)::text,
       a.attnum,
       COALESCE(base.typcategory, t.typcategory)::text,
       COALESCE(NULLIF(a.atttypmod, -1), t.typtypmod),
       COALESCE(elem_base.typname, elem.typname, '')::text,
       COALESCE(elem_base.typcategory, elem.typcategory, '')::text,
       (SELECT NULLIF(n.nspname::text, 'pg_catalog') FROM pg_namespace n
        WHERE n.oid = COALESCE(base.typnamespace, t.typnamespace))
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type base ON t.typtype = 'd' AND base.oid = t.typbasetype
LEFT JOIN pg_type elem ON elem.oid = COALESCE(base.typelem, t.typelem) AND elem.oid <> 0
  AND COALESCE(base.typcategory, t.typcategory) = 'A'
LEFT JOIN pg_type elem_base ON elem.typtype = 'd' AND elem_base.oid = elem.typbasetype
WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


# The key archiver walks: the primary key, else the narrowest unique index over NOT NULL
# columns (no expression, no predicate), which identifies rows just as well.
_KEY_INDEX_OF = """
SELECT (i.indkey::int2[])[0:i.indnkeyatts - 1] AS cols
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = {table} AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL
  AND NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = i.indrelid
                  AND a.attnum = ANY (i.indkey::int2[]) AND NOT a.attnotnull)
ORDER BY i.indisprimary DESC, i.indnkeyatts, c.relname
LIMIT 1
"""
_KEY_INDEX = _KEY_INDEX_OF.format(table="$1::bigint::oid")

# A partitioned table with no key of its own: each leaf partition's key, by column name
# (NULL for a leaf without one), and the columns partitioning it at every level (NULL
# for an expression).
_LEAF_KEYS = f"""
SELECT (SELECT array_agg(a.attname::text ORDER BY k.n)
        FROM unnest(x.cols) WITH ORDINALITY k(attnum, n)
        JOIN pg_attribute a ON a.attrelid = l.relid AND a.attnum = k.attnum)
FROM pg_partition_tree($1::bigint::oid) l
LEFT JOIN LATERAL ({_KEY_INDEX_OF.format(table="l.relid")}) x ON true
WHERE l.isleaf
"""
# The key a table (or partition, by its quoted name) is walked by, as column names; NULL
# when it has none.
KEY_NAMES = f"""
SELECT array_agg(a.attname::text ORDER BY k.n)
FROM ({_KEY_INDEX_OF.format(table="to_regclass($1)")}) x
CROSS JOIN unnest(x.cols) WITH ORDINALITY k(attnum, n)
JOIN pg_attribute a ON a.attrelid = to_regclass($1) AND a.attnum = k.attnum
"""
_PARTITION_COLUMNS = """
SELECT DISTINCT a.attname::text
FROM pg_partition_tree($1::bigint::oid) l
JOIN pg_partitioned_table p ON p.partrelid = l.relid
CROSS JOIN unnest(p.partattrs::int2[]) n
LEFT JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = n
"""


@dataclass(frozen=True)
class TableInfo:
    """What archiving needs to know of a table, read from the catalog."""

    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[Column, ...]  # primary key (or unique index, see _KEY_INDEX), in index order
    partitioned: bool = False
    oid: int = 0
    # unconstrained numeric columns its earlier files hold as text: kept so, since a
    # Delta table cannot hold text and decimal in one column (archive.context.text_numeric)
    numeric_as_text: frozenset[str] = frozenset()

    @property
    def key_in_arrow_order(self) -> bool:
        """Arrow orders the key as PostgreSQL does (see PG_ORDERED_KEYS)."""
        return all(c.base_type in ARROW_ORDERED_KEYS for c in self.key)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def sql(self) -> str:
        """The table as a user types it: `sales.orders`, `"Sales"."Orders"`."""
        return TableName(self.schema, self.name).sql

    @property
    def quoted_key(self) -> str:
        """The key's columns, quoted, comma-separated: `"a", "b"`."""
        return ", ".join(quote_ident(c.name) for c in self.key)

    @property
    def quoted(self) -> str:
        return TableName(self.schema, self.name).quoted

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        near = [sql_name(c.name) for c in self.columns if c.name.lower() == name.lower()]
        hint = (
            f"; there is {', '.join(near)} (PostgreSQL folds an unquoted name to lower case: "
            "double-quote it to keep its case)"
            if near
            else ""
        )
        raise InputError(f"column {sql_name(name)} not found in table {self.sql}{hint}")


def find_table(conn: BulkConnection, table: TableName) -> tuple[str, str, int, bool]:
    """(schema, name, oid, partitioned) of a table, by name, as PostgreSQL resolves it
    (search_path when unqualified). A bare name that several schemas on the search_path
    hold means the first one's, and a warning names the others; a name not found is one
    line naming the tables it could have meant (another case, another schema)."""
    found = fetch_and_rollback(conn, FIND_TABLE, (table.schema or "", table.name))
    if not found:
        near, same_letters = near_tables(table, fetch_and_rollback(conn, _USER_TABLES, ()))
        hint = f"; there is {', '.join(near)}" if near else ""
        if same_letters:
            hint += (
                " (PostgreSQL folds an unquoted name to lower case; double-quote a name to "
                "keep its case, and name the schema of a table off the search_path)"
            )
        raise InputError(f"table {table.sql} not found{hint}")
    schema, name, oid, partitioned = found[0]
    if len(found) > 1:
        others = ", ".join(TableName(str(r[0]), str(r[1])).sql for r in found[1:])
        log.warning(
            "%s is %s, the first schema on the search_path that has it (%s too): name the "
            "schema to mean another",
            table.sql, TableName(str(schema), str(name)).sql, others,
        )  # fmt: skip
    return str(schema), str(name), int(oid), bool(partitioned)


def near_tables(table: TableName, tables: Sequence[tuple[Any, Any]]) -> tuple[list[str], bool]:
    """The tables of `tables` (schema, name) a name not found could have meant, at most
    three, and whether they have its letters: the same letters in another case or
    schema, else the closest spellings (a letter missed, added or swapped: difflib's
    ratio of 0.75 or more)."""
    names = [TableName(str(s), str(n)) for s, n in tables]
    same = [t for t in names if t.name.lower() == table.name.lower()]
    if table.schema:
        same = [t for t in same if str(t.schema).lower() == table.schema.lower()] or same
    if same:
        return [t.sql for t in same[:3]], True
    by = {(f"{t.schema}.{t.name}" if table.schema else t.name).lower(): t for t in names}
    typed = (f"{table.schema}.{table.name}" if table.schema else table.name).lower()
    close = difflib.get_close_matches(typed, list(by), n=3, cutoff=0.75)
    return [by[c].sql for c in close], False


def describe_table(conn: BulkConnection, table: TableName) -> TableInfo:
    """Look a table up by name and read its columns and key."""
    schema, name, oid, partitioned = find_table(conn, table)
    rows = fetch_and_rollback(conn, _COLUMNS, (oid,))
    columns = {int(r[3]): Column(r[0], r[1], r[2], *r[4:]) for r in rows}
    index = fetch_and_rollback(conn, _KEY_INDEX, (oid,))
    key = tuple(columns[int(n)] for n in index[0][0]) if index else ()
    if not key and partitioned:
        by_name = {c.name: c for c in columns.values()}
        key = tuple(by_name[n] for n in _partitions_key(conn, oid, f"{schema}.{name}"))
    info = TableInfo(schema, name, tuple(columns.values()), key, partitioned, oid)
    if not info.key:
        raise InputError(
            f"table {info.qualified} has no primary key and no unique index on NOT NULL "
            "columns; archiver walks tables by key: add a primary key"
        )
    for column in info.key:
        if column.base_type not in KEY_TYPES:
            raise InputError(
                f"key column {column.name!r} of {info.qualified} is {column.type_sql}; "
                "supported key types: smallint, integer, bigint, numeric, text, varchar, "
                "char, citext, uuid, date, timestamp, timestamptz"
            )
    return info


def _partitions_key(conn: BulkConnection, oid: int, table: str) -> list[str]:
    """The key a partitioned table without one of its own is walked by: the one every
    leaf partition declares (same columns, by name), if it holds every partitioning
    column; rows in different partitions differ in those, so it is unique across the
    table, as PostgreSQL requires of a key declared on the parent. [] when no partition
    has a key; partitions' keys that do not qualify are refused naming why."""
    keys = {tuple(r[0]) if r[0] else () for r in fetch_and_rollback(conn, _LEAF_KEYS, (oid,))}
    if keys <= {()}:  # no partitions, or none with a key: no key at all
        return []
    if len(keys) > 1 or () in keys:
        raise InputError(
            f"table {table} has no key of its own and its partitions do not all declare the "
            "same one; archiver walks tables by key: add a primary key to each partition "
            "(the same columns) or to the table"
        )
    key = list(keys.pop())
    partitioning = [r[0] for r in fetch_and_rollback(conn, _PARTITION_COLUMNS, (oid,))]
    if None in partitioning or not set(partitioning) <= set(key):
        raise InputError(
            f"table {table} has no key of its own and its partitions' key ({', '.join(key)}) "
            "does not hold every partitioning column, so it is not unique across partitions; "
            "add those columns to it, or a primary key to the table"
        )
    return key


def check_cutoff_column(info: TableInfo, name: str) -> Column:
    column = info.column(name)
    if column.base_type not in CUTOFF_TYPES:
        raise InputError(
            f"column {name!r} of {info.qualified} is {column.type_sql}, "
            "not a date, timestamp or timestamptz"
        )
    return column


_CUTOFF_INDEXED = """
SELECT EXISTS (
  SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
  WHERE a.attname = $2
    AND (i.indrelid = $1::regclass
         OR i.indrelid IN (SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf)))
"""


def cutoff_indexed(conn: BulkConnection, table: TableInfo, column: Column) -> bool:
    """Whether an index leads with the cutoff column (on the table, or on one of its leaf
    partitions): without one, finding the rows older than the cutoff reads the whole
    table, whatever archiver does."""
    return bool(fetch_and_rollback(conn, _CUTOFF_INDEXED, (table.quoted, column.name))[0][0])


def estimate_rows(conn: BulkConnection, table: TableInfo) -> tuple[int, int]:
    """(estimated rows, estimated bytes per row) from the planner's statistics; of a
    partitioned table, from its leaf partitions (the parent itself holds no rows)."""
    rows = fetch_and_rollback(
        conn,
        "SELECT sum(c.reltuples) FILTER (WHERE c.reltuples > 0)::bigint, "
        "(sum(pg_table_size(c.oid)) FILTER (WHERE c.reltuples > 0)"
        " / NULLIF(sum(c.reltuples) FILTER (WHERE c.reltuples > 0), 0))::bigint "
        "FROM pg_class c WHERE c.oid IN "  # pg_partition_tree of a plain table is empty
        "(SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf) "
        "OR (c.oid = $1::regclass AND c.relkind <> 'p')",
        (table.quoted,),
    )
    return int(rows[0][0] or 0), int(rows[0][1] or 0)
