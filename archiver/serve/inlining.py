"""A statement over the archive as DuckDB runs it: each archived table it reads written in
place as a subquery, the SELECT of the files a statement may read of it, the
companions of the plain columns it returns appended (archiver.serve.companions), and,
where it names `_archiver_file`, its stars made to leave that out (archiver.serve.hidden).

Made from DuckDB's own parse (json_serialize_sql), changed and written back
(json_deserialize_sql) once per statement text, set of tables and set of companions: a
template whose tables are placeholders, each filled with its files' SELECT when the
statement runs. A statement DuckDB cannot parse to JSON (a PIVOT) reads views of the
tables instead, made in an in-memory database of its own. A view per table for every
statement would cost DuckDB a bind of its files more (a CREATE VIEW binds its body, and
the statement binds it again)."""

from __future__ import annotations

import copy
import itertools
import json
import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

from archiver.ident import quote_ident
from archiver.query import statement
from archiver.serve import companions, hidden
from archiver.serve.fileset import KEPT

# A table's place in a template: an identifier no statement writes (a token of the
# process's own: one in a statement's string literal is not taken for one)
_TOKEN = secrets.token_hex(8)
_PLACE = f"__archiver_{_TOKEN}_{{}}__"
RELATION = re.compile(f'"?__archiver_{_TOKEN}_(\\d+)__"?')

Template = tuple[str, dict[int, tuple[str, str]], int]  # (SQL, place -> table, appended)
PARSES = 512  # templates kept (oldest first out)


def template(
    cur: Any,
    sql: str,
    tree: dict[str, Any] | None,
    companion_columns: set[str],
    tables: list[tuple[str, str]],
    file_named: bool = False,
) -> Template | None:
    """`sql` with each reference to one of `tables` ((schema, table): the archived
    tables, and the kept relations as (archiver_kept, schema.table)) a placeholder,
    companions appended; None where DuckDB cannot parse it (a PIVOT): the caller reads
    views instead. A bare name is the first table of that name in the order given, as
    a search path finds it."""
    tree = tree if tree is not None else statement.serialized(sql, cur)
    if tree is None:
        return None
    tree = copy.deepcopy(tree)
    appended = companions.extend(tree, companion_columns)
    places: dict[tuple[str, str], int] = {}
    by_name: dict[tuple[str, str], tuple[str, str]] = {}
    for schema, table in reversed(tables):  # the first in order wins a bare name
        if schema != KEPT:
            by_name[("", table.casefold())] = (schema, table)
    for schema, table in tables:
        by_name[(schema.casefold(), table.casefold())] = (schema, table)
    archived: dict[int, str] = {}  # the alias of each archived table's node
    for node in _base_tables(tree):
        schema = str(node.get("schema_name") or "")
        found = by_name.get(
            (
                schema.casefold() if schema.casefold() != "main" else "",
                str(node["table_name"]).casefold(),
            )
        )
        if found is None or node.get("catalog_name"):
            continue  # not the archive's: DuckDB says what it is
        place = places.setdefault(found, len(places))
        node["alias"] = node.get("alias") or str(node["table_name"])
        node["table_name"] = _PLACE.format(place)
        node["schema_name"] = ""
        archived[id(node)] = node["alias"]
    if file_named:
        hidden.exclude_file(tree, archived)
    if not places and not appended:
        return sql, {}, 0
    try:
        row = cur.execute("SELECT json_deserialize_sql($1)", [json.dumps(tree)]).fetchone()
    except Exception:
        return None
    return str(row[0]), {place: table for table, place in places.items()}, appended


def written(made: Template, bodies: dict[tuple[str, str], str]) -> str:
    """A template's statement, each placeholder its table's files' SELECT."""
    text, places, _ = made
    return RELATION.sub(lambda m: f"({bodies[places[int(m.group(1))]]})", text)


class Writer:
    """The statements DuckDB runs for serve: each template made once (kept for the
    PARSES latest), and the in-memory databases of the views a statement DuckDB cannot
    parse reads instead (attached once, then reused)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._templates: dict[
            tuple[str, frozenset[str], tuple[tuple[str, str], ...], bool], Template | None
        ] = {}
        self._free: list[str] = []  # attached databases no statement holds
        self._schemas: dict[str, set[str]] = {}  # the schemas made in each
        self._numbers = itertools.count(1)

    def written(
        self,
        cur: Any,
        sql: str,
        tree: dict[str, Any] | None,
        companion_columns: set[str],
        bodies: dict[tuple[str, str], str],
        file_named: bool,
    ) -> tuple[str, int, Callable[[], None]]:
        """The statement DuckDB runs for `sql` (`tree`: its parse, where the caller has
        it; `file_named`: it names _archiver_file): each archived table it reads the
        SELECT of its files (`bodies`), in place or as views; how many companions it
        appended; what to release when it ends."""
        key = (sql, frozenset(companion_columns), tuple(bodies), file_named)
        with self._lock:
            known = key in self._templates
            made = self._templates.get(key)
        if not known:
            made = template(cur, sql, tree, companion_columns, list(bodies), file_named)
            with self._lock:
                if len(self._templates) >= PARSES:
                    self._templates.pop(next(iter(self._templates)))
                self._templates[key] = made
        if made is not None:
            return written(made, bodies), made[2], lambda: None
        return self._views(cur, sql, bodies)

    def _views(
        self, cur: Any, sql: str, bodies: dict[tuple[str, str], str]
    ) -> tuple[str, int, Callable[[], None]]:
        """The tables as views, in an in-memory database no running statement holds, its
        search path the tables' schemas."""
        name, schemas_made = self._database(cur)
        setup = [f"USE {name}"]
        schemas = ["main"]
        try:
            for (schema, table), body in bodies.items():
                if schema not in schemas_made:
                    setup.append(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
                    schemas_made.add(schema)
                setup.append(
                    f"CREATE OR REPLACE VIEW {quote_ident(schema)}.{quote_ident(table)} AS {body}"
                )
                if schema != KEPT and schema not in schemas:
                    schemas.append(schema)
            path = ",".join(f"{name}.{quote_ident(s)}" for s in schemas)
            setup.append(f"SET search_path = '{path.replace(chr(39), chr(39) * 2)}'")
            cur.execute(";\n".join(setup))
        except BaseException:
            self._release(name)
            raise
        return sql, 0, lambda: self._release(name)

    def _database(self, cur: Any) -> tuple[str, set[str]]:
        with self._lock:
            if self._free:
                name = self._free.pop()
                return name, self._schemas[name]
            name = f"q{next(self._numbers)}"
        cur.execute(f"ATTACH ':memory:' AS {name}")
        with self._lock:
            self._schemas[name] = set()
        return name, self._schemas[name]

    def _release(self, name: str) -> None:
        with self._lock:
            self._free.append(name)


def _base_tables(node: Any, shadowed: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The table references of a parse that name a table, not a common table
    expression: a CTE's name hides a table's in its statement and in the CTEs after it
    (not in its own body, but for a recursive one's recursive term), as DuckDB binds."""
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for item in node:
            found += _base_tables(item, shadowed)
        return found
    if not isinstance(node, dict):
        return found
    if node.get("type") == "BASE_TABLE" and "table_name" in node:
        named = str(node["table_name"]).casefold()
        if node.get("schema_name") or node.get("catalog_name") or named not in shadowed:
            found.append(node)
        return found
    rest = dict(node)
    entries = (rest.pop("cte_map", None) or {}).get("map") or []
    for i, entry in enumerate(entries):
        earlier = frozenset(str(e["key"]).casefold() for e in entries[:i])
        found += _base_tables(entry.get("value"), shadowed | earlier)
    shadowed |= {str(e["key"]).casefold() for e in entries}
    if node.get("type") == "RECURSIVE_CTE_NODE":
        found += _base_tables(rest.pop("left", None), shadowed)
        shadowed |= {str(node.get("cte_name") or "").casefold()}
    for value in rest.values():
        found += _base_tables(value, shadowed)
    return found
