"""The Delta commits archiver writes, each at the version after the one its publisher
read (archiver.delta.publish): put-if-absent, never retried at a later version, so a
publisher that lost its lock cannot land a publication another has redone. delta-rs
writes the appends; a commit that also removes files, and a schema change delta-rs has
no way to make (a widened type), are written as Delta's protocol commits."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from archiver.delta.check import LOG_DIR
from archiver.errors import first_line
from archiver.storage.seam import Storage

APP_ID = "archiver"  # the Delta app transaction every publication carries
CHECKPOINT_EVERY = 100  # Delta versions between checkpoints (delta.checkpointInterval)

log = logging.getLogger(__name__)


def tidy(table: Any) -> None:
    """A checkpoint of `table` at its version, then its log entries expired before it
    deleted (delta.logRetentionDuration, 30 days by default), as delta-rs's own commits
    do after theirs: a reader opens the table from the checkpoint and lists only what
    follows it, so a table of years of hourly publications opens in bounded time (87,600
    commits without one: 30 s to open; bench years section)."""
    table.create_checkpoint()
    table.update_incremental()  # cleanup deletes up to the checkpoint it knows of
    table.cleanup_metadata()


@dataclass(frozen=True)
class LogWriter:
    """Commits to the Delta log of one table, whose objects start with `root` + "/"."""

    storage: Storage
    root: str
    uri: str
    options: dict[str, str]

    def replace(
        self, table: Any, number: int, adds: list[Any], removals: Sequence[tuple[Any, ...]]
    ) -> bool:
        """One Delta commit that removes the retired files and adds the new ones (their
        rewrites among them), with txn(archiver, number). Written as the protocol says
        (put-if-absent of the next version's file), as _write_schema does: delta-rs's
        write transactions take add actions only. A removal by a compaction (its third
        field, the operation) and an add of its merge change no data (`dataChange:
        false`, as Delta's OPTIMIZE writes them: a streaming reader skips them); a commit
        of nothing else is an OPTIMIZE."""

        version = table.version() + 1
        now = int(time.time() * 1000)
        moved = all(r[2] is not None for r in removals) and not any(a.data_change for a in adds)
        actions: list[dict[str, Any]] = [
            {
                "commitInfo": {
                    "timestamp": now,
                    "operation": "OPTIMIZE" if moved else "DELETE",
                    "operationParameters": {
                        "predicate": "small files merged"
                        if moved
                        else "rows taken out of the archive"
                    },
                    "isBlindAppend": False,
                    "engineInfo": "archiver",
                    "archiver.publication": str(number),
                }
            },
            {"txn": {"appId": APP_ID, "version": number, "lastUpdated": now}},
        ]
        for path, size, merged in removals:
            actions.append(
                {
                    "remove": {
                        "path": str(path)[len(self.root) + 1 :],
                        "deletionTimestamp": now,
                        "dataChange": merged is None,
                        "extendedFileMetadata": True,
                        "partitionValues": {},
                        "size": int(size),
                    }
                }
            )
        for add in adds:
            actions.append(
                {
                    "add": {
                        "path": add.path,
                        "partitionValues": {},
                        "size": add.size,
                        "modificationTime": add.modification_time,
                        "dataChange": bool(add.data_change),
                        "stats": add.stats,
                    }
                }
            )
        if not self._put(version, actions):
            return False
        self._tidy(version)
        return True

    def _tidy(self, version: int) -> None:
        """After a commit that landed: `tidy` every CHECKPOINT_EVERY versions, as delta-rs's
        own commits do. Its failure is logged, never raised: the commit stands, and the
        next checkpoint covers this one's versions."""
        from deltalake import DeltaTable

        if version % CHECKPOINT_EVERY:
            return
        try:
            tidy(DeltaTable(self.uri, storage_options=self.options))
        except Exception as exc:
            log.warning("%s: version %d committed, its checkpoint not written: %s",
                        self.uri, version, first_line(exc))  # fmt: skip

    def append(self, table: Any, number: int, adds: list[Any]) -> bool:
        """delta-rs's commit of `adds` with txn(archiver, number) at the version after
        `table`'s: False when that version was written meanwhile (no retry, no rebase)."""
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import CommitProperties, PostCommitHookProperties, Transaction

        version = table.version() + 1
        try:
            table.create_write_transaction(
                adds,
                mode="append",
                schema=table.schema(),
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(APP_ID, number)],
                    custom_metadata={"archiver.publication": str(number)},
                    max_commit_retries=0,
                ),
                # not delta-rs's hooks: their failure would raise after the commit landed
                post_commithook_properties=PostCommitHookProperties(
                    create_checkpoint=False, cleanup_expired_logs=False
                ),
            )
        except CommitFailedError:
            return False
        self._tidy(version)
        return True

    def write_schema(
        self,
        table: Any,
        schema: str,
        table_name: str,
        *,
        configuration: dict[str, str] | None = None,
        protocol: dict[str, Any] | None = None,
        operation: str = "CHANGE COLUMN",
    ) -> None:
        """A metaData action with `schema` (and `configuration`, and a `protocol` action
        when it changes), committed as Delta's protocol commits (put-if-absent of the
        next version's file): delta-rs has no way to change a column's type, nor to add a
        column to a table with column mapping (delta.mapping)."""
        table.update_incremental()
        meta = table.metadata()
        version = table.version() + 1
        action = {
            "metaData": {
                "id": meta.id,
                "name": meta.name,
                "description": meta.description,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": schema,
                "partitionColumns": list(meta.partition_columns),
                "configuration": dict(
                    meta.configuration if configuration is None else configuration
                ),
                "createdTime": meta.created_time,
            }
        }
        actions = [_info(operation), *([{"protocol": protocol}] if protocol else []), action]
        if not self._put(version, actions):
            raise RuntimeError(f"{table_name}: Delta version {version} was written meanwhile")

    def create(
        self,
        schema: str,
        configuration: dict[str, str],
        protocol: dict[str, Any],
        name: str,
        description: str,
    ) -> None:
        """Version 0 of a table delta-rs cannot create: one whose columns carry their
        column mapping (delta.mapping); put-if-absent, as every commit here."""
        now = int(time.time() * 1000)
        meta = {
            "id": str(uuid.uuid4()),
            "name": name,
            "description": description,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema,
            "partitionColumns": [],
            "configuration": configuration,
            "createdTime": now,
        }
        if not self._put(0, [_info("CREATE TABLE"), {"protocol": protocol}, {"metaData": meta}]):
            raise RuntimeError(f"{name}: its Delta table was created meanwhile")

    def _put(self, version: int, actions: list[dict[str, Any]]) -> bool:
        """Commit `actions` as version `version`, if no one has: whether this did."""
        body = "\n".join(json.dumps(a) for a in actions) + "\n"
        return self.storage.create(f"{self.root}/{LOG_DIR}/{version:020d}.json", body.encode())


def _info(operation: str) -> dict[str, Any]:
    return {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "operationParameters": {},
            "engineInfo": "archiver",
        }
    }
