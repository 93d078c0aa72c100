"""archiver: move old PostgreSQL rows into Parquet on Azure Blob Storage, never losing or
duplicating a row."""

__version__ = "0.1.0"
