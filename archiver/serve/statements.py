"""The statements a PostgreSQL client sends besides its SELECTs, told apart by their
first words: transactions, cursors, SET/SHOW/RESET, DISCARD. serve answers them itself
(archiver.serve.session); anything else must be one SELECT for DuckDB, or is refused
with PostgreSQL's SQLSTATE for it."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The PostgreSQL settings a client may SET (libpq, psql, psycopg, asyncpg, postgres_fdw
# and BI tools send these); serve keeps their values for SHOW and applies none to
# DuckDB, whose own settings are never a client's to change.
SETTINGS = {
    "application_name": "",
    "bytea_output": "hex",
    "client_encoding": "UTF8",
    "client_min_messages": "notice",
    "datestyle": "ISO, MDY",
    "default_transaction_isolation": "read committed",
    "default_transaction_read_only": "on",
    "extra_float_digits": "1",
    "idle_in_transaction_session_timeout": "0",
    "integer_datetimes": "on",
    "intervalstyle": "postgres",
    "jit": "off",
    "lock_timeout": "0",
    "max_identifier_length": "63",
    "search_path": '"$user", public',
    "server_encoding": "UTF8",
    "server_version": "15.0",
    "server_version_num": "150000",
    "standard_conforming_strings": "on",
    "statement_timeout": "0",
    "timezone": "UTC",
    "transaction_isolation": "repeatable read",
    "transaction_read_only": "on",
    "work_mem": "4MB",
}
READ_ONLY_SETTINGS = {
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
    "max_identifier_length",
}


@dataclass(frozen=True)
class Statement:
    """What a statement is: `kind` says which, the rest what it names."""

    kind: str  # begin, commit, rollback, savepoint, release, rollback_to, set, reset,
    # show, discard, declare, fetch, close, deallocate, empty, select
    text: str = ""
    name: str = ""  # a cursor's or setting's name
    value: str = ""  # SET's value; DECLARE's query
    count: int | None = None  # FETCH's row count (None: ALL)
    tag: str = ""  # the CommandComplete tag of a statement that returns no rows


_WORD = r"(?:\"(?:[^\"]|\"\")+\"|[A-Za-z_][\w$]*)"


def _unquote(name: str) -> str:
    if name.startswith('"'):
        return name[1:-1].replace('""', '"')
    return name.lower()


_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?:BEGIN|START\s+TRANSACTION)\b.*", re.I | re.S), "begin"),
    (
        re.compile(r"(?:COMMIT|END)(?:\s+(?:WORK|TRANSACTION))?(?:\s+AND\s+NO\s+CHAIN)?", re.I),
        "commit",
    ),
    (
        re.compile(
            r"ROLLBACK(?:\s+(?:WORK|TRANSACTION))?\s+TO\s+(?:SAVEPOINT\s+)?(" + _WORD + ")", re.I
        ),
        "rollback_to",
    ),
    (
        re.compile(r"(?:ROLLBACK|ABORT)(?:\s+(?:WORK|TRANSACTION))?(?:\s+AND\s+NO\s+CHAIN)?", re.I),
        "rollback",
    ),
    (re.compile(r"SAVEPOINT\s+(" + _WORD + ")", re.I), "savepoint"),
    (re.compile(r"RELEASE\s+(?:SAVEPOINT\s+)?(" + _WORD + ")", re.I), "release"),
    (
        re.compile(r"SET\s+(?:SESSION\s+CHARACTERISTICS\s+AS\s+)?TRANSACTION\b.*", re.I | re.S),
        "set_transaction",
    ),
    (re.compile(r"SET\s+(?:(?:SESSION|LOCAL)\s+)?TIME\s+ZONE\s+(.+)", re.I | re.S), "set_timezone"),
    (
        re.compile(
            r"SET\s+(?:(?:SESSION|LOCAL)\s+)?(" + _WORD + r")\s*(?:=|\s+TO\s+)\s*(.+)", re.I | re.S
        ),
        "set",
    ),
    (re.compile(r"RESET\s+(" + _WORD + ")", re.I), "reset"),
    (re.compile(r"SHOW\s+(" + _WORD + r"(?:\s+ZONE)?)", re.I), "show"),
    (re.compile(r"DISCARD\s+(ALL|PLANS|SEQUENCES|TEMP|TEMPORARY)", re.I), "discard"),
    (re.compile(r"DEALLOCATE\s+(?:PREPARE\s+)?(ALL|" + _WORD + ")", re.I), "deallocate"),
    (
        re.compile(
            r"DECLARE\s+(" + _WORD + r")\s+(?:BINARY\s+)?(?:(?:ASENSITIVE|INSENSITIVE)\s+)?"
            r"(?:NO\s+SCROLL\s+)?CURSOR\s+(?:(?:WITH|WITHOUT)\s+HOLD\s+)?FOR\s+(.+)",
            re.I | re.S,
        ),
        "declare",
    ),
    (
        re.compile(
            r"FETCH\s+(?:(FORWARD|NEXT)\s+)?(ALL|\d+)?\s*(?:FROM|IN)?\s*(" + _WORD + ")",
            re.I,
        ),
        "fetch",
    ),
    (re.compile(r"CLOSE\s+(ALL|" + _WORD + ")", re.I), "close"),
]


def classify(text: str) -> Statement:
    """What `text` (one statement, no trailing semicolon) is."""
    body = text.strip().rstrip(";").strip()
    if not body:
        return Statement("empty")
    for pattern, kind in _PATTERNS:
        m = pattern.fullmatch(body)
        if m is None:
            continue
        if kind == "begin":
            return Statement(kind, body, tag="START TRANSACTION" if body[:1] in "sS" else "BEGIN")
        if kind == "commit":
            return Statement(kind, body, tag="COMMIT")
        if kind == "rollback":
            return Statement(kind, body, tag="ROLLBACK")
        if kind in ("savepoint", "release", "rollback_to"):
            tag = {"savepoint": "SAVEPOINT", "release": "RELEASE", "rollback_to": "ROLLBACK"}[kind]
            return Statement(kind, body, name=_unquote(m.group(1)), tag=tag)
        if kind == "set_transaction":
            return Statement("set", body, name="", tag="SET")
        if kind == "set_timezone":
            return Statement("set", body, name="timezone", value=_value(m.group(1)), tag="SET")
        if kind == "set":
            return Statement(
                "set", body, name=_unquote(m.group(1)), value=_value(m.group(2)), tag="SET"
            )
        if kind == "reset":
            return Statement("reset", body, name=_unquote(m.group(1)), tag="RESET")
        if kind == "show":
            name = re.sub(r"\s+", " ", m.group(1)).lower()
            return Statement(
                "show", body, name="timezone" if name == "time zone" else _unquote(name)
            )
        if kind == "discard":
            return Statement(
                "discard", body, name=m.group(1).upper(), tag=f"DISCARD {m.group(1).upper()}"
            )
        if kind == "deallocate":
            name = m.group(1)
            return Statement(kind, body, name="" if name.upper() == "ALL" else _unquote(name),
                             tag="DEALLOCATE ALL" if name.upper() == "ALL" else "DEALLOCATE")  # fmt: skip
        if kind == "declare":
            return Statement(
                kind, body, name=_unquote(m.group(1)), value=m.group(2), tag="DECLARE CURSOR"
            )
        if kind == "fetch":
            count = m.group(2)
            n = None if count and count.upper() == "ALL" else int(count) if count else 1
            return Statement(kind, body, name=_unquote(m.group(3)), count=n)
        if kind == "close":
            name = m.group(1)
            return Statement(kind, body, name="" if name.upper() == "ALL" else _unquote(name),
                             tag="CLOSE CURSOR ALL" if name.upper() == "ALL" else "CLOSE CURSOR")  # fmt: skip
    return Statement("select", body)


def _value(raw: str) -> str:
    """A SET value as SHOW prints it: quotes taken off, a list kept as written."""
    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    return text


def split(text: str) -> list[str]:
    """The statements of a simple query, split at semicolons outside quotes, dollar
    quotes and comments."""
    out, start, i, n = [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":
            j = i + 1
            while j < n:
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
        elif c == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "$" and (m := re.match(r"\$[A-Za-z_]*\$", text[i:])):
            j = text.find(m.group(0), i + len(m.group(0)))
            i = n if j < 0 else j + len(m.group(0))
        elif c == ";":
            out.append(text[start:i])
            start = i = i + 1
        else:
            i += 1
    out.append(text[start:])
    return [s for s in out if s.strip()] or [""]


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
