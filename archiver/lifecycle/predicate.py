"""An erasure's predicate (`archiver erase --where "customer_id = 42"`): DuckDB SQL over
the archived columns, checked before anything changes, and found in the files where
they are stored (DuckDB reads each file's footer and only the columns it needs, on
Azure or on disk). The predicate's literal values are the erased person's data: they
are never logged, stored in the ledger or echoed in an error; `shape` is what is said
instead (`customer_id = ?`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from archiver.errors import InputError, first_line

_LITERALS = ("numeric_const", "string_const")


def literals(predicate: str) -> list[tuple[int, int]]:
    """The (start, end) of every literal value in `predicate`, by DuckDB's tokenizer."""
    import duckdb

    tokens = duckdb.tokenize(predicate)
    spans = []
    for i, (start, kind) in enumerate(tokens):
        if kind.name in _LITERALS:
            end = tokens[i + 1][0] if i + 1 < len(tokens) else len(predicate)
            spans.append((start, len(predicate[start:end].rstrip()) + start))
    return spans


def shape(predicate: str) -> str:
    """`predicate` with each literal value replaced by `?`: what the ledger and the log
    keep of it."""
    text = predicate
    for start, end in reversed(literals(predicate)):
        text = text[:start] + "?" + text[end:]
    return " ".join(text.split())


def _masked(predicate: str, message: str) -> str:
    """An error message without any literal of the predicate in it."""
    for start, end in literals(predicate):
        value = predicate[start:end]
        for form in {value, value.strip("'"), value.strip("'").replace("''", "'")}:
            if form:
                message = message.replace(form, "?")
    return message


@dataclass(frozen=True)
class Predicate:
    """A checked predicate and the SQL it is evaluated as."""

    text: str
    shape: str

    @classmethod
    def check(cls, con: Any, text: str, view: str, table: str) -> Predicate:
        """`text` as a WHERE clause over `view` (the archived files of `table`), one
        expression and nothing else; one line naming the problem otherwise (an unknown
        column by name), the predicate's values masked."""
        import duckdb

        if not text.strip():
            raise InputError("erase: --where is empty")
        sql = f"SELECT * FROM {view} WHERE ({text})"
        try:
            tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0])
            if tree.get("error"):
                raise InputError(
                    "erase: --where does not parse: "
                    + _masked(text, first_line(tree.get("error_message", "")))
                )
            _one_filter(tree, view)
            con.execute(f"SELECT 1 FROM {view} WHERE ({text}) LIMIT 0").fetchall()
        except duckdb.BinderException as exc:
            message = _masked(text, first_line(exc))
            raise InputError(
                f"erase: --where names what {table} does not have: {message}"
            ) from None
        except duckdb.Error as exc:
            raise InputError(f"erase: --where: {_masked(text, first_line(exc))}") from None
        return cls(text, shape(text))


def _one_filter(tree: dict[str, Any], view: str) -> None:
    """The wrapped statement is still one plain SELECT * FROM the probe WHERE …: the
    predicate closed no parenthesis to add a UNION, a GROUP BY or another statement."""
    statements = tree.get("statements", [])
    node = statements[0].get("node", {}) if len(statements) == 1 else {}
    plain = (
        node.get("type") == "SELECT_NODE"
        and node.get("from_table", {}).get("table_name") == view
        and not node.get("group_expressions")
        and node.get("having") is None
        and node.get("qualify") is None
        and not node.get("modifiers")
        and not (node.get("cte_map") or {}).get("map")
    )
    if not plain:
        raise InputError("erase: --where must be one condition over the archived columns")


FILE = "archived_file"  # the relation a predicate is evaluated over, row by row


def matches(con: Any, predicate: Predicate, uris: dict[str, str]) -> dict[str, list[int]]:
    """Each file of `uris` (path: where DuckDB reads it) with rows matching, and their
    positions in it. All the files in one read, their columns by name (a file without
    a column the predicate names has NULL there, as in `archiver query`). An error is
    one line, the predicate's values masked."""
    import duckdb

    part = {u: n for n, u in uris.items()}
    listed = ", ".join("'" + u.replace("'", "''") + "'" for u in part)
    try:
        rows = con.execute(
            f"SELECT filename, list(file_row_number ORDER BY file_row_number) "
            f"FROM read_parquet([{listed}], filename = true, file_row_number = true, "
            f"union_by_name = true) AS {FILE} WHERE ({predicate.text}) GROUP BY filename"
        ).fetchall()
    except duckdb.Error as exc:
        raise InputError(f"erase: {_masked(predicate.text, first_line(exc))}") from None
    return {part[uri]: [int(p) for p in positions] for uri, positions in rows}
