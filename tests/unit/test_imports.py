"""Commands that touch no rows stay light: the CLI and what status, jobs, show, cancel,
pause and the queue need import no pyarrow, Azure SDK or APScheduler."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyarrow", "azure.storage.blob", "apscheduler", "adbc_driver_postgresql.dbapi")


def test_the_cli_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import archiver.cli, archiver.operations, archiver.jobqueue, archiver.console\n"
        "import archiver.model, archiver.config, archiver.grants, archiver.doctor\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
