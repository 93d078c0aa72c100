"""Where a restore's rows go: its target table (created from the archived types for
`--into` a new one), a partition archived whole brought back with its bound, and the
order of an aggregate's tables (parents before children)."""

from __future__ import annotations

import re

from archiver.bulk import BulkConnection, BulkCursor, fetch_and_rollback
from archiver.errors import InputError
from archiver.ident import TableName, quote_ident
from archiver.restore.remap import ArchivedColumns, columns_today, execute
from archiver.source.references import ForeignKey, foreign_keys_to, parents_first
from archiver.source.tables import KEY_NAMES


def target_of(
    cur: BulkCursor, into: str | None, source_table: str, columns: ArchivedColumns
) -> str:
    """The quoted target table; --into is created from the archived types when missing."""
    name = TableName.stored(into or source_table)
    quoted = (
        f"{quote_ident(name.schema)}.{quote_ident(name.name)}"
        if name.schema
        else quote_ident(name.name)
    )
    if _exists(cur, quoted):
        return quoted
    if into is None:
        raise InputError(f"table {source_table} does not exist; restore --into a new table")
    defs = [f"{quote_ident(n)} {t}" for n, t in columns.types.items()]
    defs.append(f"PRIMARY KEY ({', '.join(quote_ident(k) for k in columns.key)})")
    execute(cur, f"CREATE TABLE {quoted} ({', '.join(defs)})")
    return quoted


def _exists(cur: BulkCursor, quoted: str) -> bool:
    return bool(execute(cur, "SELECT to_regclass($1) IS NOT NULL", (quoted,))[0][0])


_BOUND = re.compile(r"FOR VALUES FROM \((?:'[^']*'|MINVALUE)\) TO \((?:'[^']*'|MAXVALUE)\)")


def recreate_partition(cur: BulkCursor, parent: str, name: str, bound: str, key: list[str]) -> None:
    """A partition archived whole and dropped comes back with its recorded bound (its
    indexes from the parent's) before its rows are inserted; an existing one is kept.
    Where the table has no key of its own (each partition declares it), the partition's
    is added back from the file's key columns, or the table's next job would be refused."""
    if not _BOUND.fullmatch(bound):  # from a file: only literals, never SQL
        raise InputError(f"partition {name}: unexpected bound {bound!r} in the file's metadata")
    partition = TableName.stored(name)
    quoted = f"{quote_ident(partition.schema or 'public')}.{quote_ident(partition.name)}"
    if _exists(cur, quoted):
        return
    execute(cur, f"CREATE TABLE {quoted} PARTITION OF {parent} {bound}")
    if execute(cur, KEY_NAMES, (quoted,))[0][0] is not None:  # taken from the parent
        return
    # (Were the file's key the parent's own, dropped since, the partition gets it alone:
    # unique all the same, its rows having come from a table keyed so.)
    today = columns_today(cur, quoted)
    missing = [k for k in key if k not in today]
    if not key or missing:
        raise InputError(
            f"partition {name}: its archived key ({', '.join(key)}) is not a key of the table "
            f"today ({', '.join(missing) or 'no columns'} missing); nothing restored"
        )
    columns = ", ".join(quote_ident(k) for k in key)
    execute(cur, f"ALTER TABLE {quoted} ADD PRIMARY KEY ({columns})")


def parents_first_today(
    conn: BulkConnection, tables: list[str]
) -> tuple[list[str], list[ForeignKey]]:
    """The tables of a restore, each after every table it references today (an
    aggregate's parents before its children), so foreign keys hold row by row; and the
    keys between them. Read (and rolled back) before the restore writes anything."""
    if len(tables) == 1:
        return tables, []
    keys = []
    for table in tables:
        found = fetch_and_rollback(
            conn, "SELECT to_regclass($1)::oid::bigint", (TableName.stored(table).quoted,)
        )
        if found and found[0][0] is not None:
            keys += [k for k in foreign_keys_to(conn, table, int(found[0][0])) if k.child in tables]
    return parents_first(tables[0], tables, keys), keys
