"""The source's types the archived columns use, made in the definitions database as the
source defines them (archiver.serve.definitions): enums with their labels in order,
domains with their base type, NOT NULL and checks, composites with their attributes,
ranges over their subtype (and their multirange), arrays of any of those, and the types
of the extensions that made them (CREATE EXTENSION where the definitions database may).
A type gone from the source, or one made by the source's own C functions, is declared as
text: its values are served as the text they were archived as."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from archiver.errors import first_line

log = logging.getLogger(__name__)

TYPE_OF = """
SELECT t.oid, n.nspname, t.typname, t.typtype, t.typcategory, t.typelem, t.typbasetype,
       format_type(t.typbasetype, t.typtypmod), t.typnotnull, t.typrelid,
       (SELECT e.extname FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
        WHERE d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'),
       (SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid),
       format_type((SELECT r.rngsubtype FROM pg_range r WHERE r.rngtypid = t.oid), NULL),
       (SELECT r.rngtypid FROM pg_range r WHERE r.rngmultitypid = t.oid),
       (SELECT mt.typname FROM pg_range r JOIN pg_type mt ON mt.oid = r.rngmultitypid
        WHERE r.rngtypid = t.oid)
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE t.oid = %s
"""


class SourceType(NamedTuple):
    """A type of the source, as TYPE_OF reads it."""

    oid: int
    schema: str
    name: str
    kind: str  # typtype
    category: str
    element: int  # an array's
    base: int  # a domain's
    base_sql: str | None
    not_null: bool  # a domain's
    relation: int  # a composite's
    extension: str | None  # the extension that made it
    subtype: int | None  # a range's
    subtype_sql: str | None
    range_of: int | None  # a multirange's range
    multirange: str | None  # a range's multirange's name


LABELS = "SELECT enumlabel FROM pg_enum WHERE enumtypid = %s ORDER BY enumsortorder"
ATTRIBUTES = """
SELECT attname, atttypid, format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum
"""
CHECKS = "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE contypid = %s AND contype = 'c' ORDER BY conname"
BUILT_IN = ("pg_catalog", "information_schema")


class DeclaredTypes:
    """The source's types the archived columns use, made in the definitions database
    where missing: each archived type's text, resolved in the source and written as the
    name it has in the definitions database (None: served as text)."""

    def __init__(self, source: psycopg.Connection[Any], target: psycopg.Connection[Any]) -> None:
        self.source = source
        self.target = target
        self.made: dict[int, str | None] = {}  # source OID -> its name here

    def resolve(self, type_sql: str) -> str:
        """`type_sql` (format_type at archive time) as a column of the definitions
        database declares it: as written for a built-in type, qualified for a user's."""
        base, dims = type_sql, ""
        while base.endswith("[]"):
            base, dims = base[:-2], dims + "[]"
        row = self.source.execute("SELECT to_regtype(%s)::oid", [base]).fetchone()
        oid = row[0] if row else None
        if oid is None:
            return "text"  # the type is gone from the source: its values as their text
        found = self._type(oid)
        assert found is not None
        if found.schema in BUILT_IN:
            return type_sql
        name = self._ensure(oid)
        if name is None:
            return "text"
        modifier = base[base.index("(") :] if "(" in base and found.kind == "b" else ""
        return name + modifier + dims

    def _type(self, oid: int) -> SourceType | None:
        row = self.source.execute(TYPE_OF, [oid]).fetchone()
        return None if row is None else SourceType(*row)

    def _ensure(self, oid: int) -> str | None:
        if oid in self.made:
            return self.made[oid]
        self.made[oid] = None  # a type that refers to itself: as text
        found = self._type(oid)
        if found is None:
            return None
        qualified = sql.Identifier(found.schema, found.name).as_string(self.target)
        if found.schema in BUILT_IN:
            self.made[oid] = qualified
            return qualified
        try:
            with self.target.transaction():
                made = self._make(found)
        except psycopg.Error as exc:
            log.warning("serve: type %s served as text: %s", qualified, first_line(exc))
            return None
        self.made[oid] = made
        return made

    def _exists(self, schema: str, name: str) -> str | None:
        row = self.target.execute(
            "SELECT t.typtype FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE n.nspname = %s AND t.typname = %s",
            [schema, name],
        ).fetchone()
        return None if row is None else str(row[0])

    def _make(self, t: SourceType) -> str | None:
        """`t` made in the definitions database (in the caller's transaction): its name
        there, or None where it is served as text."""
        target = self.target
        qualified = sql.Identifier(t.schema, t.name)
        text = qualified.as_string(target)
        if t.category == "A" and t.element:  # an array: its element's, made
            element = self._ensure(t.element)
            return None if element is None else element + "[]"
        if t.kind == "m" and t.range_of:  # a multirange comes with its range
            return None if self._ensure(t.range_of) is None else text
        target.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(t.schema)))
        if t.extension is not None:
            target.execute(
                sql.SQL("CREATE EXTENSION IF NOT EXISTS {} SCHEMA {}").format(
                    sql.Identifier(t.extension), sql.Identifier(t.schema)
                )
            )
            return text if self._exists(t.schema, t.name) else None
        have = self._exists(t.schema, t.name)
        if have is not None and have != t.kind:
            return None
        if t.kind == "e":
            self._enum(t, qualified, have is not None)
            return text
        if have is not None:
            return text
        if t.kind == "d" and t.base_sql is not None:
            return text if self._domain(t, qualified) else None
        if t.kind == "c" and t.relation:
            attributes = [
                sql.SQL("{} {}").format(
                    sql.Identifier(name), sql.SQL(self.resolve_oid(int(oid), str(kind)) or "text")
                )
                for name, oid, kind in self.source.execute(ATTRIBUTES, [t.relation]).fetchall()
            ]
            target.execute(
                sql.SQL("CREATE TYPE {} AS ({})").format(qualified, sql.SQL(", ").join(attributes))
            )
            return text
        if t.kind == "r" and t.subtype and t.subtype_sql:
            subtype = self.resolve_oid(t.subtype, t.subtype_sql)
            if subtype is None:
                return None
            options = [sql.SQL("SUBTYPE = {}").format(sql.SQL(subtype))]
            if t.multirange:
                options.append(
                    sql.SQL("MULTIRANGE_TYPE_NAME = {}").format(
                        sql.Identifier(t.schema, t.multirange)
                    )
                )
            target.execute(
                sql.SQL("CREATE TYPE {} AS RANGE ({})").format(
                    qualified, sql.SQL(", ").join(options)
                )
            )
            return text
        return None  # a base type of the source's own making (C functions): as text

    def _enum(self, t: SourceType, qualified: sql.Identifier, exists: bool) -> None:
        """An enum with the source's labels in their order; one made before gets the
        labels it lacks, each where the source has it."""
        labels = [r[0] for r in self.source.execute(LABELS, [t.oid])]
        if not exists:
            self.target.execute(
                sql.SQL("CREATE TYPE {} AS ENUM ({})").format(
                    qualified, sql.SQL(", ").join(map(sql.Literal, labels))
                )
            )
            return
        present = [r[0] for r in self.target.execute(LABELS, [self._oid(t.schema, t.name)])]
        for i, label in enumerate(labels):
            if label in present:
                continue
            place: sql.Composable
            if i:
                place = sql.SQL(" AFTER {}").format(sql.Literal(labels[i - 1]))
            elif present:
                place = sql.SQL(" BEFORE {}").format(sql.Literal(present[0]))
            else:
                place = sql.SQL("")
            self.target.execute(
                sql.SQL("ALTER TYPE {} ADD VALUE IF NOT EXISTS {}{}").format(
                    qualified, sql.Literal(label), place
                )
            )
            present.insert(i, label)

    def _domain(self, t: SourceType, qualified: sql.Identifier) -> bool:
        """A domain over its base type (made), NOT NULL and the checks that can be made
        here (one calling a function of the source's own cannot)."""
        assert t.base_sql is not None
        base = self.resolve_oid(t.base, t.base_sql)
        if base is None:
            return False
        self.target.execute(
            sql.SQL("CREATE DOMAIN {} AS {}{}").format(
                qualified, sql.SQL(base), sql.SQL(" NOT NULL" if t.not_null else "")
            )
        )
        for (check,) in self.source.execute(CHECKS, [t.oid]).fetchall():
            with contextlib.suppress(psycopg.Error), self.target.transaction():
                self.target.execute(
                    sql.SQL("ALTER DOMAIN {} ADD {}").format(qualified, sql.SQL(check))
                )
        return True

    def resolve_oid(self, oid: int, type_sql: str) -> str | None:
        """The source's type `oid` (format_type says `type_sql`) as declared here: as
        written where it is built in, else as made here (None: served as text)."""
        found = self._type(oid)
        if found is None:
            return None
        if found.category == "A":
            element = self.resolve_oid(found.element, type_sql.removesuffix("[]"))
            return None if element is None else element + "[]"
        if found.schema in BUILT_IN:
            return type_sql
        return self._ensure(oid)

    def _oid(self, schema: str, name: str) -> int:
        row = self.target.execute(
            "SELECT t.oid FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE n.nspname = %s AND t.typname = %s",
            [schema, name],
        ).fetchone()
        assert row is not None
        return int(row[0])
