"""Where a table's Delta table is, and how delta-rs reaches it: the URI of the folder
that holds the table's files, and the storage options for the same credentials the
worker uploads with (never logged: they hold the account key or a token)."""

from __future__ import annotations

from archiver.config import Settings, StorageLocation, connection_string_parts
from archiver.errors import ConfigError
from archiver.storage.seam import join_name


def table_uri(location: StorageLocation, table: str) -> str:
    """`az://container/prefix/schema.table`, or the local folder."""
    if location.scheme == "file":
        return f"{location.container.rstrip('/')}/{table}"
    return f"az://{location.container}/{join_name(location.prefix, table)}"


def storage_options(settings: Settings, location: StorageLocation) -> dict[str, str]:
    """delta-rs's options for `location`: an account key (from the connection string,
    whose BlobEndpoint, as Azurite's, becomes the endpoint), or a token from
    azure-identity's DefaultAzureCredential for AZURE_STORAGE_ACCOUNT_URL (delta-rs has
    no credential chain of its own)."""
    if location.scheme == "file":
        return {}
    if settings.azure_connection_string:
        parts = connection_string_parts(settings.azure_connection_string)
        options = {"azure_storage_account_name": parts.get("AccountName", "")}
        if "AccountKey" in parts:
            options["azure_storage_account_key"] = parts["AccountKey"]
        elif "SharedAccessSignature" in parts:
            options["azure_storage_sas_key"] = parts["SharedAccessSignature"]
        else:
            raise ConfigError(
                "AZURE_STORAGE_CONNECTION_STRING: Delta Lake publishing needs an AccountKey "
                "or a SharedAccessSignature in it"
            )
        if endpoint := parts.get("BlobEndpoint"):
            options["azure_storage_endpoint"] = endpoint.rstrip("/")
            if endpoint.startswith("http://"):
                options["allow_http"] = "true"
        return options
    from urllib.parse import urlsplit

    from azure.identity import DefaultAzureCredential

    assert settings.azure_account_url
    account = (urlsplit(settings.azure_account_url).hostname or "").split(".")[0]
    token = DefaultAzureCredential().get_token("https://storage.azure.com/.default")
    return {"azure_storage_account_name": account, "bearer_token": token.token}
