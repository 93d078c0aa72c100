"""An earlier commit of this repository, runnable as the release it was: its tree
exported with `git archive` into a folder, where `python -m archiver` (run with that
folder as its working directory) imports its code with this checkout's installed
dependencies. Used by the bench's `--against` and by the upgrade test."""

from __future__ import annotations

import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def export_commit(commit: str, into: Path) -> str:
    """`commit`'s tree in `into`; its short hash. The migrations are linked where the
    release's own package looks for them (`archiver.migrations`, installed from `sql/`):
    without it, the editable install of this checkout maps that name to this checkout's
    `sql/`, and the old code would run the new migrations."""
    short = subprocess.run(
        ["git", "rev-parse", "--short=9", f"{commit}^{{commit}}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    archive = subprocess.run(
        ["git", "archive", "--format=tar", short], cwd=ROOT, check=True, capture_output=True
    ).stdout
    into.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    migrations = into / "archiver" / "migrations"
    if not migrations.exists():
        migrations.symlink_to(Path("..") / "sql", target_is_directory=True)
    return short
