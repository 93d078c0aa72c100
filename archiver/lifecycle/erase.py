"""Erasure on request: `archiver erase --table T --where "customer_id = 42"` takes the
matching archived rows out of every file holding them, for good (a data subject's
right to be forgotten), as a ledger operation (archiver.ledger.take_out):

 1 match    DuckDB finds the matching rows where the files are stored, reading only
            the columns the predicate names; with `--with-children`, the rows of the
            tables archived with T that reference an erased row (by today's foreign
            keys, parents first, to any depth) match too;
 2 rewrite  each file holding matches is written again without them under a new name
            (archiver.files.rewrite); a file left empty is only retired;
 3 commit   one catalog transaction retires the originals, catalogues the rewrites in
            their place and closes the ledger row (rows per table, files, the
            predicate's shape: never a value of an erased row);
 4 reap     the originals leave the Delta table in its next publication, then their
            blobs are deleted.

A crash before 3 leaves the originals catalogued and the rewrites swept; after 3, the
rewrites catalogued and the originals swept: never both, never neither."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from archiver import failpoints, ledger, text
from archiver.bulk import BulkConnection
from archiver.context import Context
from archiver.db import query
from archiver.files import names
from archiver.files.rewrite import key_ends, rewrite
from archiver.files.stats import in_arrow_order
from archiver.ident import TableName, quote_ident
from archiver.lifecycle.predicate import FILE, Predicate, matches
from archiver.model import CatalogFile
from archiver.outcome import Report
from archiver.source.references import ForeignKey
from archiver.storage.seam import Storage

# the columns DuckDB names for a table's archived files, and the erased keys of a parent
VIEW = "archived"


@dataclass
class ErasePlan:
    table: str  # the table the predicate is over
    predicate: Predicate
    files: dict[str, list[CatalogFile]]  # per table, parents first (the root first)
    keys: list[ForeignKey] = field(default_factory=list)  # among those tables
    reason: str = ""  # the request it answers (a ticket), for the ledger


@dataclass
class Found:
    """Step 1's answer: per table, the files holding erased rows and their positions."""

    positions: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def rows(self, table: str) -> int:
        return sum(len(p) for p in self.positions.get(table, {}).values())

    @property
    def total(self) -> int:
        return sum(self.rows(t) for t in self.positions)


def uri(storage: Storage, name: str) -> str:
    """Where DuckDB reads a stored file."""
    return storage.location.reader_uri(name)


def open_view(con: Any, storage: Storage, files: list[CatalogFile], view: str = VIEW) -> None:
    """`view`: every row of `files` (their columns by name; one missing in a file NULL)."""
    listed = ", ".join("'" + uri(storage, f.path).replace("'", "''") + "'" for f in files)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM read_parquet([{listed}], "
        "union_by_name = true)"
    )


def find(con: Any, storage: Storage, plan: ErasePlan) -> Found:
    """Step 1: the erased rows of each table, the root's by the predicate, each child's
    by a foreign key to erased rows of a table before it."""
    found = Found()
    erased_keys: dict[str, list[tuple[str, ForeignKey]]] = {}  # child: (relation, key)
    for n, (table, files) in enumerate(plan.files.items()):
        found.positions[table] = {}
        if table == plan.table:
            where = plan.predicate
        else:
            refs = erased_keys.get(table, [])
            if not refs or not files:  # no erased row it could reference
                continue
            # both sides qualified: a child column named as its parent's (a 1:1 table's
            # `id`) must not bind to the erased keys' own column
            where = Predicate(
                " OR ".join(
                    f"EXISTS (SELECT 1 FROM {rel} e WHERE "
                    + " AND ".join(
                        f"e.{quote_ident(r)} = {FILE}.{quote_ident(c)}"
                        for c, r in zip(k.columns, k.referenced, strict=True)
                    )
                    + ")"
                    for rel, k in refs
                ),
                f"references erased rows of {plan.table}",
            )
        uris = {f.path: uri(storage, f.path) for f in files}
        found.positions[table] = matches(con, where, uris)
        # the keys children reference, of this table's erased rows: kept in DuckDB only
        for i, key in enumerate(k for k in plan.keys if k.parent == table):
            matched = [f for f in files if f.path in found.positions[table]]
            if not matched:
                continue
            rel = f"erased_{n}_{i}"
            open_view(con, storage, matched, f"{rel}_rows")
            columns = ", ".join(quote_ident(r) for r in key.referenced)
            con.execute(
                f"CREATE TEMP TABLE {rel} AS SELECT DISTINCT {columns} FROM {rel}_rows "
                f"AS {FILE} WHERE ({where.text})"
            )
            erased_keys.setdefault(key.child, []).append((rel, key))
    return found


def erase(
    ctx: Context,
    conn: BulkConnection,
    plan: ErasePlan,
    found: Found,
    report: Report,
) -> int:
    """Steps 2-4 for what `find` found: the ledger id."""
    storage = ctx.storage()
    tables = list(plan.files)
    request = {
        "table": plan.table,
        "where": plan.predicate.shape,  # the predicate's shape: never its values
        "with_children": tables[1:],
        "reason": plan.reason,
    }

    def rewrite_all(operation: int) -> ledger.TakenOut:
        done = ledger.TakenOut()
        with tempfile.TemporaryDirectory() as tmp:
            for table, files in plan.files.items():
                erased = found.positions.get(table, {})
                counts = {"rows": 0, "files": len(files), "retired": 0, "rewritten": 0}
                for f in files:
                    if f.path not in erased:
                        continue
                    gone = erased[f.path]
                    done.retired.append(f.id)
                    done.rows += len(gone)
                    counts["rows"] += len(gone)
                    counts["retired"] += 1
                    if len(gone) == f.row_count:
                        continue  # emptied: retired, nothing written
                    counts["rewritten"] += 1
                    done.written.append(_without(conn, storage, f, gone, operation, Path(tmp)))
                    failpoints.reach("erase_rewritten")
                done.detail[table] = counts
                report(
                    # said before the commit: "erased" only once it is (cmd_erase's line)
                    f"{table}: {text.counted(counts['rows'], 'row')} to erase from "
                    f"{counts['retired']} of {text.counted(len(files), 'file')} "
                    f"({counts['rewritten']} rewritten)"
                )
        return done

    ledger_id, _ = ledger.take_out(ctx, conn, "erase", tables, request, rewrite_all)
    return ledger_id


def _without(
    conn: BulkConnection,
    storage: Storage,
    f: CatalogFile,
    gone: list[int],
    operation: int,
    tmp: Path,
) -> Any:
    """`f` rewritten without rows `gone` (positions): its catalog row."""
    local = tmp / "original.parquet"
    storage.download(f.path, local)
    with pq.ParquetFile(local) as data:  # read a row group at a time (files.rewrite)
        drop = set(gone)
        keep = pa.array([i for i in range(data.metadata.num_rows) if i not in drop], pa.int64())
        ordered = None
        if not in_arrow_order([data.schema_arrow.field(k).type for k in f.key_columns]):
            ordered = _key_ends(conn, data.read(columns=f.key_columns).take(keep), f)
        name = names.rewritten_name(f.path, operation)
        guard = ledger.guard(conn, operation)
        local = tmp / "rewrite.parquet"
        return rewrite(storage, f, data, keep, name, local, ordered, guard, operation)


def _key_ends(conn: BulkConnection, kept: pa.Table, f: CatalogFile) -> tuple[list[Any], list[Any]]:
    """rewrite.key_ends of `kept`'s key columns, each cast to its type in the table and
    compared under its collation there, where this database has the table (a numeric
    archived as text compares as a number); as staged otherwise."""
    with conn.cursor() as cur:
        cur.execute(query("key_types"), (TableName.stored(f.source_table).quoted,))
        typed = {name: (kind, collation) for name, kind, collation in cur.fetchall()}
        columns = []
        for k in f.key_columns:
            kind, collation = typed.get(k, (None, None))
            value = f"s.{quote_ident(k)}"
            columns.append((f"({value})::{kind}" if kind else value, collation))
        return key_ends(cur, kept.select(f.key_columns), columns, "archiver_erase_keys")
