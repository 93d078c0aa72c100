"""What PostgreSQL calls a SELECT's result columns and where each comes from, read off
its parse (pglast's JSON of libpg_query's tree): their names as FigureColname gives them
(`count`, `?column?`, `int4`; DuckDB would say `count_star()`), and the table column each
plainly is (RowDescription's table OID and column number, which pgjdbc's
ResultSetMetaData reads)."""

from __future__ import annotations

from typing import Any


def names(select: dict[str, Any]) -> tuple[str, ...] | None:
    """The names PostgreSQL gives a SELECT's columns (FigureColname: `count`, not
    DuckDB's `count_star()`); None where its list holds a `*`, whose columns the
    engine names."""
    while select.get("op", "SETOP_NONE") != "SETOP_NONE":
        select = select["larg"]
    names = []
    for target in select.get("targetList") or []:
        res = target.get("ResTarget", {})
        if res.get("name"):
            names.append(res["name"])
            continue
        value = res.get("val", {})
        if "ColumnRef" in value and any(
            "A_Star" in f for f in value["ColumnRef"].get("fields", [])
        ):
            return None
        names.append(_figured(value)[0])
    if not names and select.get("valuesLists"):
        return None
    return tuple(names)


# A result column's origin: (schema or None, table, column); column None: every column of
# the table by its own name (`SELECT * FROM t`)
Origin = tuple[str | None, str, str | None]


def origins(select: dict[str, Any]) -> tuple[Origin | None, ...] | None:
    """The table column each result column plainly is, as PostgreSQL tells clients in
    RowDescription (its resorigtbl): a column named in the list, of a table of the FROM
    clause (by its alias, its name, or the one table there is). None for a set operation."""
    if select.get("op", "SETOP_NONE") != "SETOP_NONE":
        return None
    tables: dict[str, tuple[str | None, str]] = {}  # alias or name -> (schema, table)
    stack = list(select.get("fromClause") or [])
    plain = True
    while stack:
        item = stack.pop()
        if "JoinExpr" in item:
            stack += [item["JoinExpr"]["larg"], item["JoinExpr"]["rarg"]]
        elif "RangeVar" in item:
            ref = item["RangeVar"]
            alias = (ref.get("alias") or {}).get("aliasname") or ref["relname"]
            tables[alias] = (ref.get("schemaname"), ref["relname"])
        else:
            plain = False  # a subquery, a function: its columns are no table's
    out: list[Origin | None] = []
    targets = select.get("targetList") or []
    for target in targets:
        value = target.get("ResTarget", {}).get("val", {})
        fields = value.get("ColumnRef", {}).get("fields") if "ColumnRef" in value else None
        if not fields:
            out.append(None)
            continue
        names = [f["String"]["sval"] if "String" in f else None for f in fields]
        column = names[-1]
        qualifier = names[-2] if len(names) > 1 else None
        if qualifier is not None:
            found = tables.get(qualifier)
        else:
            found = next(iter(tables.values())) if len(tables) == 1 and plain else None
        if found is None or (column is None and len(targets) > 1):
            out.append(None)
            continue
        out.append((found[0], found[1], column))
    return tuple(out)


_SQL_FUNCTIONS = {
    "SVFOP_CURRENT_DATE": "current_date",
    "SVFOP_CURRENT_TIME": "current_time",
    "SVFOP_CURRENT_TIME_N": "current_time",
    "SVFOP_CURRENT_TIMESTAMP": "current_timestamp",
    "SVFOP_CURRENT_TIMESTAMP_N": "current_timestamp",
    "SVFOP_LOCALTIME": "localtime",
    "SVFOP_LOCALTIME_N": "localtime",
    "SVFOP_LOCALTIMESTAMP": "localtimestamp",
    "SVFOP_LOCALTIMESTAMP_N": "localtimestamp",
    "SVFOP_CURRENT_ROLE": "current_role",
    "SVFOP_CURRENT_USER": "current_user",
    "SVFOP_USER": "user",
    "SVFOP_SESSION_USER": "session_user",
    "SVFOP_CURRENT_CATALOG": "current_catalog",
    "SVFOP_CURRENT_SCHEMA": "current_schema",
}


def _figured(node: dict[str, Any]) -> tuple[str, int]:
    """PostgreSQL's FigureColnameInternal: (the name, how strongly it is one)."""
    if not node:
        return "?column?", 0
    ((kind, value),) = node.items()
    if kind == "ColumnRef":
        last = value.get("fields", [{}])[-1]
        return (last["String"]["sval"], 2) if "String" in last else ("?column?", 0)
    if kind == "A_Indirection":
        last = (value.get("indirection") or [{}])[-1]
        if "String" in last:
            return last["String"]["sval"], 2
        return _figured(value.get("arg", {}))
    if kind == "FuncCall":
        return value["funcname"][-1]["String"]["sval"], 2
    if kind == "A_Expr":
        return ("nullif", 2) if value.get("kind") == "AEXPR_NULLIF" else ("?column?", 0)
    if kind == "TypeCast":
        name, strength = _figured(value.get("arg", {}))
        if strength <= 1:
            return value["typeName"]["names"][-1]["String"]["sval"], 1
        return name, strength
    if kind == "CollateClause":
        return _figured(value.get("arg", {}))
    if kind == "GroupingFunc":
        return "grouping", 2
    if kind == "SubLink":
        link = value.get("subLinkType")
        if link == "EXISTS_SUBLINK":
            return "exists", 2
        if link == "ARRAY_SUBLINK":
            return "array", 2
        if link == "EXPR_SUBLINK":
            inner = value.get("subselect", {}).get("SelectStmt", {})
            targets = inner.get("targetList") or []
            if targets:
                res = targets[0].get("ResTarget", {})
                return (res["name"], 2) if res.get("name") else _figured(res.get("val", {}))
        return "?column?", 0
    if kind == "CaseExpr":
        name, strength = _figured(value.get("defresult", {}))
        return (name, strength) if strength > 1 else ("case", 1)
    if kind == "A_ArrayExpr":
        return "array", 2
    if kind == "RowExpr":
        return "row", 2
    if kind == "CoalesceExpr":
        return "coalesce", 2
    if kind == "MinMaxExpr":
        return ("greatest" if value.get("op") == "IS_GREATEST" else "least"), 2
    if kind == "SQLValueFunction":
        return _SQL_FUNCTIONS.get(value.get("op", ""), "?column?"), 2
    return "?column?", 0
