"""`archiver verify`'s look at a table's Delta log: it must add exactly the files the
catalog says were published, each once."""

from __future__ import annotations

from collections import Counter
from typing import Any

from archiver.delta.location import table_uri
from archiver.storage.seam import Storage

LOG_DIR = "_delta_log"


def delta_problems(
    storage: Storage, options: dict[str, str], table: str, published: set[str]
) -> list[str]:
    """Differences between the Delta table of `table` and `published`, the object names
    of the files the catalog says are in it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    uri = table_uri(storage.location, table)
    try:
        delta = DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        return [f"{uri}: no Delta table, catalog says {len(published)} files are in it"]
    root = storage.object_name(table)
    actions: Any = delta.get_add_actions(flatten=True)
    paths = [f"{root}/{p}" for p in actions.column("path").to_pylist()]
    counts = Counter(paths)
    problems = [f"{p}: in the Delta table {n} times" for p, n in counts.items() if n > 1]
    problems += [
        f"{p}: in the Delta table, not published in the catalog" for p in counts.keys() - published
    ]
    problems += [
        f"{p}: published in the catalog, not in the Delta table" for p in published - counts.keys()
    ]
    return sorted(problems)
