"""What a client's statement is, read by PostgreSQL's own parser (libpg_query, through
pglast): a transaction's or a cursor's statement, SET / SHOW / RESET, DISCARD, which
serve answers itself (archiver.serve.session); a SELECT of PostgreSQL's catalogs or of
no table at all, which the definitions database answers (archiver.serve.definitions);
or a statement over the archive, for DuckDB, which reads one SELECT and refuses
everything else with PostgreSQL's SQLSTATE for it (archiver.serve.selects). A statement
PostgreSQL's grammar cannot read (DuckDB's own syntax) goes to DuckDB as written."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pglast import parser
from pglast.parser import ParseError

from archiver.serve import columns
from archiver.serve.columns import Origin

# The settings serve itself answers for and reports at start-up (ParameterStatus): the
# rest of PostgreSQL's session settings are the definitions database's to check and keep.
SETTINGS = {
    "application_name": "",
    "client_encoding": "UTF8",
    "datestyle": "ISO, MDY",
    "default_transaction_read_only": "on",
    "in_hot_standby": "off",
    "integer_datetimes": "on",
    "intervalstyle": "postgres",
    "is_superuser": "off",
    "server_encoding": "UTF8",
    "standard_conforming_strings": "on",
    "timezone": "UTC",
    "transaction_read_only": "on",
}
# What PostgreSQL reports to the client whenever it changes (GUC_REPORT), as it names them
REPORTED = {
    "application_name": "application_name",
    "client_encoding": "client_encoding",
    "datestyle": "DateStyle",
    "default_transaction_read_only": "default_transaction_read_only",
    "in_hot_standby": "in_hot_standby",
    "integer_datetimes": "integer_datetimes",
    "intervalstyle": "IntervalStyle",
    "is_superuser": "is_superuser",
    "server_encoding": "server_encoding",
    "server_version": "server_version",
    "session_authorization": "session_authorization",
    "standard_conforming_strings": "standard_conforming_strings",
    "timezone": "TimeZone",
}
# Settings no client changes: serve's answer is fixed by what it is.
READ_ONLY_SETTINGS = {
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "max_identifier_length",
    "in_hot_standby",
    "is_superuser",
    "transaction_read_only",
    "default_transaction_read_only",
    "session_authorization",
    "role",
}

_CURSOR_HOLD = 0x20  # DeclareCursorStmt.options: WITH HOLD
_CURSOR_SCROLL = 0x02
_FETCH_ALL = 2**63 - 1


class Kind(StrEnum):
    """What a statement is, as a session answers it."""

    BEGIN = "begin"
    COMMIT = "commit"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    RELEASE = "release"
    ROLLBACK_TO = "rollback_to"
    SET = "set"
    RESET = "reset"
    SHOW = "show"
    DISCARD = "discard"
    DECLARE = "declare"
    FETCH = "fetch"
    CLOSE = "close"
    DEALLOCATE = "deallocate"
    EMPTY = "empty"
    REFUSED = "refused"
    SELECT = "select"  # of the archive: DuckDB answers it
    CATALOG = "catalog"  # of PostgreSQL's catalogs alone: the definitions database does
    MIXED = "mixed"  # of both, refused


@dataclass(frozen=True)
class Statement:
    """What a statement is: `kind` says which, the rest what it names."""

    kind: Kind
    text: str = ""
    name: str = ""  # a cursor's or setting's name
    value: str = ""  # SET's value as written; DECLARE's query
    count: int | None = None  # FETCH's row count (None: ALL)
    tag: str = ""  # the CommandComplete tag of a statement that returns no rows
    hold: bool = False  # DECLARE … WITH HOLD
    local: bool = False  # SET LOCAL
    sqlstate: str = ""  # a refused statement's
    names: tuple[str, ...] | None = None  # a SELECT's columns as PostgreSQL names them
    origins: tuple[Origin | None, ...] | None = None  # the table column each one plainly is
    tree: dict[str, Any] | None = field(default=None, compare=False, repr=False)


def split(text: str) -> list[str]:
    """The statements of a simple query, split at the semicolons PostgreSQL's scanner
    finds (never inside a quote, a dollar quote or a comment); any text splits,
    parsable or not."""
    try:
        tokens = parser.scan(text)
    except ParseError:  # an unterminated quote or comment: one statement, for the parser to refuse
        return [text]
    parts, start = [], 0
    for token in tokens:
        if token.name == "ASCII_59":  # ;
            parts.append(text[start : token.start])
            start = token.end + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()] or [""]


def classify(text: str, catalogs: frozenset[str]) -> Statement:
    """What `text` (one statement) is; `catalogs` are the relations of pg_catalog, which
    PostgreSQL finds before any table of the same name."""
    return _classify(text, catalogs)


@functools.lru_cache(maxsize=2048)
def _classify(text: str, catalogs: frozenset[str]) -> Statement:
    body = text.strip()
    if not body.rstrip(";").strip():
        return Statement(Kind.EMPTY)
    try:
        parsed = json.loads(parser.parse_sql_json(body))["stmts"]
    except ParseError:
        return Statement(Kind.SELECT, body)  # DuckDB's own syntax, or nonsense: DuckDB says which
    if not parsed:
        return Statement(Kind.EMPTY)  # comments alone
    if len(parsed) != 1:
        return Statement(
            Kind.REFUSED,
            body,
            sqlstate="42601",
            value="cannot insert multiple commands into a prepared statement",
        )
    ((kind, node),) = parsed[0]["stmt"].items()
    if kind == "SelectStmt":
        side = _side(node, catalogs)
        origins = columns.origins(node) if side == Kind.SELECT else None
        return Statement(side, body, names=columns.names(node), origins=origins, tree=node)
    handler = _UTILITY.get(kind)
    if handler is None:
        return Statement(Kind.SELECT, body)  # a write or DuckDB's: refused there in its words
    return handler(body, node)


def _side(node: dict[str, Any], catalogs: frozenset[str]) -> Kind:
    """CATALOG where the SELECT reads only PostgreSQL's catalogs (or no table), SELECT
    where it reads the archive alone, MIXED where it reads both."""
    archive = catalog = False
    for ref in _relations(node):
        schema, name = ref.get("schemaname"), ref.get("relname", "")
        if schema in ("pg_catalog", "information_schema") or (schema is None and name in catalogs):
            catalog = True
        else:
            archive = True
    if archive and catalog:
        return Kind.MIXED
    return Kind.SELECT if archive else Kind.CATALOG


def _relations(node: Any, hidden: frozenset[str] = frozenset()) -> Iterator[dict[str, Any]]:
    """The RangeVars of a parse (pglast's JSON) that name a relation, not a WITH query:
    a WITH query's name hides a relation's in its statement and in the WITH queries
    after it -- under RECURSIVE in all of them, its own included -- as PostgreSQL
    resolves names."""
    if isinstance(node, list):
        for item in node:
            yield from _relations(item, hidden)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("RangeVar")
    if ref is not None:
        if ref.get("schemaname") is not None or ref.get("relname") not in hidden:
            yield ref
        return
    clause = node.get("withClause")
    if clause:
        queries = [c["CommonTableExpr"] for c in clause.get("ctes") or []]
        names = [str(q.get("ctename")) for q in queries]
        for i, query in enumerate(queries):
            seen = names if clause.get("recursive") else names[:i]
            yield from _relations(query.get("ctequery"), hidden | frozenset(seen))
        hidden |= frozenset(names)
    for key, value in node.items():
        if key != "withClause":
            yield from _relations(value, hidden)


def _transaction(body: str, node: dict[str, Any]) -> Statement:
    kind = node.get("kind", "")
    chain = bool(node.get("chain"))
    name = node.get("savepoint_name") or ""
    if kind in ("TRANS_STMT_BEGIN", "TRANS_STMT_START"):
        tag = "BEGIN" if kind == "TRANS_STMT_BEGIN" else "START TRANSACTION"
        return Statement(Kind.BEGIN, body, tag=tag)
    if kind == "TRANS_STMT_COMMIT":
        return Statement(Kind.BEGIN if chain else Kind.COMMIT, body, tag="COMMIT")
    if kind == "TRANS_STMT_ROLLBACK":
        return Statement(Kind.BEGIN if chain else Kind.ROLLBACK, body, tag="ROLLBACK")
    if kind == "TRANS_STMT_SAVEPOINT":
        return Statement(Kind.SAVEPOINT, body, name=name, tag="SAVEPOINT")
    if kind == "TRANS_STMT_RELEASE":
        return Statement(Kind.RELEASE, body, name=name, tag="RELEASE")
    if kind == "TRANS_STMT_ROLLBACK_TO":
        return Statement(Kind.ROLLBACK_TO, body, name=name, tag="ROLLBACK")
    return Statement(
        Kind.REFUSED, body, sqlstate="0A000", value="archiver serve reads only: no two-phase commit"
    )


def _set(body: str, node: dict[str, Any]) -> Statement:
    kind = node.get("kind", "")
    name = str(node.get("name") or "").lower()
    if kind == "VAR_RESET_ALL":
        return Statement(Kind.RESET, body, name="all", tag="RESET")
    if kind == "VAR_RESET":
        return Statement(Kind.RESET, body, name=name, tag="RESET")
    if kind == "VAR_SET_MULTI":  # SET TRANSACTION …, SET SESSION CHARACTERISTICS …
        return Statement(Kind.SET, body, name="", tag="SET")
    if name in ("role", "session_authorization"):
        return Statement(
            Kind.REFUSED,
            body,
            sqlstate="42501",
            value=f"SET {name.upper()} refused: archiver serve has one user",
        )
    value = "DEFAULT" if kind in ("VAR_SET_DEFAULT", "VAR_SET_CURRENT") else _set_value(node)
    return Statement(
        Kind.SET, body, name=name, value=value, tag="SET", local=bool(node.get("is_local"))
    )


def _set_value(node: dict[str, Any]) -> str:
    """SET's value as written, each argument's text joined by commas (the definitions
    database says what it becomes: archiver.serve.session)."""
    out = []
    for arg in node.get("args") or []:
        const = arg.get("A_Const") or arg.get("TypeCast", {}).get("arg", {}).get("A_Const") or {}
        for key in ("sval", "ival", "fval", "boolval"):
            if key in const:
                out.append(str(const[key].get(key, 0)))
                break
    return ", ".join(out)


def _show(body: str, node: dict[str, Any]) -> Statement:
    return Statement(Kind.SHOW, body, name=str(node.get("name", "")).lower(), tag="SHOW")


def _discard(body: str, node: dict[str, Any]) -> Statement:
    target = str(node.get("target", "DISCARD_ALL")).removeprefix("DISCARD_")
    target = {"TEMP": "TEMP", "SEQUENCES": "SEQUENCES", "PLANS": "PLANS"}.get(target, "ALL")
    return Statement(Kind.DISCARD, body, name=target, tag=f"DISCARD {target}")


def _deallocate(body: str, node: dict[str, Any]) -> Statement:
    name = node.get("name") or ""
    return Statement(
        Kind.DEALLOCATE, body, name=name, tag="DEALLOCATE" if name else "DEALLOCATE ALL"
    )


def _declare(body: str, node: dict[str, Any]) -> Statement:
    options = int(node.get("options") or 0)
    if options & _CURSOR_SCROLL:
        return Statement(
            Kind.REFUSED,
            body,
            sqlstate="0A000",
            value="archiver serve's cursors scan forward only (NO SCROLL)",
        )
    query = _declared_query(body)
    if query is None:
        return Statement(Kind.REFUSED, body, sqlstate="42601", value="DECLARE without FOR <query>")
    return Statement(
        Kind.DECLARE,
        body,
        name=node.get("portalname", ""),
        value=query,
        tag="DECLARE CURSOR",
        hold=bool(options & _CURSOR_HOLD),
    )


def _declared_query(body: str) -> str | None:
    """The query of a DECLARE, as the client wrote it: the text after the FOR that ends
    the cursor's options (found by PostgreSQL's scanner, never inside a quote)."""
    tokens = parser.scan(body)
    for i, token in enumerate(tokens):
        if token.name == "FOR" and i > 0 and tokens[i - 1].name in ("CURSOR", "HOLD"):
            return body[token.end + 1 :].strip()
    return None


def _fetch(body: str, node: dict[str, Any]) -> Statement:
    direction = node.get("direction", "FETCH_FORWARD")
    if direction != "FETCH_FORWARD" or node.get("ismove"):
        return Statement(
            Kind.REFUSED,
            body,
            sqlstate="0A000",
            value="archiver serve's cursors fetch forward only (FETCH n, FETCH ALL)",
        )
    many = node.get("howMany")
    count = 0 if many is None else None if many == _FETCH_ALL else int(many)  # FETCH 0: none here
    return Statement(Kind.FETCH, body, name=node.get("portalname", ""), count=count)


def _close(body: str, node: dict[str, Any]) -> Statement:
    name = node.get("portalname") or ""
    return Statement(
        Kind.CLOSE, body, name=name, tag="CLOSE CURSOR" if name else "CLOSE CURSOR ALL"
    )


_UTILITY = {
    "TransactionStmt": _transaction,
    "VariableSetStmt": _set,
    "VariableShowStmt": _show,
    "DiscardStmt": _discard,
    "DeallocateStmt": _deallocate,
    "DeclareCursorStmt": _declare,
    "FetchStmt": _fetch,
    "ClosePortalStmt": _close,
}


def parameter_types(sql: str, names: list[str]) -> dict[int, str]:
    """The type each parameter is cast to in `sql` (`$1::bigint`), of type `names`."""
    longest = sorted(names, key=len, reverse=True)
    pattern = re.compile(
        r"\$(\d+)\s*::\s*(" + "|".join(map(re.escape, longest)) + r")(\s*\[\])?(?![\w])", re.I
    )
    found: dict[int, str] = {}
    for m in pattern.finditer(sql):
        found.setdefault(int(m.group(1)), m.group(2).lower() + ("[]" if m.group(3) else ""))
    return found
