"""Step 3 of a query: a view per table the statement names, over its live rows and its
files (`--with-live`), or its archive alone: its Delta table where that is exact at the
snapshot, else its files. The files of one recorded schema are one branch of a union, a
read_parquet of their list (DuckDB opens each footer once, when it reads the file), the
range of all their rows as constants, so a filter that contradicts it drops the branch;
a file whose schema is not recorded is a branch of its own. One type per column."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from archiver.config import StorageLocation
from archiver.errors import InputError
from archiver.ident import quote_ident
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.query.catalog import File, Snapshot, hull
from archiver.query.engine import SOURCE, delta_scan
from archiver.query.live import LIVE_DB


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # DuckDB's type


def _describe(con: Any, relation: str) -> list[Column]:
    return [Column(r[0], r[1]) for r in con.execute(f"DESCRIBE {relation}").fetchall()]


def archived_copies(con: Any, uris: dict[str, str]) -> set[str]:
    """Of files outside the Delta table whose job is gone, those a copy job wrote (their
    own metadata says)."""
    if not uris:
        return set()
    listed = ", ".join("'" + u.replace("'", "''") + "'" for u in uris.values())
    rows = con.execute(
        f"SELECT file_name, decode(value) FROM parquet_kv_metadata([{listed}]) "
        "WHERE decode(key) = 'archiver.mode'"
    ).fetchall()
    by_uri = {u: p for p, u in uris.items()}
    return {by_uri[f] for f, mode in rows if mode == "copy" and f in by_uri}


def create_views(
    con: Any, location: StorageLocation, snapshot: Snapshot, *, live: bool = True
) -> list[str]:
    """Step 3: a view per archived table (schema.table, and the bare name where one
    schema has it) over its live rows and its files; `live` False: over its archive
    alone, its Delta table where that is exact at the snapshot, else its files. The
    tables, as named."""
    storage_uri = location.reader_uri
    unsure = {
        f.path: storage_uri(f.path) for files in snapshot.files.values() for f in files if f.unsure
    }
    copies = archived_copies(con, unsure)
    con.execute("SET parquet_metadata_cache = true")  # each footer read once
    # the catalogued tables, for query's hint when a statement names one that is not here
    con.execute("SET VARIABLE archiver_archived = $1", [snapshot.archived])
    bodies = {}
    for table, files in snapshot.files.items():
        schema, name = table.split(".", 1)
        kept = [(storage_uri(f.path), f) for f in files if f.path not in copies]
        if snapshot.offline.get(table):
            continue  # a query naming it was refused (query)
        if live:
            bodies[table] = _union(con, schema, name, kept)
        elif table in snapshot.delta_exact:
            bodies[table] = delta_scan(con, location, table)
        elif kept:
            bodies[table] = _archived(con, kept)
    names = [t.split(".", 1) for t in bodies]
    unique = {n for _, n in names if sum(1 for _, m in names if m == n) == 1}
    for table, body in bodies.items():
        schema, name = table.split(".", 1)
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
        con.execute(f"CREATE OR REPLACE VIEW {quote_ident(schema)}.{quote_ident(name)} AS {body}")
        if name in unique and schema != "main":
            con.execute(f"CREATE OR REPLACE VIEW main.{quote_ident(name)} AS {body}")
    made = list(bodies)
    if live:  # every other table of the source, live only, by the same names and snapshot
        mine = sorted({t.split(".", 1)[0] for t in made})
        schemas = sorted({"public", *mine})
        path = ["main", *map(quote_ident, mine), *(f"{LIVE_DB}.{quote_ident(s)}" for s in schemas)]
        con.execute(f"SET search_path = '{','.join(path).replace(chr(39), chr(39) * 2)}'")
    return made


def _archived(con: Any, files: list[tuple[str, File]]) -> str:
    """A table's archive read from its files, as its Delta table presents it: the
    columns of every file (PostgreSQL-only companions left out), a column's types
    unified by DuckDB where files differ (a file Delta refused for its type is read
    too), each schema's files a branch bounded by their catalogued ranges, as in
    _union."""
    parts = []
    for scan, first, file in _groups(files):
        columns = [c for c in _describe(con, f"SELECT * FROM {first}")]
        kinds = {c.name: c.kind for c in columns if not c.name.endswith(PG_TEXT_SUFFIX)}
        ranges = file_ranges(file, kinds)
        parts.append(
            f"SELECT * FROM (SELECT {', '.join(map(quote_ident, kinds))} FROM {scan})"
            + (f" WHERE {ranges}" if ranges else "")
        )
    return " UNION ALL BY NAME ".join(parts)


def _groups(files: list[tuple[str, File]]) -> list[tuple[str, str, File]]:
    """The files read together, in the catalog's order: those of one recorded Delta
    schema (the same columns of the same types, and so the same companions), each file
    of no recorded schema, or that pruning kept by its margin alone, on its own. Of each group: its scan, a scan of its first file (to
    describe the group by one footer), and a File holding all its rows' ranges."""
    grouped: dict[str, list[tuple[str, File]]] = {}
    for uri, file in files:
        grouped.setdefault(
            file.schema if file.schema and not file.alone else f"\0{uri}", []
        ).append((uri, file))
    out = []
    for members in grouped.values():
        uris = ", ".join(_literal(u) for u, _ in members)
        scan = f"read_parquet([{uris}], hive_partitioning = false)"
        first = f"read_parquet({_literal(members[0][0])}, hive_partitioning = false)"
        out.append((scan, first, hull([f for _, f in members])))
    return out


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _union(con: Any, schema: str, name: str, files: list[tuple[str, File]]) -> str:
    """One table's live rows and archived rows, one type per column. Each schema's
    files are a branch of the union holding their catalogued key and cutoff ranges as
    constants: a query's filter that contradicts them lets DuckDB drop the branch, so
    its files are not read (its first file's footer is, once, to bind it)."""
    live_rel = f"{LIVE_DB}.{quote_ident(schema)}.{quote_ident(name)}"
    try:
        live = _describe(con, live_rel)
    except Exception:  # the table is gone from PostgreSQL: its archive alone
        live = []
    kinds = {c.name: ("VARCHAR" if c.kind.startswith("ENUM") else c.kind) for c in live}
    parts = []
    if live:
        cols = [
            f"CAST({quote_ident(c.name)} AS {kinds[c.name]}) AS {quote_ident(c.name)}" for c in live
        ]
        parts.append(f"SELECT {', '.join(cols)}, 'live' AS {SOURCE} FROM {live_rel}")
    for scan, first, file in _groups(files):
        archived = {c.name: c.kind for c in _describe(con, f"SELECT * FROM {first}")}
        cols = []
        for c, kind in kinds.items():
            if c not in archived:
                cols.append(f"CAST(NULL AS {kind}) AS {quote_ident(c)}")
                continue
            value = f"CAST({quote_ident(c)} AS {kind})"
            if c + PG_TEXT_SUFFIX in archived:  # ±infinity and the like, kept as text
                special = quote_ident(c + PG_TEXT_SUFFIX)
                value = f"CASE WHEN {special} IS NOT NULL THEN TRY_CAST({special} AS {kind}) ELSE {value} END"
            cols.append(f"{value} AS {quote_ident(c)}")
        dropped = [
            c for c in archived if c not in kinds and not c.endswith(PG_TEXT_SUFFIX)
        ]  # columns dropped since they were archived
        cols += [quote_ident(c) for c in dropped]
        ranges = file_ranges(file, kinds)
        parts.append(
            f"SELECT * FROM (SELECT {', '.join(cols)}, 'archive' AS {SOURCE} FROM {scan})"
            + (f" WHERE {ranges}" if ranges else "")
        )
    if not parts:
        raise InputError(f"query --with-live: {schema}.{name} has neither live rows nor files")
    return " UNION ALL BY NAME ".join(parts)


INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT")


def file_ranges(file: File, kinds: dict[str, str]) -> str:
    """SQL: the catalog's ranges of `file`, as constants of the view's types, where
    DuckDB orders them as PostgreSQL does (integer keys; date and timestamp cutoffs,
    never NULL in an archived row): a true statement about every row of the file."""
    found = []
    if kinds.get(file.key) in INTEGERS and file.min_key and file.max_key:
        key, kind = quote_ident(file.key), kinds[file.key]
        low, high = (v.replace("'", "''") for v in (file.min_key, file.max_key))
        found.append(f"{key} BETWEEN CAST('{low}' AS {kind}) AND CAST('{high}' AS {kind})")
    kind = kinds.get(file.cutoff, "")
    if (
        file.min_cutoff
        and file.max_cutoff
        and kind in ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE")
    ):
        column = quote_ident(file.cutoff)
        low, high = file.min_cutoff, file.max_cutoff
        if kind == "DATE":
            low, high = low[:10], high[:10]
        elif kind == "TIMESTAMP WITH TIME ZONE":
            low, high = low + "+00", high + "+00"
        found.append(f"{column} BETWEEN CAST('{low}' AS {kind}) AND CAST('{high}' AS {kind})")
    return " AND ".join(found)
