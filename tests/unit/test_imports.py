"""Commands that touch no rows stay light: the CLI and what status, jobs, show, cancel,
pause and the queue need import no pyarrow, Azure SDK or APScheduler."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyarrow", "azure.storage.blob", "apscheduler", "adbc_driver_postgresql.dbapi")


def test_the_cli_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import archiver.cli, archiver.store.jobs, archiver.terminal, archiver.bulk\n"
        "import archiver.operations.enqueue, archiver.operations.restore, archiver.operations.verify\n"
        "import archiver.operations.inspect, archiver.operations.grants\n"
        "import archiver.model, archiver.limits, archiver.config, archiver.doctor\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_the_bulk_driver_leaves_pyarrow_dataset_unloaded_until_used() -> None:
    """adbc's dbapi imports pyarrow.dataset for adbc_ingest alone; archiver defers it
    (bulk._DeferredModule) and it still loads, whole, on first use."""
    code = (
        "import sys\n"
        "from archiver import bulk\n"
        "bulk._DeferredModule.install('pyarrow.dataset')\n"
        "import adbc_driver_postgresql.dbapi, pyarrow.dataset\n"
        "print(type(sys.modules['pyarrow.dataset']).__name__)\n"
        "import pyarrow\n"
        "print(pyarrow.dataset.Dataset.__name__, type(sys.modules['pyarrow.dataset']).__name__)\n"
        "from pyarrow.dataset import Scanner\n"
        "print(Scanner.__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["_DeferredModule", "Dataset", "module", "Scanner"]
