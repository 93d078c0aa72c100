"""What a restore is asked to do (archiver.restore): the files, where, and how."""

from __future__ import annotations

from dataclasses import dataclass

from archiver.model import CatalogFile


@dataclass(frozen=True)
class RestorePlan:
    """Which catalogued files to restore, where, and how."""

    files: list[CatalogFile]
    into: str | None  # table name; None: the archived table
    skip_conflicts: bool
    cutoff_from: str | None  # ISO 8601, inclusive
    cutoff_to: str | None  # ISO 8601, exclusive
    dry_run: bool
    ignore_dropped_columns: bool = False
    # Rows go back: out of the archive in the same transaction (archiver.ledger: operation
    # `operation`, None in a dry run; its files kept `keep` s). False: --into, --keep-archive.
    moves_back: bool = False
    operation: int | None = None
    keep: float = 0.0
