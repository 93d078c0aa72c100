"""A Delta table's schema as its files arrive over the years: a column added in
PostgreSQL joins the table (older rows read it as null), a dropped one stays (newer
rows null), a type widened in a way Delta readers follow (a wider integer, float to
double, a decimal of more digits at the same scale) widens the table's column, and any
other change is refused for that file, naming table, column and both types."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from archiver.delta import mapping
from archiver.errors import ArchiverError

if TYPE_CHECKING:
    from archiver.delta.commits import LogWriter

log = logging.getLogger(__name__)

Field = dict[str, Any]  # a Delta schema field: name, type, nullable, metadata

_INTEGERS = ("byte", "short", "integer", "long")
_FLOATS = ("float", "double")


class SchemaRefused(ArchiverError):
    """A file whose column type its Delta table cannot take."""


@dataclass
class Merged:
    """The table's fields after a file's, and what changed."""

    fields: list[Field]
    added: list[Field] = field(default_factory=list)
    widened: list[tuple[str, Any, Any]] = field(default_factory=list)  # name, from, to


def _decimal(t: Any) -> tuple[int, int] | None:
    if isinstance(t, str) and t.startswith("decimal("):
        p, s = t[len("decimal(") : -1].split(",")
        return int(p), int(s)
    return None


def wider(table: Any, file: Any) -> Any | None:
    """The type a column holding `table` values and `file` values takes: one of the two,
    or None when Delta readers cannot read one as the other."""
    if table == file:
        return table
    for family in (_INTEGERS, _FLOATS):
        if table in family and file in family:
            return max(table, file, key=family.index)
    a, b = _decimal(table), _decimal(file)
    if a and b and a[1] == b[1]:
        return table if a[0] >= b[0] else file
    return None


def merge(fields: list[Field], incoming: list[Field], table: str) -> Merged:
    """`fields` (the Delta table's) after a file with `incoming` ones."""
    merged = Merged([dict(f) for f in fields])
    by_name = {f["name"]: f for f in merged.fields}
    for new in incoming:
        old = by_name.get(new["name"])
        if old is None:
            added = {**new, "nullable": True}
            merged.fields.append(added)
            merged.added.append(added)
            by_name[new["name"]] = added
            continue
        kind = wider(old["type"], new["type"])
        if kind is None:
            raise SchemaRefused(
                f"table {table}, column {new['name']!r}: the Delta table holds "
                f"{_name(old['type'])}, a file holds {_name(new['type'])}, which Delta "
                "readers cannot read as one type"
            )
        if kind != old["type"]:
            merged.widened.append((new["name"], old["type"], kind))
            old["type"] = kind
    return merged


def _name(t: Any) -> str:
    return t if isinstance(t, str) else str(t.get("type"))


def evolve_table(
    table: Any, changes: Merged, uri: str, options: dict[str, str], writer: LogWriter, name: str
) -> Any:
    """The Delta table at `uri` (`table`, None before its first file) with the schema its
    new files need: created with it, its new columns added, its widened types written
    (by `writer`); with column mapping where a name needs it (delta.mapping)."""
    from deltalake import DeltaTable, Schema
    from deltalake.schema import Field

    if not changes.fields or (table is not None and not (changes.added or changes.widened)):
        return table  # as it is: no reload of its log
    description = f"rows archived from {name} by archiver"
    if table is None and mapping.needs(changes.fields):
        fields, last = mapping.assign(changes.fields, 0)
        writer.create(
            _schema(fields),
            {mapping.MODE: "name", mapping.MAX_ID: str(last)},
            mapping.protocol(fields),
            name,
            description,
        )
        log.info("%s: Delta table created with column mapping (a name Spark refuses)",
                 name)  # fmt: skip
    elif table is None:
        return DeltaTable.create(
            uri,
            Schema.from_json(_schema(changes.fields)),
            name=name,
            description=description,
            storage_options=options,
        )
    elif mapping.mapped(config := dict(table.metadata().configuration)) or mapping.needs(
        changes.added
    ):
        upgrade = not mapping.mapped(config)
        fields, last = mapping.assign(changes.fields, int(config.get(mapping.MAX_ID, "0")))
        config.update({mapping.MODE: "name", mapping.MAX_ID: str(last)})
        # a feature a new column needs (timestampNtz) joins the protocol with it
        protocol = mapping.protocol(fields, table.protocol())
        writer.write_schema(
            table,
            _schema(fields),
            name,
            configuration=config,
            protocol=None if mapping.same_protocol(table.protocol(), protocol) else protocol,
            operation="ADD COLUMNS" if changes.added else "CHANGE COLUMN",
        )
        if upgrade:
            log.info("%s: Delta table upgraded to column mapping for column %s",
                     name, ", ".join(repr(f["name"]) for f in changes.added))  # fmt: skip
    else:
        if changes.added:
            table.alter.add_columns([Field.from_json(json.dumps(f)) for f in changes.added])
        if changes.widened:
            writer.write_schema(table, _schema(changes.fields), name)
    for name, old, new in changes.widened:
        log.info("%s: column %s widened from %s to %s", name, name, old, new)
    return DeltaTable(uri, storage_options=options)


def _schema(fields: list[dict[str, Any]]) -> str:
    return json.dumps({"type": "struct", "fields": fields})
