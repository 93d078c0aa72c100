"""A column of an application's table as PostgreSQL's catalog describes its type: what
the type table (archiver.pgtypes) decides by, and what the source reads it into."""

from __future__ import annotations

from dataclasses import dataclass

from archiver.ident import quote_ident


@dataclass(frozen=True)
class Column:
    name: str
    type_sql: str  # format_type(): exact, e.g. numeric(12,2), "my schema".mood[]
    base_type: str  # pg_type name of the type, or of a domain's base type
    category: str = ""  # pg_type.typcategory of the (base) type: A array, E enum, ...
    typmod: int = -1
    element: str = ""  # arrays: the element's (base) type name
    element_category: str = ""
    base_schema: str | None = None  # the (base) type's schema; None: built in (pg_catalog)

    @property
    def cast_type(self) -> str:
        """The (base) type a value is cast to in SQL, by its schema unless built in: an
        extension's type need not be on the worker's search_path."""
        if self.base_schema is None:
            return self.base_type
        return f"{quote_ident(self.base_schema)}.{quote_ident(self.base_type)}"

    def op(self, symbol: str) -> str:
        """The comparison `symbol` (=, <, >, ...) of this type, by its type's schema unless
        built in. With an extension off the worker's search_path, a bare `>` between two
        citext values resolves to text's, through citext's implicit cast: byte order,
        case-sensitive, where the key's index and ORDER BY use citext's."""
        if self.base_schema is None:
            return symbol
        return f"OPERATOR({quote_ident(self.base_schema)}.{symbol})"
