"""The invariant, checked by primary key over the table and every catalogued file
(assert_exactly_once); and what the files hold, row by row (assert_archived_once)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.support import sql
from tests.support.archive import blob_names, catalog_paths, rows_in_blobs


def assert_exactly_once(
    database_url: str,
    connection_string: str,
    container: str,
    expected_ids: set[int],
    table: str = "orders",
    source_url: str | None = None,
    stray_blobs: frozenset[str] = frozenset(),
) -> None:
    """Each id that was older than the cutoff is now in exactly one place: still in the
    table, or in exactly one row of exactly one catalogued file. No stray blobs.
    `database_url` holds the catalog; the table is there too unless `source_url` says."""
    left = [r["id"] for r in sql(source_url or database_url, f'SELECT id FROM "{table}"')]
    expected_blobs = sorted({*catalog_paths(database_url, retired=True), *stray_blobs})
    assert blob_names(connection_string, container) == expected_blobs, "blobs and catalog differ"
    paths = catalog_paths(database_url, f"public.{table}")
    archived = [r["id"] for r in rows_in_blobs(connection_string, container, paths)]
    seen = Counter(archived) + Counter(i for i in left if i in expected_ids)
    twice = [i for i, n in seen.items() if n > 1]
    lost = expected_ids - seen.keys()
    assert not twice, f"{len(twice)} rows archived twice, e.g. {sorted(twice)[:5]}"
    assert not lost, f"{len(lost)} rows lost, e.g. {sorted(lost)[:5]}"
    assert set(archived) <= expected_ids, "archived rows newer than the cutoff"


def assert_archived_once(
    archived: list[dict[str, Any]], expected: dict[int, dict[str, Any]]
) -> None:
    """The files hold exactly the `expected` rows (id: row), once each, with equal
    values (copy mode, or a check of values): where else a row is, assert_exactly_once."""
    ids = [r["id"] for r in archived]
    dupes = len(ids) - len(set(ids))
    assert dupes == 0, f"{dupes} rows archived twice"
    missing = expected.keys() - set(ids)
    extra = set(ids) - expected.keys()
    assert not missing, f"{len(missing)} rows lost, e.g. {sorted(missing)[:5]}"
    assert not extra, f"{len(extra)} rows archived that should not be, e.g. {sorted(extra)[:5]}"
    for row in archived:
        assert row == expected[row["id"]], f"values differ for id {row['id']}"
