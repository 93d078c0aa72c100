"""PostgreSQL-only values (±infinity, numeric NaN, multi-dimensional arrays) are kept in
a `<column>__pg_text` companion beside their column, NULL in it. A statement that returns
a column plainly gets its companion too, appended to its select list (and not shown),
and the two are paired again in the result (archiver.serve.text.text_values). A
companion a `*` brings is paired too, and shown only where the statement names it
(archiver.serve.hidden)."""

from __future__ import annotations

from typing import Any

from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.serve.hidden import hidden


def columns_named(tree: dict[str, Any] | None) -> set[str]:
    """Every column name a statement writes (its parse's column references)."""
    found: set[str] = set()
    stack: list[Any] = [tree or {}]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("class") == "COLUMN_REF" or node.get("type") == "COLUMN_REF":
                names = node.get("column_names") or []
                if names:
                    found.add(str(names[-1]))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def extend(tree: dict[str, Any], companions: set[str]) -> int:
    """DuckDB's parse of a statement (changed in place), its top-level select list
    extended by the companion of each plain column it returns (`c__pg_text` beside `c`)
    where the relations have one (`companions`): its PostgreSQL-only values (±infinity,
    numeric NaN, multi-dimensional arrays) then replace the column's NULL
    (text.text_values). A statement of any other shape is left as it is. Returns how
    many columns it appended."""
    statements = tree.get("statements") or []
    node = statements[0].get("node", {}) if len(statements) == 1 else {}
    items = node.get("select_list") or []
    if (
        not companions
        or node.get("type") != "SELECT_NODE"
        or node.get("group_expressions")
        or any(m.get("type") == "DISTINCT_MODIFIER" for m in node.get("modifiers") or [])
        or any(i.get("type") != "COLUMN_REF" for i in items)
    ):
        return 0
    added = []
    for item in items:
        names = item["column_names"]
        companion = names[-1] + PG_TEXT_SUFFIX
        if companion in companions:
            alias = (item.get("alias") or names[-1]) + PG_TEXT_SUFFIX
            added.append(dict(item, column_names=[*names[:-1], companion], alias=alias))
    node["select_list"] = items + added
    return len(added)


def paired(names: list[str], appended: int, written: set[str]) -> tuple[list[int], dict[int, int]]:
    """Of a result's column names, the last `appended` of them serve's companions: the
    indexes served (all but those, and but the hidden columns a `*` brought that the
    statement does not name: `written`), and for each, the index of its companion
    (`name__pg_text`: an appended one first, else one the result holds)."""
    shown = [i for i in range(len(names) - appended) if not hidden(names[i]) or names[i] in written]
    index: dict[str, int] = {}
    for i, n in enumerate(names):  # appended last: they win
        index[n] = i
    return shown, {
        i: index[names[i] + PG_TEXT_SUFFIX] for i in shown if names[i] + PG_TEXT_SUFFIX in index
    }
