"""A Delta log of years of publications opens in bounded time: archiver's commits are
checkpointed every CHECKPOINT_EVERY versions and the log entries expired before a
checkpoint deleted (delta.logRetentionDuration, 30 days), as delta-rs's own commits do.
delta-rs keeps every version inside the retention readable: it deletes entries only
before a checkpoint no younger than the oldest of them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from archiver.delta.commits import tidy


def append(root: Path, versions: range) -> None:
    for i in versions:
        write_deltalake(str(root), pa.table({"id": pa.array([i], pa.int64())}), mode="append")


def test_tidy_checkpoints_and_deletes_the_expired_log(tmp_path: Path) -> None:
    root = tmp_path / "t"
    append(root, range(6))  # versions 0..5
    tidy(DeltaTable(str(root)))  # a checkpoint at 5
    append(root, range(6, 12))  # 6..11
    log = root / "_delta_log"
    month_ago = time.time() - 40 * 86400
    for n in range(8):  # 0..7 written 40 days ago: expired
        os.utime(log / f"{n:020d}.json", (month_ago, month_ago))
    tidy(DeltaTable(str(root)))  # a checkpoint at 11; what expired before 5 goes
    names = sorted(p.name for p in log.iterdir())
    assert {f"{v:020d}.checkpoint.parquet" for v in (5, 11)} <= set(names)
    assert [n for n in names if n.endswith(".json")] == [f"{n:020d}.json" for n in range(5, 12)]
    table = DeltaTable(str(root))
    assert table.version() == 11
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(12))
