"""Step 1 of a query: the catalog at one snapshot, for the tables a statement names
alone -- each one's committed files with their catalogued ranges (pruned by the
statement's constraints), whether its Delta table holds exactly those files, what of it
is offline -- and the snapshot exported, for the live rows to be read at it."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from archiver.bulk import BulkConnection
from archiver.db import query
from archiver.query.statement import (
    Reference,
    admits,
    as_instant,
    as_instant_taken,
    as_integer,
    reads,
)
from archiver.store import reads as stored


@dataclass(frozen=True)
class File:
    """A catalogued file, with the ranges the catalog holds of its rows (text)."""

    path: str
    key: str  # the first key column
    min_key: str
    max_key: str
    cutoff: str  # the cutoff column ("" for a table archived with its parents)
    min_cutoff: str | None  # ISO 8601 UTC; None: unbounded (PostgreSQL-only values)
    max_cutoff: str | None
    unsure: bool = False  # out of the Delta table, its job gone: a copy's, or a move's?
    id: int = 0  # its catalog row (archiver serve's kept relations name it)
    schema: str = ""  # its columns as a Delta schema ('': not recorded)
    alone: bool = False  # kept by pruning's margin alone: its own ranges decide (views)


@dataclass
class Snapshot:
    """The catalog at one snapshot: its id (to import) and each table's files."""

    exported: str
    current: str  # pg_current_snapshot(), to check the import
    files: dict[str, list[File]] = field(default_factory=dict)
    offline: dict[str, int] = field(default_factory=dict)
    delta_exact: set[str] = field(default_factory=set)  # Delta table == committed files
    archived: list[str] = field(default_factory=list)  # every catalogued table (for hints)
    integer_keys: set[tuple[str, str]] = field(default_factory=set)  # (table, column)


def read_catalog(
    conn: BulkConnection,
    location: str,
    named: set[str] | None,
    *,
    live: bool = True,
    bounded: Callable[[str], bool] = lambda table: False,
) -> Snapshot:
    """Step 1, on `conn` (left open in its transaction: the exported snapshot lives as
    long as it does), for the tables a statement `named` (as written) alone: nothing is
    read of the others (None: what it reads is not known, every archived table). `live` False: the files of tables read through their Delta table
    are not fetched (but their offline ones, counted); a table `bounded` by the
    statement's constraints is read from its files (pruning can leave most out)."""
    with conn.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur.execute("SELECT pg_export_snapshot(), pg_current_snapshot()::text")
        exported, current = cur.fetchall()[0]
        archived = stored.archived_tables(cur)
        tables = archived if named is None else stored.named_tables(cur, named)
        integer_keys = integer_columns(cur, tables)
        exact = stored.delta_exact(cur, location, tables) - {t for t in tables if bounded(t)}
        rows = stored.committed_files(cur, location, live, exact, tables)
    snapshot = Snapshot(str(exported), str(current), {t: [] for t in tables})
    snapshot.delta_exact, snapshot.archived = exact, archived
    snapshot.integer_keys = integer_keys
    for table, path, offline, delta, mode, key, low, high, cutoff, first, last, schema in rows:
        if mode == "copy":
            continue
        if offline:
            snapshot.offline[table] = snapshot.offline.get(table, 0) + 1
            continue
        unsure = not delta and mode != "move"
        snapshot.files[table].append(
            File(path, key, low, high, cutoff, first, last, unsure, schema=schema)
        )
    return snapshot


def prune(snapshot: Snapshot, refs: list[Reference]) -> int:
    """Leave out of each table's files those the statement cannot read a row of (their
    catalogued key or cutoff range outside its constraints), before any is opened: a
    key's range only where the key is of an integer type in this database (text ends
    sort otherwise). A cutoff constant's zone is not known here: a file kept only by a
    day's margin around it is marked `alone` (the view bounds it by its own ranges,
    which DuckDB compares exactly). How many were left out."""
    left_out = 0
    for table, files in snapshot.files.items():
        mine = reads(table, refs)
        kept = []
        for f in files:
            low, high = _instant(f.min_cutoff), _instant(f.max_cutoff)
            if not admits(mine, f.cutoff, low, high, as_instant) or (
                (table, f.key) in snapshot.integer_keys
                and not admits(mine, f.key, _integer(f.min_key), _integer(f.max_key), as_integer)
            ):
                continue
            exact = admits(mine, f.cutoff, low, high, as_instant_taken)
            kept.append(f if exact else dataclasses.replace(f, alone=True))
        kept = kept or files[-1:]  # one at least: the table's view needs its columns
        left_out += len(files) - len(kept)
        snapshot.files[table] = kept
    return left_out


def hull(files: list[File]) -> File:
    """One file standing for `files` read together: the ranges holding all their rows
    (a bound left open where a file has none, or it is of another column)."""
    first = files[0]
    if len(files) == 1:
        return first
    low = high = ""
    keys = [(_integer(f.min_key), _integer(f.max_key)) for f in files if f.key == first.key]
    lows, highs = [a for a, _ in keys if a is not None], [b for _, b in keys if b is not None]
    if len(lows) == len(highs) == len(files):
        low, high = str(min(lows)), str(max(highs))
    first_cut = last_cut = None
    ends = [f for f in files if f.cutoff == first.cutoff]
    starts = [(t, f.min_cutoff) for f in ends if (t := _instant(f.min_cutoff)) is not None]
    stops = [(t, f.max_cutoff) for f in ends if (t := _instant(f.max_cutoff)) is not None]
    if len(starts) == len(stops) == len(files):
        first_cut, last_cut = min(starts)[1], max(stops)[1]
    return File("", first.key, low, high, first.cutoff, first_cut, last_cut,
                any(f.unsure for f in files), schema=first.schema)  # fmt: skip


def integer_columns(cur: Any, tables: list[str]) -> set[tuple[str, str]]:
    """(table, column) for each column of an integer type of `tables` that this database
    has: their catalogued key ranges may prune (a text key's ends sort as text)."""
    cur.execute(query("integer_columns"), (json.dumps(tables),))
    return {(r[0], r[1]) for r in cur.fetchall()}


def bounded(table: str, refs: list[Reference]) -> bool:
    """Whether every place the statement reads `table` puts bounds on some column (then
    its catalogued files can be pruned by them)."""
    mine = reads(table, refs)
    return bool(mine) and all(r.columns for r in mine)


@functools.lru_cache(maxsize=65536)  # each catalogued end parsed once per process
def _instant(text: str | None) -> dt.datetime | None:
    """A catalogued end (UTC text), None where it bounds nothing: none, or a year past
    Python's 9999 (PostgreSQL's go to 294276)."""
    try:
        return None if text is None else dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


@functools.lru_cache(maxsize=65536)
def _integer(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:  # a key that is not an integer: no key bounds used
        return None
