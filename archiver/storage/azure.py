"""Azure Blob Storage (`az://container/prefix`): block blobs staged while the file is
written and committed as one block list, never over an existing name, with the file's
index tags, access tier and encryption scope; tiers, immutability and legal holds set
later (archiver.lifecycle). What the container does is read by storage.features."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from archiver import failpoints
from archiver.config import Settings, StorageLocation
from archiver.errors import OfflineError, StorageError, first_line
from archiver.storage.features import azure_features
from archiver.storage.seam import Features, StoredObject, Upload, join_name

BLOCK_SIZE = 8 * 1024 * 1024  # per staged Azure block


BATCH_DELETES = 256  # sub-requests a blob batch takes at most


class AzureStorage:
    """Block blobs in an Azure Storage container (`az://container/prefix`)."""

    def __init__(
        self, location: StorageLocation, settings: Settings, transport: Any = None
    ) -> None:
        from azure.storage.blob import BlobServiceClient, ExponentialRetry

        self.location = location
        self.max_concurrency = settings.upload_concurrency
        self.default_tier = settings.access_tier or ""
        self.tags = settings.blob_tags  # none on accounts with a hierarchical namespace
        # every write names the scope (customer-managed keys); reads need nothing
        self.scope: dict[str, Any] = (
            {"encryption_scope": settings.encryption_scope} if settings.encryption_scope else {}
        )
        # The SDK's default waits 15 s, then 18 s, 24 s... (over a minute when the service is
        # down). A few short retries instead: an outage fails the attempt and the queue
        # retries the job later, with the rows still in the table.
        options: dict[str, Any] = {
            "retry_policy": ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=3),
            "connection_timeout": 10,
            "read_timeout": 120,
        }
        if transport is not None:  # the unit tests' recording transport
            options["transport"] = transport
        try:
            if settings.azure_connection_string:
                service = BlobServiceClient.from_connection_string(
                    settings.azure_connection_string, **options
                )
            else:
                from azure.identity import DefaultAzureCredential

                assert settings.azure_account_url
                service = BlobServiceClient(
                    settings.azure_account_url, credential=DefaultAzureCredential(), **options
                )
        except ValueError as exc:
            raise StorageError(f"invalid Azure storage settings: {first_line(exc)}") from None
        self.container = service.get_container_client(location.container)

    def _error(self, action: str, exc: Exception) -> StorageError:
        return StorageError(f"{action} {self.location}: {first_line(exc)}")

    def check(self) -> None:
        from azure.core.exceptions import AzureError, ResourceExistsError

        try:
            if not self.container.exists(retry_total=0):
                self.container.create_container(retry_total=0)
        except ResourceExistsError:
            pass
        except AzureError as exc:
            raise self._error("cannot reach", exc) from None

    def object_name(self, relative: str) -> str:
        return join_name(self.location.prefix, relative)

    def upload(self, name: str) -> Upload:
        return _AzureUpload(self, name)

    def discard_unfinished(self, prefix: str) -> None:
        pass  # uncommitted blocks: the service discards them itself (after a week)

    def stat(self, name: str) -> StoredObject | None:
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        try:
            props = self.container.get_blob_client(name).get_blob_properties()
        except ResourceNotFoundError:
            return None
        except AzureError as exc:
            raise self._error("cannot read from", exc) from None
        return _stored(name, props)

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        from azure.core.exceptions import AzureError

        try:
            for props in self.container.list_blobs(name_starts_with=prefix or None):
                yield _stored(props.name, props)
        except AzureError as exc:
            raise self._error("cannot list", exc) from None

    def download(self, name: str, dest: Path) -> None:
        from azure.core.exceptions import AzureError, HttpResponseError

        try:
            with dest.open("wb") as f:
                self.container.get_blob_client(name).download_blob(
                    max_concurrency=self.max_concurrency
                ).readinto(f)
        except HttpResponseError as exc:
            if getattr(exc, "error_code", None) == "BlobArchived":  # 409: in the Archive tier
                raise OfflineError(name) from None
            raise self._error("cannot download from", exc) from None
        except AzureError as exc:
            raise self._error("cannot download from", exc) from None

    def delete(self, name: str) -> None:
        from azure.core.exceptions import AzureError, ResourceNotFoundError

        try:
            self.container.get_blob_client(name).delete_blob()
        except ResourceNotFoundError:
            pass
        except AzureError as exc:
            raise self._error("cannot delete from", exc) from None

    def delete_many(self, names: Sequence[str]) -> dict[str, str]:
        """A blob batch per BATCH_DELETES names (Azure's limit): each sub-request's
        status read on its own, 202 deleted, 404 gone already, any other refused."""
        from azure.core.exceptions import AzureError

        refused = {}
        for start in range(0, len(names), BATCH_DELETES):
            chunk = names[start : start + BATCH_DELETES]
            try:
                replies = list(self.container.delete_blobs(*chunk, raise_on_any_failure=False))
            except AzureError as exc:
                raise self._error("cannot delete from", exc) from None
            for name, reply in zip(chunk, replies, strict=True):
                if reply.status_code not in (202, 404):
                    refused[name] = f"{reply.status_code} {reply.reason or ''}".strip()
        return refused

    def create(self, name: str, data: bytes) -> bool:
        from azure.core.exceptions import AzureError, ResourceExistsError

        try:  # overwrite=False: If-None-Match: *
            self.container.upload_blob(name, data, overwrite=False, **self.scope)
        except ResourceExistsError:
            return False
        except AzureError as exc:
            raise self._error("cannot write to", exc) from None
        return True

    def set_tier(self, name: str, tier: str, priority: str = "Standard") -> None:
        from azure.core.exceptions import AzureError
        from azure.storage.blob import RehydratePriority, StandardBlobTier

        try:
            self.container.get_blob_client(name).set_standard_blob_tier(
                StandardBlobTier(tier), rehydrate_priority=RehydratePriority(priority)
            )
        except AzureError as exc:
            raise self._error(f"cannot set the tier of {name} in", exc) from None

    def protect(self, name: str, until: dt.datetime | None, legal_hold: bool | None) -> None:
        from azure.core.exceptions import AzureError
        from azure.storage.blob import ImmutabilityPolicy

        blob = self.container.get_blob_client(name)
        try:
            if until is not None:
                blob.set_immutability_policy(
                    ImmutabilityPolicy(expiry_time=until, policy_mode="Unlocked")
                )
            if legal_hold is not None:
                blob.set_legal_hold(legal_hold)
        except AzureError as exc:
            raise self._error(f"cannot protect {name} in", exc) from None

    def features(self) -> Features:

        return azure_features(self.container, self.object_name(".archiver-doctor-features"))


class _AzureUpload:
    """A block blob staged while it is written: each BLOCK_SIZE of bytes is staged as
    soon as it is complete (at most `upload_concurrency` in flight, each checked by the
    service against its MD5; a writer waits when they are all busy), and `commit` sends
    the block list with the whole file's MD5. Memory: (upload_concurrency + 1) x
    BLOCK_SIZE. A crash before the commit leaves only uncommitted blocks, which the
    service discards (after a week on Azure): no object appears under the name."""

    def __init__(self, storage: AzureStorage, name: str) -> None:
        self._storage = storage
        self._name = name
        self._blob = storage.container.get_blob_client(name)
        self._upload = uuid.uuid4().hex[:12]  # this upload's own blocks, never another's
        self._ids: list[str] = []
        self._buffer = bytearray()
        self._pool: ThreadPoolExecutor | None = None
        self._staging: deque[Future[Any]] = deque()

    def write(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= BLOCK_SIZE:
            self._stage(bytes(self._buffer[:BLOCK_SIZE]))
            del self._buffer[:BLOCK_SIZE]

    def _stage(self, data: bytes) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self._storage.max_concurrency, thread_name_prefix="upload"
            )
        while len(self._staging) >= self._storage.max_concurrency:
            self._staged(self._staging.popleft())
        block_id = base64.b64encode(f"{self._upload}-{len(self._ids):08d}".encode()).decode()
        self._ids.append(block_id)
        self._staging.append(
            self._pool.submit(
                self._blob.stage_block,
                block_id,
                data,
                length=len(data),
                validate_content=True,
                **self._storage.scope,
            )
        )

    def _staged(self, staging: Future[Any]) -> None:
        from azure.core.exceptions import AzureError

        try:
            staging.result()
        except AzureError as exc:
            raise self._storage._error("upload to", exc) from None

    def commit(
        self, md5: str, *, tags: Mapping[str, str] | None = None, tier: str = ""
    ) -> StoredObject:
        from azure.core.exceptions import AzureError, ResourceExistsError
        from azure.storage.blob import BlobBlock, ContentSettings, StandardBlobTier

        if self._buffer or not self._ids:
            self._stage(bytes(self._buffer))
            self._buffer.clear()
        while self._staging:
            self._staged(self._staging.popleft())
        if self._pool is not None:
            self._pool.shutdown()
        failpoints.reach("upload_staged")
        try:
            self._blob.commit_block_list(
                [BlobBlock(block_id=i) for i in self._ids],
                content_settings=ContentSettings(
                    content_type="application/vnd.apache.parquet",
                    content_md5=bytearray(base64.b64decode(md5)),
                ),
                standard_blob_tier=StandardBlobTier(tier or self._storage.default_tier)
                if tier or self._storage.default_tier
                else None,
                tags=dict(tags) if tags and self._storage.tags else None,
                if_none_match="*",  # a name is written once (write-once containers)
                **self._storage.scope,
            )
        except ResourceExistsError:
            raise StorageError(
                f"{self._name} already exists in {self._storage.location}; archiver never "
                "overwrites a file"
            ) from None
        except AzureError as exc:
            raise self._storage._error("upload to", exc) from None
        stored = self._storage.stat(self._name)
        if stored is None:
            raise StorageError(
                f"{self._name} is missing from {self._storage.location} right after its upload"
            )
        return stored

    def abort(self) -> None:
        self._buffer.clear()
        self._staging.clear()
        if self._pool is not None:  # blocks already on their way finish; none start
            self._pool.shutdown(wait=False, cancel_futures=True)


def _stored(name: str, props: Any) -> StoredObject:
    """A blob's properties (get_blob_properties or a listing's) as StoredObject."""
    raw_md5 = props.content_settings.content_md5
    policy = getattr(props, "immutability_policy", None)
    return StoredObject(
        name,
        props.size,
        base64.b64encode(bytes(raw_md5)).decode() if raw_md5 else None,
        tier=props.blob_tier,
        rehydrating=props.archive_status,
        immutable_until=policy.expiry_time if policy is not None else None,
        legal_hold=bool(getattr(props, "has_legal_hold", False)),
        modified=getattr(props, "creation_time", None) or props.last_modified,
    )
