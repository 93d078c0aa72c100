"""parquet.Pending: small pieces buffered into row groups of ~ROW_GROUP_BYTES, each
piece's bytes counted once (a merge of thousands of daily files summed them again for
every piece: quadratic)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from archiver import parquet
from archiver.parquet import Pending


def test_pieces_become_row_groups_of_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    piece = pa.table({"id": pa.array(range(1000), pa.int64())})  # 8,000 bytes
    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", 5 * piece.nbytes)
    path = tmp_path / "merged.parquet"
    with pq.ParquetWriter(path, piece.schema) as writer:
        pending = Pending(writer)
        for _ in range(12):
            pending.add(piece)
        assert pending.bytes == 2 * piece.nbytes  # two groups written, two pieces held
        pending.flush()
        pending.flush()  # nothing held: no empty row group
    groups = pq.ParquetFile(path).metadata
    assert [groups.row_group(i).num_rows for i in range(groups.num_row_groups)] == [
        5000,
        5000,
        2000,
    ]
