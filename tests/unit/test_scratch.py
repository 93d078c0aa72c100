"""archiver.scratch: a dead process's scratch directory is removed by the next process to
start; a live one's, and whatever else is in the temporary directory, stay."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from archiver import scratch


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_the_dead_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f"archiver-erase-{dead_pid()}-abc123_x"
    live = tmp_path / f"archiver-remove-orphans-{os.getpid()}-k9z"
    others = [tmp_path / "archiver-pg-2a1b3c4d", tmp_path / "tmpq1w2e3", tmp_path / "notes"]
    for d in (dead, live, *others):
        d.mkdir()
        (d / "f.parquet").write_bytes(b"x")
    assert scratch.remove_stale(tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (live, *others))


def test_a_process_directory_is_the_tempfile_default_and_goes_at_its_end(
    tmp_path: Path,
) -> None:
    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        with scratch.directory("restore") as path:
            assert path.parent == tmp_path
            assert path.name.startswith(f"archiver-restore-{os.getpid()}-")
            assert tempfile.gettempdir() == str(path)
            with tempfile.NamedTemporaryFile() as f:
                assert Path(f.name).parent == path
        assert not path.exists()
    finally:
        tempfile.tempdir = old
