"""The columns serve reads by name only, as PostgreSQL reads its system columns: each
archived table's `_archiver_file` (its row's file) and `<column>__pg_text` companions
(archiver.serve.companions). A statement that names one reads it; otherwise `*` and
`t.*` leave it out of their result, and the catalogs' column lists leave them all out
(archiver.serve.narrowing), so psql's `\\d`, pgjdbc's getColumns and SQLAlchemy's
inspector list the table's own columns. The definitions database still declares them,
after the table's own, so a person's privilege check and the mirrored grants find them
by name.

`_archiver_file` is in a table's rows only for a statement that names it (no `*`,
DISTINCT or NATURAL JOIN meets it otherwise), and then each star over the table
excludes it. The companions are in every row, so that a `*` at any depth carries the
PostgreSQL-only values of its columns to the result; there they are paired with their
columns and not shown, unless the statement names them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from archiver.pgtypes.sql import PG_TEXT_SUFFIX

FILE_ID = "_archiver_file"  # the column naming a row's file (its catalog id)


def hidden(column: str) -> bool:
    """Whether serve shows `column` only to a statement that names it."""
    return column == FILE_ID or column.endswith(PG_TEXT_SUFFIX)


def catalog_filter(column: str) -> str:
    """SQL that is true for a catalog's row of a column serve shows (`column` names it)."""
    return (
        f"NOT ({column} = '{FILE_ID}' OR pg_catalog.right({column}::pg_catalog.text, "
        f"{len(PG_TEXT_SUFFIX)}) = '{PG_TEXT_SUFFIX}')"
    )


def written(tree: dict[str, Any] | None) -> set[str]:
    """Every name a statement gives a column: the columns it names, the aliases it
    gives. A hidden column of one of these names is shown."""
    found: set[str] = set()
    stack: list[Any] = [tree or {}]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "COLUMN_REF" and node.get("column_names"):
                found.add(str(node["column_names"][-1]))
            if node.get("alias") and isinstance(node["alias"], str):
                found.add(node["alias"])
            found.update(str(n) for n in node.get("column_name_alias") or ())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def exclude_file(tree: Any, archived: dict[int, str]) -> None:
    """Each star of a parse (changed in place) made to leave out `_archiver_file` of the
    archived tables it covers (`archived`: the alias of each archived table's node, by
    the node's id), as DuckDB's EXCLUDE: `t.*` by name, `*` by table and name (a
    subquery's or a WITH query's column of that name stays)."""
    for star, aliases in _stars(tree, [], archived):
        if star.get("expr") is not None:
            continue  # COLUMNS(<pattern>): DuckDB's own, its columns chosen by the statement
        relation = str(star.get("relation_name") or "")
        if relation:
            if relation.casefold() in {a.casefold() for a in aliases}:
                star["exclude_list"] = [*(star.get("exclude_list") or []), FILE_ID]
            continue
        star["qualified_exclude_list"] = [
            *(star.get("qualified_exclude_list") or []),
            *({"catalog": "", "schema": "", "table": a, "column": FILE_ID} for a in aliases),
        ]


def _stars(
    node: Any, aliases: list[str], archived: dict[int, str]
) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """Every star of a parse, and the aliases of the archived tables the FROM of its
    SELECT holds itself (through its joins, not in its subqueries)."""
    if isinstance(node, list):
        for item in node:
            yield from _stars(item, aliases, archived)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "SELECT_NODE":
        aliases = []
        refs = [node.get("from_table")]
        while refs:
            ref = refs.pop()
            if isinstance(ref, dict) and ref.get("type") == "JOIN":
                refs += [ref.get("right"), ref.get("left")]
            elif isinstance(ref, dict) and id(ref) in archived:
                aliases.append(archived[id(ref)])
    if node.get("class") == "STAR":
        yield node, aliases
    for value in node.values():
        yield from _stars(value, aliases, archived)
