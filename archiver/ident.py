"""SQL identifiers: the one place names are quoted before they reach a query."""

from __future__ import annotations

from dataclasses import dataclass

from archiver.errors import InputError


def quote_ident(name: str) -> str:
    """Quote a PostgreSQL identifier so any name, however hostile, stays one identifier."""
    if not name or "\x00" in name:
        raise InputError(f"invalid identifier {name!r}")
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class TableName:
    """A table as the user wrote it: `table` or `schema.table` (no quoting syntax)."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, text: str) -> TableName:
        schema, dot, name = text.strip().rpartition(".")
        if not name or (dot and not schema):
            raise InputError(f"invalid table name {text!r}: expected table or schema.table")
        return cls(schema or None, name)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name
