"""What DuckDB's profile (`archiver query --explain`) says a statement read."""

from __future__ import annotations

import re


def files_read(plan: str) -> int:
    """The Parquet files the statement's scans read: each READ_PARQUET operator's
    "Total Files Read" (a branch of one schema's files reads them all in one scan); a
    file ruled out by the catalog, or a branch DuckDB dropped by its ranges, is none."""
    found = re.findall(r"Total Files Read: (\d+)", plan)
    if plan.count("READ_PARQUET") != len(found):
        raise AssertionError(f"a READ_PARQUET scan without its count of files:\n{plan}")
    return sum(int(n) for n in found)
