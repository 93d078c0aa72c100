"""SQL identifiers: the one place names are quoted before they reach a query, and the one
place a name a user wrote (a CLI option, a policy, the console's address) is read, by
PostgreSQL's own rules: `orders`, `sales.orders`, `"Sales"."Orders"`.

A table's identity in archiver's records (jobs, the catalog, object names) is
`schema.table` with each part as PostgreSQL stores it, unquoted (`Sales.Orders` is the
table psql calls `"Sales"."Orders"`); `TableName.stored` reads that form back and
`TableName.parse` reads what a user types."""

from __future__ import annotations

import re
from dataclasses import dataclass

from archiver.errors import InputError

# What PostgreSQL prints without quotes: lower-case letters, digits, _ and $, not first a
# digit or $ (quote_ident also quotes keywords; a keyword reads back the same unquoted here)
_PLAIN = re.compile(r"[a-z_][a-z0-9_$]*")
_UNQUOTED = re.compile(r"[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_$\x80-\U0010ffff]*")


def quote_ident(name: str) -> str:
    """Quote a PostgreSQL identifier so any name, however hostile, stays one identifier."""
    if not name or "\x00" in name:
        raise InputError(f"invalid identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


def sql_name(name: str) -> str:
    """`name` as PostgreSQL's syntax spells it: bare when it reads back the same, else quoted."""
    return name if _PLAIN.fullmatch(name) else quote_ident(name)


def split_name(text: str, what: str = "name") -> list[str]:
    """The parts of a dotted name written in PostgreSQL's syntax: each one double-quoted
    (kept exactly; `""` is a quote) or not (folded to lower case, as PostgreSQL folds
    A-Z), with blanks around the parts ignored."""
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            j, part = i + 1, []
            while True:
                k = text.find('"', j)
                if k < 0:
                    raise InputError(f"invalid {what} {text!r}: a double quote is not closed")
                part.append(text[j:k])
                if text.startswith('""', k):
                    part.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            parts.append("".join(part))
            if not parts[-1]:
                raise InputError(f"invalid {what} {text!r}: an empty quoted name")
        else:
            match = _UNQUOTED.match(text, i)
            if match is None:
                raise InputError(
                    f"invalid {what} {text!r}: expected a name at character {i + 1} "
                    '(double-quote a name holding spaces or punctuation: "Order Lines")'
                )
            parts.append(match.group().translate(_FOLD))
            i = match.end()
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return parts
        if text[i] != ".":
            raise InputError(
                f"invalid {what} {text!r}: unexpected {text[i]!r} at character {i + 1} "
                '(double-quote a name holding spaces or punctuation: "Order Lines")'
            )
        i += 1


_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def parse_column(text: str) -> str:
    """A column name as a user wrote it (`created_at`, `"CreatedAt"`): the name PostgreSQL
    stores."""
    parts = split_name(text, "column name")
    if len(parts) != 1:
        raise InputError(f"invalid column name {text!r}: expected one name, not a dotted one")
    return parts[0]


def as_typed(stored: str) -> str:
    """A table archiver recorded (`Sales.Orders`) as a user would type it
    (`"Sales"."Orders"`), for code that hands a recorded table to what reads a typed one."""
    return TableName.stored(stored).sql


@dataclass(frozen=True)
class TableName:
    """A table: `name` alone (PostgreSQL's search_path decides its schema) or with its
    `schema`, each as PostgreSQL stores it."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, text: str) -> TableName:
        """A table as a user wrote it, in PostgreSQL's syntax: `orders`, `Sales.Orders`
        (which is sales.orders), `"Sales"."Orders"`."""
        parts = split_name(text, "table name")
        if len(parts) > 2:
            raise InputError(
                f"invalid table name {text!r}: expected table or schema.table "
                '(double-quote a name holding a dot: "my.table")'
            )
        if any("." in part for part in parts):
            raise InputError(
                f"table name {text!r}: a schema or table name holding a dot is not supported "
                "(archiver records a table as schema.table)"
            )
        return cls(parts[0] if len(parts) == 2 else None, parts[-1])

    @classmethod
    def stored(cls, text: str) -> TableName:
        """A table as archiver records it: `schema.table`, each part as stored, unquoted."""
        schema, dot, name = text.rpartition(".")  # as recorded: blanks are the name's
        if not name or (dot and not schema):
            raise InputError(f"invalid table name {text!r}: expected table or schema.table")
        return cls(schema or None, name)

    @property
    def sql(self) -> str:
        """The name as a user would type it: `sales.orders`, `"Sales"."Orders"`."""
        name = sql_name(self.name)
        return f"{sql_name(self.schema)}.{name}" if self.schema else name

    @property
    def quoted(self) -> str:
        """The name for SQL, every part quoted: `"Sales"."Orders"` (to_regclass, ::regclass
        and a statement read it as this table, never folded)."""
        name = quote_ident(self.name)
        return f"{quote_ident(self.schema)}.{name}" if self.schema else name

    def __str__(self) -> str:
        """archiver's record of the table (TableName.stored reads it back)."""
        return f"{self.schema}.{self.name}" if self.schema else self.name
