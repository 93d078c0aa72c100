"""What an Azure container does that decides what purge and erase can reach, for
`archiver doctor`: versioning and soft delete (deleted bytes that stay), immutability
(bytes nothing may delete), a hierarchical namespace (no index tags, no version-level
write-once), and whether this credential may set tiers and tags. Each answer is a line
saying what it means; a question the credential may not ask is answered as such."""

from __future__ import annotations

import contextlib
from typing import Any


def azure_features(container: Any, probe: str) -> list[tuple[str, str]]:
    """The container's facts; `probe`: a blob name to write, try and delete."""
    from azure.core.exceptions import AzureError, HttpResponseError

    def refused(exc: AzureError) -> str:
        code = getattr(exc, "error_code", None) if isinstance(exc, HttpResponseError) else None
        return f"not known ({code or type(exc).__name__}: this credential may not ask)"

    lines: list[tuple[str, str]] = []
    service = container._get_blob_service_client()  # same credential and endpoint
    try:
        account = service.get_account_information()
        hns = bool(account.get("is_hns_enabled"))
        lines.append(
            (
                f"hierarchical namespace: {'on (ADLS Gen2)' if hns else 'off'}",
                "no index tags (set ARCHIVER_BLOB_TAGS=false) and no version-level "
                "write-once; files are found through the catalog"
                if hns
                else "index tags and version-level write-once are available",
            )
        )
    except AzureError as exc:
        lines.append((f"hierarchical namespace: {refused(exc)}", "see the account's settings"))
    try:
        soft = service.get_service_properties()["delete_retention_policy"]
        lines.append(
            (
                f"blob soft delete: {f'on, {soft.days} days' if soft.enabled else 'off'}",
                f"purged and erased files stay recoverable for {soft.days} days, then go"
                if soft.enabled
                else "purged and erased files are gone at once",
            )
        )
    except AzureError as exc:
        lines.append((f"blob soft delete: {refused(exc)}", "ask the account's owner"))
    try:
        props = container.get_container_properties()
        worm = bool(getattr(props, "immutable_storage_with_versioning_enabled", False))
        policy = bool(props.has_immutability_policy)
        hold = bool(props.has_legal_hold)
        said = [
            *(["version-level write-once"] if worm else []),
            *(["a container immutability policy"] if policy else []),
            *(["a container legal hold"] if hold else []),
        ]
        lines.append(
            (
                f"immutability: {', '.join(said) or 'none'}",
                "purge and erase refuse files still under a policy or hold; archiver never "
                "overwrites a name"
                if said
                else "per-file policies and holds (archiver protect) need version-level "
                "write-once enabled on the container",
            )
        )
    except AzureError as exc:
        lines.append((f"immutability: {refused(exc)}", "ask the account's owner"))
    lines += _probe(container.get_blob_client(probe), refused)
    return lines


def _probe(blob: Any, refused: Any) -> list[tuple[str, str]]:
    """Write a probe blob and try tags and tiers on it; versioning shows as the version
    id the upload answers with."""
    from azure.core.exceptions import AzureError

    try:
        written = blob.upload_blob(b"probe", overwrite=True)
    except AzureError as exc:
        return [(f"tiers, tags, versioning: {refused(exc)}", "doctor's write check says more")]
    versioned = bool(written.get("version_id"))
    lines = [
        (
            f"blob versioning: {'on' if versioned else 'off'}",
            "every purged or erased file stays as an earlier version until a lifecycle rule "
            "deletes versions: erasure does not reach them"
            if versioned
            else "a deleted file leaves no version behind",
        )
    ]
    try:
        blob.set_blob_tags({"archiver-probe": "1"})
        lines.append(("index tags: this credential may set them", "lifecycle rules can use them"))
    except AzureError as exc:
        lines.append(
            (f"index tags: {refused(exc)}", "files are written without tags (Tag permission)")
        )
    try:
        blob.set_standard_blob_tier("Cool")
        lines.append(("access tiers: this credential may set them", "archiver tier works"))
    except AzureError as exc:
        lines.append((f"access tiers: {refused(exc)}", "archiver tier and rehydrate fail"))
    with contextlib.suppress(AzureError):
        blob.delete_blob()
    return lines
