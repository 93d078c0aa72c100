"""One catalogued file checked on storage: there, of the catalogued size and MD5, a
readable Parquet file of the catalogued rows and key range."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from archiver.files.stats import in_arrow_order, key_range, key_text
from archiver.model import CatalogFile
from archiver.storage.seam import Storage, file_md5


def verify_offline(storage: Storage, f: CatalogFile) -> list[str]:
    """What can be checked of a file in the Archive tier without reading it: there, of
    the catalogued size and MD5 as the service reports them."""
    stored = storage.stat(f.path)
    if stored is None:
        return [f"{f.path}: missing"]
    problems = []
    if stored.size != f.byte_size:
        problems.append(f"{f.path}: size {stored.size}, catalog says {f.byte_size}")
    if stored.md5 is not None and stored.md5 != f.md5:
        problems.append(f"{f.path}: md5 {stored.md5} as stored, catalog says {f.md5}")
    return problems


def verify_file(storage: Storage, f: CatalogFile, workdir: Path) -> list[str]:
    """Problems with one catalogued file: missing, size, MD5, rows, key range."""
    name = f.path
    stored = storage.stat(name)
    if stored is None:
        return [f"{name}: missing"]
    problems = []
    if stored.size != f.byte_size:
        problems.append(f"{name}: size {stored.size}, catalog says {f.byte_size}")
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        local = Path(tmp) / "verify.parquet"
        storage.download(name, local)
        md5 = file_md5(local)
        if md5 != f.md5:
            problems.append(f"{name}: md5 {md5}, catalog says {f.md5}")
        try:
            parquet = pq.ParquetFile(local)
            rows = parquet.metadata.num_rows
            keys = parquet.read(columns=f.key_columns)
        except (pa.ArrowException, OSError) as exc:
            return [*problems, f"{name}: unreadable Parquet ({exc})"]
    if rows != f.row_count:
        problems.append(f"{name}: {rows} rows, catalog says {f.row_count}")
    elif rows and in_arrow_order([keys.schema.field(k).type for k in f.key_columns]):
        lo, hi = key_range(keys, f.key_columns)
        found = ([key_text(v) for v in lo], [key_text(v) for v in hi])
        if found != (f.min_key, f.max_key):
            problems.append(
                f"{name}: keys {found[0]}..{found[1]}, catalog says {f.min_key}..{f.max_key}"
            )
    elif rows:  # ordered by PostgreSQL (a collation): the catalogued ends must be there
        columns = [keys.column(k).to_pylist() for k in f.key_columns]
        present = {tuple(key_text(v) for v in row) for row in zip(*columns, strict=True)}
        for end in (f.min_key, f.max_key):
            if tuple(end) not in present:
                problems.append(f"{name}: catalogued key {end} is not in the file")
    return problems
