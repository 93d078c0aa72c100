"""Failpoints: named places in the data path where a test can stop a real worker.

Disabled unless ARCHIVER_FAILPOINTS is set (a testing knob, like FoundationDB's and
TiKV's): `name=pause` blocks the thread (or the event loop's task) there until the
process is killed; `name=sleep:S` sleeps S seconds each time; `name=raise` raises
FailpointError there (a crash that unwinds, for in-process tests). Reaching one logs
`failpoint NAME reached`, which a test waits for before it kills or signals the process.
"""

from __future__ import annotations

import asyncio
import logging
import time

from archiver.errors import ArchiverError, ConfigError

log = logging.getLogger(__name__)


class FailpointError(ArchiverError):
    """Raised where a `name=raise` failpoint is reached."""


NAMES = (
    "before_upload",
    "upload_staged",
    "before_detach",
    "before_commit",
    "source_committed",
    "after_commit",
    "copy_snapshot_open",  # a copy job's snapshot taken, its first chunk not yet read
    "before_delta_commit",  # a publication (archiver.delta.publish)
    "after_delta_commit",
    "after_iceberg_commit",  # its Iceberg table's commit (archiver.iceberg.publish), not recorded
    "restore_before_commit",  # a move back (archiver.restore): its rewrites uploaded
    "restore_committed",  # its transaction committed, the retired files not yet deleted
    "restore_intent_recorded",  # catalog in another database: its intent recorded
    "restore_source_committed",  # ...its source transaction committed, the intent not applied
    "purge_before_commit",  # a purge (archiver.lifecycle.purge): its ledger row written
    "purge_committed",  # its files retired, their blobs not yet deleted
    "rewrite_checked",  # a rewrite (archiver.files.rewrite): its session checked, not uploaded
    "rewrite_uploaded",  # ...uploaded, its session not checked again
    "compact_merged",  # a compaction (archiver.lifecycle.merge): a merge written, not uploaded
    "compact_uploaded",  # ...uploaded, its session not checked again
    "compact_before_commit",  # its merges uploaded, nothing catalogued yet
    "compact_committed",  # the merge catalogued, its inputs retired, not yet published
    "erase_rewritten",  # an erase (archiver.lifecycle.erase): a file's rewrite uploaded
    "erase_before_commit",  # every rewrite uploaded, nothing catalogued yet
    "erase_committed",  # the rewrites catalogued, the originals retired, not yet deleted
    "tier_moved",  # archiver tier: a blob's tier set, the catalog not yet told
    "rehydrate_asked",  # archiver rehydrate: a blob's rehydration asked, not yet looked at
    "live_catalog_read",  # query --with-live: the catalog read, the live rows not yet
    "claim_found_nothing",  # in the worker's event loop: reached with areach()
)
_active: dict[str, tuple[str, float]] = {}


def configure(spec: str) -> None:
    """Parse `name=pause,name=sleep:0.5`; an unknown name or action is a ConfigError."""
    _active.clear()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        kind, _, arg = action.partition(":")
        if name not in NAMES or kind not in ("pause", "sleep", "raise"):
            raise ConfigError(
                f"ARCHIVER_FAILPOINTS: cannot parse {item!r} (names: {', '.join(NAMES)})"
            )
        try:
            seconds = float(arg) if kind == "sleep" else 0.0
        except ValueError:
            raise ConfigError(f"ARCHIVER_FAILPOINTS: {item!r}: sleep takes seconds") from None
        _active[name] = (kind, seconds)


def _action(name: str) -> str | float | None:
    """None when `name` is off; else log it, raise for `raise`, and give the seconds to
    sleep or "pause"."""
    action = _active.get(name) if _active else None
    if action is None:
        return None
    log.warning("failpoint %s reached", name)
    kind, seconds = action
    if kind == "raise":
        raise FailpointError(f"failpoint {name}")
    return seconds if kind == "sleep" else kind


def reach(name: str) -> None:
    """Mark a failpoint in a thread; does nothing unless a test enabled it."""
    wait = _action(name)
    if isinstance(wait, float):
        time.sleep(wait)
    elif wait is not None:
        while True:
            time.sleep(3600)


async def areach(name: str) -> None:
    """reach() in the event loop: sleeping or pausing there lets other tasks run."""
    wait = _action(name)
    if isinstance(wait, float):
        await asyncio.sleep(wait)
    elif wait is not None:
        await asyncio.Event().wait()
