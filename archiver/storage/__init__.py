"""Where Parquet files go. The pipeline only sees the seam (`seam.Storage`); a local
directory (`local`) and Azure Blob Storage (`azure`) implement it, and
`archiver.testing.memory.MemoryStorage` does in memory for fast tests. `open_storage`
picks one from ARCHIVER_STORAGE_URL."""

from __future__ import annotations

from archiver.config import Settings
from archiver.storage.azure import AzureStorage
from archiver.storage.local import LocalStorage
from archiver.storage.seam import Storage


def open_storage(settings: Settings) -> Storage:
    """The Storage for ARCHIVER_STORAGE_URL."""
    location = settings.storage_location()
    if location.scheme == "file":
        return LocalStorage(location)

    return AzureStorage(location, settings)
