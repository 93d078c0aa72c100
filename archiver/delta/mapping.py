"""Delta column mapping, for a table whose column names Spark-family readers (Fabric,
Databricks, Synapse) refuse: a space, `,;{}()=`, a newline or a tab. Such a table is
published in the protocol's `name` mode, each column's physical name being the name
its files already hold (no file is rewritten), at the lowest protocol that has it:
reader 2 / writer 5, or reader 3 / writer 7 with the `columnMapping` feature beside
features the table already uses (timestampNtz). Every other table keeps the protocol
delta-rs gives it, so readers without column mapping (Polars, Daft) keep reading it.

A table upgrades the first time a column with such a name arrives (added in
PostgreSQL): one commit sets the protocol and gives every column, the old ones too, its
id and its own name as physical name, which the protocol allows (PROTOCOL.md, Column
Mapping: a column's physical name is static; existing columns keep theirs)."""

from __future__ import annotations

from typing import Any

Field = dict[str, Any]

MODE = "delta.columnMapping.mode"
MAX_ID = "delta.columnMapping.maxColumnId"
ID = "delta.columnMapping.id"
PHYSICAL = "delta.columnMapping.physicalName"
REFUSED = frozenset(" ,;{}()\n\t=")  # Spark's check of names when no mapping is on


def _children(t: Any) -> list[Field]:
    """The struct fields inside a field's type (through arrays), which get ids too."""
    if isinstance(t, dict):
        if t.get("type") == "struct":
            return list(t["fields"])
        if t.get("type") == "array":
            return _children(t["elementType"])
    return []


def needs(fields: list[Field]) -> bool:
    """Whether a Spark-family reader refuses one of these names (nested ones too)."""
    return any(REFUSED & set(f["name"]) or needs(_children(f["type"])) for f in fields)


def mapped(configuration: dict[str, str]) -> bool:
    return configuration.get(MODE) == "name"


def assign(fields: list[Field], last_id: int) -> tuple[list[Field], int]:
    """`fields` with an id and a physical name (the name itself) on every field that has
    none, nested struct fields too, ids counting on from `last_id`: (fields, max id)."""

    def one(f: Field) -> Field:
        nonlocal last_id
        out = dict(f, metadata=dict(f.get("metadata") or {}))
        if ID not in out["metadata"]:
            last_id += 1
            out["metadata"][ID] = last_id
            out["metadata"][PHYSICAL] = f["name"]
        out["type"] = retype(f["type"])
        return out

    def retype(t: Any) -> Any:
        if isinstance(t, dict) and t.get("type") == "struct":
            return dict(t, fields=[one(c) for c in t["fields"]])
        if isinstance(t, dict) and t.get("type") == "array":
            return dict(t, elementType=retype(t["elementType"]))
        return t

    done = [one(f) for f in fields]
    return done, last_id


def same_protocol(current: Any, wanted: dict[str, Any]) -> bool:
    """Whether delta-rs's ProtocolVersions `current` is the protocol action `wanted`."""
    return bool(
        current.min_reader_version == wanted["minReaderVersion"]
        and current.min_writer_version == wanted["minWriterVersion"]
        and sorted(current.reader_features or ()) == wanted.get("readerFeatures", [])
        and sorted(current.writer_features or ()) == wanted.get("writerFeatures", [])
    )


def _uses_ntz(fields: list[Field]) -> bool:
    def of(t: Any) -> bool:
        if isinstance(t, str):
            return t == "timestamp_ntz"
        return of(t.get("elementType", "")) or any(of(c["type"]) for c in _children(t))

    return any(of(f["type"]) for f in fields)


def protocol(fields: list[Field], current: Any = None) -> dict[str, Any]:
    """The lowest protocol action with column mapping for a table of `fields` whose
    protocol is now `current` (delta-rs's ProtocolVersions; None: a new table)."""
    reader = current.min_reader_version if current is not None else 1
    writer = current.min_writer_version if current is not None else 2
    readers = set(current.reader_features or ()) if current is not None else set()
    writers = set(current.writer_features or ()) if current is not None else set()
    if _uses_ntz(fields):
        readers.add("timestampNtz")
    if reader < 3 and writer < 7 and not readers:
        return {"minReaderVersion": 2, "minWriterVersion": 5}
    readers.add("columnMapping")
    return {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": sorted(readers),
        "writerFeatures": sorted(readers | writers),
    }
