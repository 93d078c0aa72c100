"""The storage credentials serve's Iceberg REST catalog vends with a load: a read-only
(read, list) SAS of the archive's container, signed with the account key, that expires
within SAS_SECONDS, in the forms engines read it (pyiceberg's `adls.*` properties, an
`adls.sas-token.<account>.dfs.core.windows.net` key, a connection string naming the blob
endpoint). A flat-namespace account's SAS cannot be narrower than a container; who may
be given one is the catalog's decision (archiver.serve.rest). No stored access policy is
named: a vended SAS stays valid until it expires, whatever is revoked meanwhile."""

from __future__ import annotations

import datetime as dt
from typing import Any

from archiver.config import Settings, connection_string_parts

SAS_SECONDS = 3600


class NotVended(Exception):
    """No credentials can be vended here: one line saying why."""


def container_credentials(settings: Settings) -> list[dict[str, Any]]:
    """The REST spec's `storage-credentials` for the archive's storage: one SAS for its
    container; none on file storage (the engine reads the paths itself)."""
    from azure.storage.blob import (
        BlobServiceClient,
        ContainerSasPermissions,
        generate_container_sas,
    )

    location = settings.storage_location()
    if location.scheme != "az":
        return []
    parts = connection_string_parts(settings.azure_connection_string or "")
    key = parts.get("AccountKey")
    if not key:
        raise NotVended(
            "no credentials vended: serve signs a SAS with the account key, and "
            "AZURE_STORAGE_CONNECTION_STRING has none"
        )
    account = parts["AccountName"]
    now = dt.datetime.now(dt.UTC)
    expires = now + dt.timedelta(seconds=SAS_SECONDS)
    sas = generate_container_sas(
        account,
        location.container,
        account_key=key,
        permission=ContainerSasPermissions(read=True, list=True),
        start=now - dt.timedelta(minutes=1),  # a reader's clock a little behind
        expiry=expires,
    )
    endpoint = BlobServiceClient.from_connection_string(
        settings.azure_connection_string or ""
    ).url.rstrip("/")
    config = {
        "adls.connection-string": f"BlobEndpoint={endpoint};SharedAccessSignature={sas}",
        "adls.account-name": account,
        f"adls.sas-token.{account}.dfs.core.windows.net": sas,
        "adls.sas-token-expires-at-ms": str(int(expires.timestamp() * 1000)),
    }
    prefix = f"abfss://{location.container}@{account}.dfs.core.windows.net/"
    return [{"prefix": prefix, "config": config}]
